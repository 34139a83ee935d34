"""The sink against the real broker: a batch's outputs share one delivery callback and are acknowledged
together; one the broker refuses is handed back alone while the rest of its batch is acknowledged; those
that fail while their topic is missing are held and land in input order once it exists."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable

import msgspec

from service.config import KafkaSettings
from service.flow.records import InputRecord, OutRecord
from service.kafka.sink import Sink
from service.tools.topics import TopicAdmin
from tests.support.harness import assert_order_per_partition, read_topic, source_of

# Batches sent 0.1 s apart to a missing topic, which is created after CREATED_AFTER of them: by then the
# first failures have been sent again several times, on a back-off that has grown.
MISSING_BATCHES = 40
CREATED_AFTER = 30


def _outs(topic: str, batch: int, size: int, value: bytes = b"{}") -> list[OutRecord]:
    """``size`` outputs, each answering its own input offset (batch * 1000 + i of partition 0)."""
    outs = []
    for i in range(size):
        key = f"k{i % 7}".encode()
        outs.append(OutRecord(topic, key, value + b" %d" % i, [("h", b"v")], _source(batch * 1000 + i)))
    return outs


def _source(offset: int) -> InputRecord:
    return InputRecord("in", 0, offset, None, b"", None, None, 0.0)


def _acked_until(sink: Sink, expected: int, timeout_s: float = 30.0) -> list[InputRecord]:
    acked: list[InputRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(acked) < expected and time.monotonic() < deadline:
        acked += sink.poll(0.05)
    return acked


def test_every_output_of_many_batches_is_acknowledged_exactly_once(
    kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=3, prefix="sink")
    sink = Sink(KafkaSettings(bootstrap_servers=kafka_bootstrap))
    sent = []
    acked: list[InputRecord] = []
    for batch in range(20):
        outs = _outs(topic, batch, 1 + batch * 13 % 50)
        sink.send_all(outs)
        sent += [out.source for out in outs]
        acked += sink.poll(0)  # some batches are acknowledged while later ones are still being sent
    acked += sink.flush(30)
    acked += _acked_until(sink, len(sent) - len(acked))
    assert sorted(r.offset for r in acked) == sorted(r.offset for r in sent)
    assert sink.pending() == 0
    assert sink.take_refused() == []


def _refused_within(sink: Sink, timeout_s: float = 30.0) -> tuple[list, list[InputRecord]]:
    refused: list = []
    acked: list[InputRecord] = []
    deadline = time.monotonic() + timeout_s
    while not refused and time.monotonic() < deadline:
        acked += sink.poll(0.05)
        refused += sink.take_refused()
    return refused, acked


def test_an_output_produce_refuses_is_handed_back_and_the_rest_of_its_batch_acknowledged(
    kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=1, prefix="sink-large")
    sink = Sink(KafkaSettings(bootstrap_servers=kafka_bootstrap))
    outs = _outs(topic, 0, 5)
    # Over the producer's own message.max.bytes (16 MiB): refused before it is queued.
    large = OutRecord(topic, b"big", os.urandom(17 * 2**20), None, _source(999))
    outs.insert(2, large)
    sink.send_all(outs)
    acked = sink.flush(30)
    refused, more = _refused_within(sink)
    assert [out for out, _why in refused] == [large]
    assert sorted(r.offset for r in acked + more) == [0, 1, 2, 3, 4]


def test_an_output_the_broker_refuses_is_matched_back_and_handed_back(
    kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=1, prefix="sink-small", config={"max.message.bytes": "2048"})
    sink = Sink(KafkaSettings(bootstrap_servers=kafka_bootstrap))
    # Random bytes: compression cannot shrink them under the topic's limit.
    large = OutRecord(topic, b"big", os.urandom(8192), None, _source(7))
    sink.send_all([large])
    acked = sink.flush(30)
    refused, more = _refused_within(sink)
    assert [out for out, _why in refused] == [large]
    assert "large" in refused[0][1].lower()
    assert acked + more == []


def test_outputs_to_a_missing_topic_are_held_and_land_in_input_order_once_it_exists(
    kafka_bootstrap: str, admin: TopicAdmin
) -> None:
    """Batches sent over time while the topic is missing (the producer may not create it) all fail and are
    held; once it exists every output lands once, and those of each input partition in offset order
    within each output partition, whatever order the failures were reported in."""
    topic = f"sink-missing-{uuid.uuid4().hex[:12]}"
    extra = {"allow.auto.create.topics": False, "topic.metadata.propagation.max.ms": 500}
    sink = Sink(KafkaSettings(bootstrap_servers=kafka_bootstrap, producer_extra=extra))
    sent: list[InputRecord] = []
    acked: list[InputRecord] = []
    created = False
    try:
        for batch in range(MISSING_BATCHES):
            outs = [
                _answer(topic, InputRecord("in", i % 2, batch * 10 + i, None, b"", None, None, 0.0))
                for i in range(10)
            ]
            sink.send_all(outs)
            sent += [out.source for out in outs]
            acked += sink.poll(0.1)
            if batch == CREATED_AFTER:
                assert acked == [] and sink.pending() > 0, "delivered to a topic that does not exist"
                admin.create([topic], 3)
                created = True
        acked += sink.flush(60)
        landed = read_topic(kafka_bootstrap, topic, expected=len(sent), timeout=60)
    finally:
        if created:
            admin.delete([topic])
    coords = sorted((r.partition, r.offset) for r in sent)
    assert sorted((r.partition, r.offset) for r in acked) == coords
    assert sorted(map(source_of, landed)) == coords, "an output lost or repeated"
    assert_order_per_partition(landed)


def _answer(topic: str, source: InputRecord) -> OutRecord:
    """An output keyed over five keys (spread over the output partitions) that names its input."""
    value = msgspec.json.encode({"source": {"partition": source.partition, "offset": source.offset}})
    return OutRecord(topic, b"k%d" % (source.offset % 5), value, None, source)
