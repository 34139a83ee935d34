"""service/kafka/delivery.py: one callback per batch; acknowledged together once every record is reported."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

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
        lambda r: r,
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
