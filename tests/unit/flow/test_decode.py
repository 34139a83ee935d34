"""service/flow/decode.py: the generic checks, the processor's verdict, and containment of processor bugs."""

from __future__ import annotations

from functools import partial

import msgspec
import pytest

from service.errors import InvalidMessage, Reason
from service.flow.decode import Decoder, decode, prepare_all, takes_format
from service.flow.records import Decoded, Rejection
from service.formats import Picker, load_format
from service.formats.plain import JsonFormat
from service.processors import Capabilities, prepare
from service.processors.features import FeaturesProcessor

LIMIT = 64


def never_called(_value: bytes) -> object:
    raise AssertionError("parse must not run for a value the generic checks reject")


def test_good_event_decodes_through_the_features_processor(make_record, features_info):
    processor = FeaturesProcessor(features_info(["cpu", "mem"]))
    record = make_record(msgspec.json.encode({"host": "web-1", "mem": 2.5, "cpu": 1}))
    outcome = decode(record, processor.parse, 1024)
    assert isinstance(outcome, Decoded)
    assert outcome.record is record
    assert outcome.item == (1.0, 2.5)


def test_null_value_is_an_empty_value(make_record):
    outcome = decode(make_record(None), never_called, LIMIT)
    assert isinstance(outcome, Rejection)
    assert outcome.reason is Reason.EMPTY_VALUE


def test_zero_bytes_is_an_empty_value(make_record):
    outcome = decode(make_record(b""), never_called, LIMIT)
    assert isinstance(outcome, Rejection)
    assert outcome.reason is Reason.EMPTY_VALUE


def test_value_at_the_limit_is_accepted_and_one_byte_more_is_too_large(make_record):
    at_limit = decode(make_record(b"x" * LIMIT), len, LIMIT)
    assert isinstance(at_limit, Decoded)
    assert at_limit.item == LIMIT
    over = decode(make_record(b"x" * (LIMIT + 1)), never_called, LIMIT)
    assert isinstance(over, Rejection)
    assert over.reason is Reason.VALUE_TOO_LARGE
    assert str(LIMIT) in over.detail


def test_invalid_message_keeps_the_processors_reason_and_detail(make_record):
    def parse(_value: bytes) -> object:
        raise InvalidMessage(Reason.INVALID_UTF8, "byte 3 is not UTF-8")

    record = make_record(b"abc")
    outcome = decode(record, parse, LIMIT)
    assert isinstance(outcome, Rejection)
    assert outcome.record is record
    assert outcome.reason is Reason.INVALID_UTF8
    assert outcome.detail == "byte 3 is not UTF-8"


@pytest.mark.parametrize("error", [ZeroDivisionError("boom"), KeyError("k"), RuntimeError("processor bug")])
def test_an_unexpected_processor_exception_is_contained_as_invalid_event(make_record, error):
    def parse(_value: bytes) -> object:
        raise error

    outcome = decode(make_record(b"{}"), parse, LIMIT)
    assert isinstance(outcome, Rejection)
    assert outcome.reason is Reason.INVALID_EVENT
    assert type(error).__name__ in outcome.detail


def test_the_record_travels_with_the_rejection(make_record):
    record = make_record(b"", topic="metrics", partition=3, offset=77, key=b"k")
    outcome = decode(record, never_called, LIMIT)
    assert outcome.record is record


def test_prepare_runs_once_over_the_group(make_record):
    calls = []

    def prepare(items: list) -> list:
        calls.append(list(items))
        return [item * 10 for item in items]

    group = [Decoded(make_record(b"x"), n) for n in (1, 2, 3)]
    kept, rejected = prepare_all(group, prepare)
    assert calls == [[1, 2, 3]]
    assert [d.item for d in kept] == [10, 20, 30]
    assert [d.record for d in kept] == [d.record for d in group]
    assert rejected == []


def test_a_prepare_failure_rejects_only_the_items_it_fails_on(make_record):
    def prepare(items: list) -> list:
        if 2 in items:
            raise RuntimeError("cannot tokenize 2")
        return items

    group = [Decoded(make_record(b"x"), n) for n in (1, 2, 3)]
    kept, rejected = prepare_all(group, prepare)
    assert [d.item for d in kept] == [1, 3]
    assert len(rejected) == 1
    assert rejected[0].record is group[1].record
    assert rejected[0].reason == Reason.INVALID_EVENT
    assert "cannot tokenize 2" in rejected[0].detail


