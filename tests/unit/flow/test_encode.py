"""service/flow/encode.py: the result and dead-letter record formats."""

from __future__ import annotations

import msgspec

from service.errors import Reason
from service.flow.encode import dead_letter, replace_refused, result_record
from service.flow.model import ModelRef
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


def test_a_result_of_one_item_of_many_names_its_index_and_carries_the_included_fields(make_record):
    record = make_record(b"otlp", topic="logs", partition=1, offset=7)
    fields = {"resource.service.name": "checkout", "severity_text": "ERROR"}
    out = result_record(record, "o", MODEL, {"label": "failure"}, 4, 5, 6, index=3, fields=fields)
    value = msgspec.json.decode(out.value)
    assert value["source"] == {"topic": "logs", "partition": 1, "offset": 7, "index": 3}
    assert value["fields"] == fields
    assert out.index == 3


def test_a_result_of_a_one_item_message_has_no_index_and_no_fields(make_record):
    value = msgspec.json.decode(result_record(make_record(), "o", MODEL, {}, 1, 5, 6).value)
    assert "index" not in value["source"]
    assert "fields" not in value


def test_the_dead_letter_of_one_item_carries_the_whole_message_and_its_index(make_record):
    record = make_record(b"the whole request", offset=9)
    out = dead_letter(Rejection(record, Reason.INVALID_EVENT, "field 'body' is missing", 2), "dead")
    headers = dict(out.headers)
    assert out.value == b"the whole request"
    assert headers["source.index"] == b"2"
    assert headers["source.offset"] == b"9"
    assert "source.index" not in dict(
        dead_letter(Rejection(record, Reason.INVALID_EVENT, "d"), "dead").headers
    )


def test_a_refused_result_becomes_a_dead_letter_of_the_same_item(make_record):
    out = result_record(make_record(offset=4), "o", MODEL, {}, 1, 5, 6, index=11)
    replacement = replace_refused(out, "Broker: Message size too large", "dead")
    assert replacement is not None
    headers = dict(replacement.headers)
    assert headers["error.reason"] == b"output_rejected"
    assert headers["source.index"] == b"11"
    assert replacement.index == 11
