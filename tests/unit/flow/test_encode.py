"""service/flow/encode.py: the result and dead-letter record formats."""

from __future__ import annotations

import msgspec

from service.errors import Reason
from service.flow.encode import ModelRef, dead_letter, result_record
from service.flow.records import Rejection

MODEL = ModelRef("metrics-anomaly", "2.0.1", "CPUExecutionProvider")


def test_result_record_answers_its_input(make_record):
    record = make_record(
        b'{"cpu": 1}',
        topic="metrics",
        partition=4,
        offset=981,
        key=b"host-7",
        headers=[("trace", b"abc")],
        timestamp_ms=1_700_000_000_123,
    )
    out = result_record(
        record,
        "scored",
        MODEL,
        {"score": 0.25, "is_anomaly": False},
        12,
        1_700_000_000_200,
        1_700_000_000_260,
    )
    assert out.topic == "scored"
    assert out.key == b"host-7"
    assert out.headers == [("trace", b"abc")]
    assert out.source is record
    value = msgspec.json.decode(out.value)
    assert value == {
        "source": {"topic": "metrics", "partition": 4, "offset": 981},
        "model": {"name": "metrics-anomaly", "version": "2.0.1", "provider": "CPUExecutionProvider"},
        "result": {"score": 0.25, "is_anomaly": False},
        "batch_size": 12,
        "timestamps": {
            "event_ms": 1_700_000_000_123,
            "consumed_ms": 1_700_000_000_200,
            "produced_ms": 1_700_000_000_260,
        },
    }


def test_result_record_without_event_timestamp(make_record):
    out = result_record(make_record(timestamp_ms=None), "o", MODEL, {}, 1, 5, 6)
    assert msgspec.json.decode(out.value)["timestamps"]["event_ms"] is None


def test_dead_letter_keeps_key_and_bytes_and_says_why_and_where_from(make_record):
    original = b'{"cpu": NaN}'
    record = make_record(
        original, topic="metrics", partition=2, offset=17, key=b"k", headers=[("trace", b"t")]
    )
    out = dead_letter(Rejection(record, Reason.INVALID_JSON, "JSON is malformed"), "dead")
    assert out.topic == "dead"
    assert out.key == b"k"
    assert out.value == original
    assert out.source is record
    assert out.headers == [
        ("trace", b"t"),
        ("error.reason", b"invalid_json"),
        ("error.message", b"JSON is malformed"),
        ("source.topic", b"metrics"),
        ("source.partition", b"2"),
        ("source.offset", b"17"),
    ]


def test_dead_letter_does_not_mutate_the_input_headers(make_record):
    headers = [("trace", b"t")]
    record = make_record(b"x", headers=headers)
    dead_letter(Rejection(record, Reason.INVALID_JSON, "bad"), "dead")
    assert headers == [("trace", b"t")]
    assert record.headers == [("trace", b"t")]


def test_dead_letter_of_a_tombstone_keeps_the_value_null(make_record):
    out = dead_letter(Rejection(make_record(None), Reason.EMPTY_VALUE, "null value"), "dead")
    assert out.value is None
    assert dict(out.headers)["error.reason"] == b"empty_value"


def test_dead_letter_message_is_utf8_and_bounded(make_record):
    detail = "é" * 5000
    out = dead_letter(Rejection(make_record(b"x"), Reason.INVALID_EVENT, detail), "dead")
    message = dict(out.headers)["error.message"]
    assert 0 < len(message) <= 1000
    assert message.decode("utf-8", "ignore").startswith("ééé")


def test_every_reason_is_written_as_its_code(make_record):
    for reason in Reason:
        out = dead_letter(Rejection(make_record(b"x"), reason, "d"), "dead")
        assert dict(out.headers)["error.reason"].decode() == reason.value