def test_a_prepare_that_loses_items_rejects_them_instead_of_raising(make_record):
    class DropsOne:
        def prepare(self, items: list) -> list:
            return items[1:]

    group = [Decoded(make_record(b"x", offset=n), n) for n in (1, 2, 3)]
    kept, rejected = prepare_all(group, partial(prepare, DropsOne()))
    assert kept == []
    assert [r.record.offset for r in rejected] == [1, 2, 3]
    assert all(r.reason == Reason.INVALID_EVENT for r in rejected)


# -- formats and fan-out --------------------------------------------------------------------------


class FanOut:
    """A format that splits on commas; an item "bad" is a bad record, "boom" a format bug."""

    name = "fan-out"
    text_field = None
    fans_out = True

    def split(self, value: bytes) -> list:
        if value == b"boom":
            raise RuntimeError("a bug in the format")
        if value == b"unreadable":
            raise InvalidMessage(Reason.INVALID_PROTOBUF, "not one of ours")
        return [
            InvalidMessage(Reason.INVALID_EVENT, "bad record") if part == "bad" else {"cpu": float(len(part))}
            for part in value.decode().split(",")
            if part
        ]


def fan_out_decoder(features_info, include=None):
    processor = FeaturesProcessor(features_info(["cpu"]))
    return Decoder(FanOut(), processor, Capabilities.of(processor), 1024, Picker(include or []))


def test_one_message_fans_out_into_items_that_know_their_index(make_record, features_info):
    record = make_record(b"a,bbb,cc")
    accepted, rejected, counts = fan_out_decoder(features_info).decode([record])
    assert [(d.index, d.item) for d in accepted] == [(0, (1.0,)), (1, (3.0,)), (2, (2.0,))]
    assert rejected == []
    assert counts == [(record, 3)]


def test_a_bad_record_is_rejected_alone_and_its_siblings_decode(make_record, features_info):
    record = make_record(b"a,bad,cc")
    accepted, rejected, counts = fan_out_decoder(features_info).decode([record])
    assert [d.index for d in accepted] == [0, 2]
    [rejection] = rejected
    assert (rejection.index, rejection.reason, rejection.record) == (1, Reason.INVALID_EVENT, record)
    assert counts == [(record, 3)]  # the dead letter is one of the message's three outputs


def test_a_message_the_format_cannot_read_is_one_rejection_without_an_index(make_record, features_info):
    records = [
        make_record(b"unreadable", offset=0),
        make_record(b"boom", offset=1),
        make_record(None, offset=2),
    ]
    accepted, rejected, counts = fan_out_decoder(features_info).decode(records)
    assert accepted == []
    assert [(r.reason, r.index) for r in rejected] == [
        (Reason.INVALID_PROTOBUF, None),
        (Reason.INVALID_EVENT, None),
        (Reason.EMPTY_VALUE, None),
    ]
    assert "a bug in the format" in rejected[1].detail
    assert counts == []  # one output each, the default


def test_a_message_with_no_items_expects_no_outputs(make_record, features_info):
    record = make_record(b",")
    accepted, rejected, counts = fan_out_decoder(features_info).decode([record])
    assert (accepted, rejected, counts) == ([], [], [(record, 0)])


def test_included_fields_travel_with_each_item(make_record, features_info):
    accepted, _, _ = fan_out_decoder(features_info, include=["cpu", "host"]).decode([make_record(b"ab")])
    assert accepted[0].fields == {"cpu": 2.0}


def test_json_with_included_fields_reads_nested_paths(make_record, features_info):
    processor = FeaturesProcessor(features_info(["cpu"]))
    decoder = Decoder(JsonFormat(), processor, Capabilities.of(processor), 1024, Picker(["host.name"]))
    value = msgspec.json.encode({"cpu": 0.5, "host": {"name": "web-1"}})
    [decoded], [], [] = decoder.decode([make_record(value)])
    assert decoded.item == (0.5,)
    assert decoded.fields == {"host.name": "web-1"}
    assert decoded.index is None


def test_a_processor_without_parse_fields_takes_only_raw_formats(features_info):
    class RawOnly:
        def parse(self, value: bytes) -> bytes:
            return value

    raw_only = Capabilities.of(RawOnly())  # type: ignore[arg-type]
    assert takes_format(raw_only, load_format("json"))
    assert takes_format(raw_only, load_format("text"))
    assert not takes_format(raw_only, load_format("syslog"))
    assert takes_format(Capabilities.of(FeaturesProcessor(features_info(["cpu"]))), load_format("otlp-json"))
