"""service/formats/otlp.py: OTLP logs requests in both encodings, from the Collector's own marshalers
(tests/fixtures/shippers) and from the official protobuf classes."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from service.errors import InvalidMessage, Reason
from service.formats.otlp import OtlpJsonFormat, OtlpProtoFormat
from service.tools.generate import EventGenerator
from service.tools.generate.otlp import encode, logs_request

SHIPPERS = Path(__file__).resolve().parents[2] / "fixtures" / "shippers"


def same(a: object, b: object) -> bool:
    """Equal, NaN included (NaN != NaN)."""
    return msgspec.json.encode(a, order="sorted") == msgspec.json.encode(b, order="sorted")


def test_the_collectors_otlp_json_example_field_by_field():
    [record] = OtlpJsonFormat().split((SHIPPERS / "otlp-logs-collector.json").read_bytes())
    assert not isinstance(record, InvalidMessage)
    assert record["body"] == "Example log record"
    assert record["severity_text"] == "Information"
    assert record["severity_number"] == 10
    assert record["time_unix_nano"] == 1544712660300000000  # a decimal string in the JSON
    assert record["trace_id"] == "5b8efff798038103d269b633813fc60c"  # hex, not base64
    assert record["span_id"] == "eee19b7ec3c1b174"
    assert record["resource"] == {"service.name": "my.service"}
    assert record["scope"]["name"] == "my.library"
    assert record["attributes"]["int.attribute"] == 10
    assert record["attributes"]["array.attribute"] == ["many", "values"]
    assert record["attributes"]["map.attribute"] == {"some.map.key": "some value"}


@pytest.mark.parametrize("name", ["otlp-logs-collector", "otlp-logs-edgecases-collector"])
def test_both_encodings_of_one_request_give_the_same_fields(name):
    proto = OtlpProtoFormat().split((SHIPPERS / f"{name}.binpb").read_bytes())
    json = OtlpJsonFormat().split((SHIPPERS / f"{name}.json").read_bytes())
    assert len(proto) == len(json) >= 1
    assert same(proto, json)


def test_edge_cases_bytes_maps_big_ints_and_non_finite_doubles():
    records = OtlpProtoFormat().split((SHIPPERS / "otlp-logs-edgecases-collector.binpb").read_bytes())
    first = records[0]
    assert not isinstance(first, InvalidMessage)
    attributes = first["attributes"]
    assert attributes["big.int"] == 2**63 - 1
    assert attributes["retry.count"] == -3
    assert attributes["raw"] == "AAH+/w=="  # bytes: base64, as in OTLP/JSON
    assert attributes["unset"] is None
    assert attributes["inf"] == float("inf")
    assert "body" not in records[-1] or records[-1]["body"] in ("", None, {})


def test_the_spec_example_with_upper_case_ids_reads_as_lower_case():
    [record] = OtlpJsonFormat().split((SHIPPERS / "otlp-logs.json").read_bytes())
    assert not isinstance(record, InvalidMessage)
    assert record["trace_id"] == "5b8efff798038103d269b633813fc60c"


def test_snake_case_names_are_accepted_too():
    value = (
        b'{"resource_logs": [{"scope_logs": [{"log_records": [{"time_unix_nano": 5, "severity_text": "WARN",'
        b' "body": {"string_value": "disk full"}}]}]}]}'
    )
    [record] = OtlpJsonFormat().split(value)
    assert record == {
        "time_unix_nano": 5,
        "severity_text": "WARN",
        "body": "disk full",
        "resource": {},
        "scope": {},
    }


def test_a_generated_request_keeps_records_in_order_under_their_resources():
    events = EventGenerator(7).logs(40)
    for encoding, fmt in (("proto", OtlpProtoFormat()), ("json", OtlpJsonFormat())):
        records = fmt.split(encode(logs_request(events), encoding))
        assert [r["body"] for r in records] == [e["message"] for e in events]
        assert [r["resource"]["host.name"] for r in records] == [e["host"] for e in events]


def test_a_resource_without_records_holds_no_items():
    assert OtlpProtoFormat().split(b"\n\x00") == []  # one empty ResourceLogs
    assert OtlpJsonFormat().split(b'{"resourceLogs": [{"scopeLogs": []}]}') == []


@pytest.mark.parametrize("value", [b"\x08\x01", b"\x10\x05\x18\x07"])
def test_bytes_that_decode_as_no_resource_logs_are_not_a_request(value):
    # Protobuf reads stray bytes as unknown fields: an "empty request" there must not pass unanswered.
    with pytest.raises(InvalidMessage) as info:
        OtlpProtoFormat().split(value)
    assert info.value.reason is Reason.INVALID_PROTOBUF


def test_json_without_resource_logs_is_not_a_request():
    with pytest.raises(InvalidMessage) as info:
        OtlpJsonFormat().split(b"{}")
    assert info.value.reason is Reason.INVALID_EVENT


def test_bytes_that_are_not_protobuf_are_invalid_protobuf():
    with pytest.raises(InvalidMessage) as info:
        OtlpProtoFormat().split(b"2026-12-01T10:00:00Z web-1 app: not protobuf at all \xff")
    assert info.value.reason is Reason.INVALID_PROTOBUF


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"not json", Reason.INVALID_JSON),
        (b"[1, 2]", Reason.INVALID_EVENT),
        (b'{"resourceLogs": 3}', Reason.INVALID_EVENT),
        (b'{"resourceLogs": [{"scopeLogs": [{"logRecords": "x"}]}]}', Reason.INVALID_EVENT),
        (b'{"resourceLogs": [{"scopeLogs": 5}]}', Reason.INVALID_EVENT),
        (
            b'{"resourceLogs": [{"resource": {"attributes": [{"value": {}}]}, "scopeLogs": []}]}',
            Reason.INVALID_EVENT,
        ),
    ],
)
def test_json_that_is_not_a_logs_request_rejects_the_message(value, reason):
    with pytest.raises(InvalidMessage) as info:
        OtlpJsonFormat().split(value)
    assert info.value.reason is reason


def test_one_bad_record_is_rejected_alone():
    value = (
        b'{"resourceLogs": [{"scopeLogs": [{"logRecords": ['
        b'{"body": {"stringValue": "ok one"}},'
        b'{"timeUnixNano": "yesterday", "body": {"stringValue": "bad time"}},'
        b'{"traceId": "not hex", "body": {"stringValue": "bad id"}},'
        b'{"body": {"stringValue": "ok two"}}]}]}]}'
    )
    good, bad_time, bad_id, good_too = OtlpJsonFormat().split(value)
    assert good["body"] == "ok one" and good_too["body"] == "ok two"
    for bad in (bad_time, bad_id):
        assert isinstance(bad, InvalidMessage)
        assert bad.reason is Reason.INVALID_EVENT


def test_the_otlp_formats_fan_out_and_find_the_text_in_the_body():
    for fmt in (OtlpProtoFormat, OtlpJsonFormat):
        assert fmt.fans_out
        assert fmt.text_field == "body"


def test_json_values_are_type_checked_record_by_record():
    records = [
        {
            "severityNumber": "SEVERITY_NUMBER_WARN",
            "body": {"stringValue": None},
        },  # enum by name; null: unset
        {"attributes": [{"value": {"stringValue": "no key"}}]},
        {"body": {"boolValue": "false"}},  # a string is not a bool
        {"body": {"bytesValue": "AAH-_w=="}},  # URL-safe base64, which protobuf's JSON allows
        {"body": {"intValue": True}},  # nor is a bool an int
    ]
    value = msgspec.json.encode({"resourceLogs": [{"scopeLogs": [{"logRecords": records}]}]})
    by_name, no_key, string_bool, url_safe, bool_int = OtlpJsonFormat().split(value)
    assert by_name == {"severity_number": 13, "body": None, "resource": {}, "scope": {}}
    for bad in (no_key, string_bool, bool_int):
        assert isinstance(bad, InvalidMessage)
        assert bad.reason is Reason.INVALID_EVENT
    assert url_safe["body"] == "AAH+/w=="
