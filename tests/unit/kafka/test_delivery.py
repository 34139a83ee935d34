"""service/kafka/delivery.py: one callback per batch; acknowledged together once every record is reported."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from service.kafka.delivery import Batch

TIMED_OUT = KafkaError(KafkaError._MSG_TIMED_OUT)
TOO_LARGE = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)

Record = tuple[str, bytes | None, bytes]  # topic, key, value: exactly what a report carries


class Report:
    """What confluent-kafka hands the callback: the produced message's topic, key and value."""

    def __init__(self, record: Record) -> None:
        self._record = record

    def topic(self) -> str:
        return self._record[0]

    def key(self) -> bytes | None:
        return self._record[1]

    def value(self) -> bytes:
        return self._record[2]


RECORDS: list[Record] = [("out", b"a", b"1"), ("out", b"b", b"2"), ("out", None, b"3")]


@pytest.fixture
def seen():
    return {"done": [], "failed": []}


def batch_of(records, seen) -> Batch[Record]:
    return Batch(
        records,
        lambda r: (r[0], r[2], r[1], None),  # what produce is given: topic, value, key, headers
        lambda record, err: seen["failed"].append((record, err.code())),
        seen["done"].append,
    )


def test_done_once_every_record_is_reported_and_released(seen):
    batch = batch_of(RECORDS, seen)
    for record in reversed(RECORDS):  # reports come in any order
        batch(None, Report(record))
    assert seen["done"] == []  # produce has not returned yet: not done before release
    batch.release()
    assert seen["done"] == [batch]
    assert batch.delivered() == RECORDS
    assert seen["failed"] == []


def test_release_first_then_the_last_report_finishes_it(seen):
    batch = batch_of(RECORDS, seen)
    batch.release()
    batch(None, Report(RECORDS[0]))
    batch(None, Report(RECORDS[1]))
    assert seen["done"] == []
    batch(None, Report(RECORDS[2]))
    assert seen["done"] == [batch]


def test_a_failed_delivery_is_matched_by_content_and_left_out(seen):
    batch = batch_of(RECORDS, seen)
    batch.release()
    batch(None, Report(RECORDS[0]))
    batch(TIMED_OUT, Report(RECORDS[1]))
    batch(None, Report(RECORDS[2]))
    assert seen["failed"] == [(RECORDS[1], KafkaError._MSG_TIMED_OUT)]
    assert seen["done"] == [batch]
    assert batch.delivered() == [RECORDS[0], RECORDS[2]]


def test_identical_records_failing_each_fail_one_of_them(seen):
    twins = [("out", b"k", b"v"), ("out", b"k", b"v")]
    batch = batch_of(twins, seen)
    batch.release()
    batch(TIMED_OUT, Report(twins[0]))
    batch(TIMED_OUT, Report(twins[1]))
    assert len(seen["failed"]) == 2
    assert batch.delivered() == []


def test_a_record_produce_refused_is_failed_and_counted(seen):
    batch = batch_of(RECORDS, seen)
    batch(None, Report(RECORDS[0]))
    batch.not_queued(1, TOO_LARGE)
    batch(None, Report(RECORDS[2]))
    batch.release()
    assert seen["failed"] == [(RECORDS[1], KafkaError.MSG_SIZE_TOO_LARGE)]
    assert batch.delivered() == [RECORDS[0], RECORDS[2]]
    assert seen["done"] == [batch]


def test_a_report_matching_no_record_fails_every_record_not_failed_yet(seen):
    """Nothing may be told delivered that is not known to be: all are handed on (duplicates at worst)."""
    batch = batch_of(RECORDS, seen)
    batch.release()
    batch(None, Report(RECORDS[0]))
    batch(TIMED_OUT, Report(("out", b"a", b"something else")))
    assert [r for r, _ in seen["failed"]] == RECORDS
    batch(None, Report(RECORDS[2]))
    assert seen["done"] == [batch]
    assert batch.delivered() == []


def test_an_empty_batch_is_done_at_release(seen):
    batch = batch_of([], seen)
    batch.release()
    assert seen["done"] == [batch]
    assert batch.delivered() == []


class Producer:
    """Queues what produce is given; the queue is full on the first try of ``full_once``, and produce
    refuses ``refused`` outright (as librdkafka does a record over message.max.bytes)."""

    def __init__(self, full_once: bytes, refused: bytes) -> None:
        self.queued: list[tuple] = []
        self.polls = 0
        self._full_once, self._refused = full_once, refused

    def produce(self, topic, value, key, partition, callback, on_delivery, timestamp, headers) -> None:
        if value == self._full_once:
            self._full_once = b""
            raise BufferError("Local: Queue full")
        if value == self._refused:
            raise KafkaException(TOO_LARGE)
        self.queued.append((topic, value, key, partition, callback, headers))

    def poll(self, timeout_s: float) -> int:
        self.polls += 1
        return 0


def test_produce_all_waits_out_a_full_queue_fails_a_refused_record_and_releases(seen):
    producer = Producer(full_once=b"1", refused=b"2")
    batch = batch_of(RECORDS, seen)
    batch.produce_all(producer)  # type: ignore[arg-type]
    assert producer.polls == 1  # served reports once while the queue was full, then queued it
    assert [(q[0], q[1], q[2], q[3], q[5]) for q in producer.queued] == [
        ("out", b"1", b"a", -1, None),  # any partition: the partitioner chooses
        ("out", b"3", None, -1, None),
    ]
    assert all(q[4] is batch for q in producer.queued)
    assert seen["failed"] == [(RECORDS[1], KafkaError.MSG_SIZE_TOO_LARGE)]
    assert seen["done"] == []  # released, but two reports are still to come
    batch(None, Report(RECORDS[0]))
    batch(None, Report(RECORDS[2]))
    assert seen["done"] == [batch]
    assert batch.delivered() == [RECORDS[0], RECORDS[2]]
