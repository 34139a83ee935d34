"""Reading a topic back from its beginning, without a consumer group's commits: for ``verify``, the demo,
the bench and the tests. Records come out as :class:`service.flow.records.InputRecord` values."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from service.config import private_values_of, redactor
from service.errors import NotAuthorizedError, UnknownTopicError
from service.flow.records import Headers, InputRecord
from service.kafka.lookup import Offsets
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


class Tail:
    """Follows topics live from their beginning, on a thread of its own, keeping each record's value with the
    wall-clock time (ms) it was read: what a downstream consumer sees, and when. Start with :meth:`start`,
    end with :meth:`stop`. Not for the run path: it keeps everything it reads."""

    def __init__(self, client_conf: ClientConf, topics: list[str], timeout_s: float = 60) -> None:
        self._consumer = _reader(client_conf)
        self._topics = topics
        self._timeout_s = timeout_s
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="tail", daemon=True)
        self.read: dict[str, list[tuple[bytes | None, int]]] = {topic: [] for topic in topics}
        """Per topic, ``(value, read at ms)`` in the order read; appended to by the tail's thread only."""
        self.headers: dict[str, list[Headers | None]] = {topic: [] for topic in topics}
        """Per topic, each record's headers, in the order of :attr:`read`."""
        self.error: BaseException | None = None

    def start(self) -> None:
        """Assign every partition of the topics from the beginning and start following. Raises
        UnknownTopicError for a topic that does not exist."""
        parts = [
            TopicPartition(t, p, OFFSET_BEGINNING)
            for t in self._topics
            for p in _partitions(self._consumer, t, self._timeout_s)
        ]
        self._consumer.assign(parts)
        self._thread.start()

    def _follow(self) -> None:
        try:
            while not self._stopping.is_set():
                # consume() would wait for all 500 or its timeout: the first one at once, then what is there.
                first = self._consumer.poll(0.1)
                if first is None:
                    continue
                read_ms = time.time_ns() // 1_000_000  # as soon as the client handed them over
                for msg in [first, *self._consumer.consume(500, 0)]:
                    if msg.error() is None:
                        topic = msg.topic() or ""
                        # First: read's length says it is there. A consumed record's header values are
                        # bytes (the stubs' wider type does not apply).
                        self.headers[topic].append(msg.headers())  # type: ignore[arg-type]
                        self.read[topic].append((msg.value(), read_ms))
        except BaseException as exc:  # kept for the caller: a thread has no one else to tell
            self.error = exc

    def wait_for(self, topic: str, count: int, timeout_s: float) -> bool:
        """Until ``count`` records of ``topic`` were read; False if not within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while len(self.read[topic]) < count:
            if time.monotonic() > deadline or not self._thread.is_alive():
                return False
            time.sleep(0.05)
        return True

    def stop(self) -> None:
        """Stop following and close the consumer; what was read stays in :attr:`read`."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        self._consumer.close()


@contextlib.contextmanager
def offsets_lookup(client_conf: ClientConf) -> Iterator[Offsets]:
    """Offsets asked of the cluster (partitions, watermarks, by time) through a reader's consumer."""
    consumer = _reader(client_conf)
    try:
        yield Offsets(consumer, redact=redactor(private_values_of(client_conf)))
    finally:
        consumer.close()


def _reader(client_conf: ClientConf) -> Consumer:
    conf = {
        **client_conf,
        "group.id": f"{READER_GROUPS}{uuid.uuid4().hex}",  # never committed: no trace in the cluster
        "enable.auto.commit": False,
        # Only what committed transactions wrote (exactly-once output), never what an aborted one did.
        # librdkafka's default too, said here because every check of the output rests on it.
        "isolation.level": "read_committed",
        # EOF events end a partition whose last offsets are no records (transaction markers).
        "enable.partition.eof": True,
    }
    return Consumer(conf | {"logger": logs.client_log(conf)})


READER_GROUPS = "microbatch-reader-"
"""The prefix of the (never committed) group ids a reader uses: its principal needs READ on groups with it."""


def _partitions(consumer: Consumer, topic: str, timeout_s: float) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
    if metadata.error is not None:
        if metadata.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise NotAuthorizedError(
                f"not authorised to DESCRIBE topic {topic!r}: grant READ and DESCRIBE on it"
            )
        raise UnknownTopicError(f"topic {topic!r}: {metadata.error.str()}")
    return sorted(metadata.partitions)


def _refused(err: KafkaError, topic: str) -> NotAuthorizedError | None:
    if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
        return NotAuthorizedError(
            f"not authorised to READ a group of its own: grant READ on groups prefixed {READER_GROUPS!r} "
            "(nothing is ever committed there)"
        )
    if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        return NotAuthorizedError(f"not authorised to READ topic {topic!r}: grant READ and DESCRIBE on it")
    return None


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
                    raise _refused(err, msg.topic() or "") or RuntimeError(err.str())
                remaining.pop(partition, None)
                continue
            if end is None:
                continue
            if offset < end:
                yield msg
            if offset >= end - 1:
                del remaining[partition]
