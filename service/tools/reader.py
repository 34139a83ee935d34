"""Reading a topic back from its beginning, without a consumer group's commits: for ``verify``, the demo,
the bench and the tests. Records come out as :class:`service.flow.records.InputRecord` values."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from service.errors import UnknownTopicError
from service.flow.records import InputRecord
from service.kafka.source import to_record
from service.observability import logs

ClientConf = Mapping[str, Any]


def read_to_end(client_conf: ClientConf, topic: str, timeout_s: float = 60) -> Iterator[InputRecord]:
    """Yield every record of ``topic`` from the beginning up to the end it had when reading started.
    ``client_conf`` holds the connection options (bootstrap servers, security). Raises UnknownTopicError
    for a topic that does not exist, TimeoutError if the end is not reached within ``timeout_s`` (e.g. the
    broker is down), RuntimeError for an error the client reports while reading."""
    consumer = _reader(client_conf)
    try:
        ends = {}
        for partition in _partitions(consumer, topic, timeout_s):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
            if high > low:
                ends[partition] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        for msg in _consume_until(consumer, ends, timeout_s):
            yield to_record(msg, time.monotonic())
    finally:
        consumer.close()


def read_at_least(
    client_conf: ClientConf, topic: str, count: int, timeout_s: float = 60, settle_s: float = 1.0
) -> list[InputRecord]:
    """Every record of ``topic`` from the beginning, waiting for them to arrive: until ``count`` were read
    (then ``settle_s`` more, so that surplus records, duplicates, are seen too) or ``timeout_s`` passed.
    Returns what was read, possibly fewer than ``count``."""
    consumer = _reader(client_conf)
    found: list[InputRecord] = []
    try:
        parts = _partitions(consumer, topic, timeout_s)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        deadline = time.monotonic() + timeout_s
        settled: float | None = None
        while time.monotonic() < (settled or deadline):
            now = time.monotonic()
            found += [to_record(m, now) for m in consumer.consume(500, 0.2) if m.error() is None]
            if settled is None and len(found) >= count:
                settled = time.monotonic() + settle_s
    finally:
        consumer.close()
    return found


def _reader(client_conf: ClientConf) -> Consumer:
    conf = {
        **client_conf,
        "group.id": f"microbatch-reader-{uuid.uuid4().hex}",  # never committed: no trace in the cluster
        "enable.auto.commit": False,
        # EOF events end a partition whose last offsets are no records (transaction markers).
        "enable.partition.eof": True,
    }
    return Consumer(conf | {"logger": logs.client_log(conf)})


def _partitions(consumer: Consumer, topic: str, timeout_s: float) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
    if metadata.error is not None:
        raise UnknownTopicError(f"topic {topic!r}: {metadata.error.str()}")
    return sorted(metadata.partitions)


def _consume_until(consumer: Consumer, ends: dict[int, int], timeout_s: float) -> Iterator[Message]:
    deadline = time.monotonic() + timeout_s
    remaining = dict(ends)
    while remaining:
        if time.monotonic() > deadline:
            raise TimeoutError(f"partitions {sorted(remaining)} not read to their end in {timeout_s}s")
        for msg in consumer.consume(1000, 0.5):
            partition, offset, err = msg.partition() or 0, msg.offset() or 0, msg.error()
            end = remaining.get(partition)
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(err.str())
                remaining.pop(partition, None)
                continue
            if end is None:
                continue
            if offset < end:
                yield msg
            if offset >= end - 1:
                del remaining[partition]
