"""service/flow/assembly.py: the decode stage when rows are assembled, with a format of plain JSON points,
the real assembler and features processor, and a fake clock."""

from __future__ import annotations

from typing import ClassVar

import msgspec
import pytest

from service.assemble import Assembler, rules_for
from service.errors import InvalidMessage, Reason
from service.flow.assembly import Assembly
from service.observability import Health, Metrics, Telemetry
from service.processors.features import FeaturesProcessor

CPU, MEM = "system.cpu.utilization.user", "system.memory.utilization"


class PointsFormat:
    """A JSON array of points; an element {"bad": why} is a bad point."""

    name: ClassVar[str] = "points"
    text_field: ClassVar[str | None] = None
    fans_out: ClassVar[bool] = True
    metrics: ClassVar[bool] = True

    def split(self, value: bytes):
        try:
            points = msgspec.json.decode(value)
        except msgspec.DecodeError as exc:
            raise InvalidMessage(Reason.INVALID_JSON, str(exc)) from None
        return [InvalidMessage(Reason.INVALID_EVENT, p["bad"]) if "bad" in p else p for p in points]


def cpu(value, host="h", time=100.0):
    attrs = {"cpu": "total", "cpu.mode": "user"}
    return {
        "host": host,
        "metric": "system.cpu.utilization",
        "attributes": attrs,
        "time": time,
        "value": value,
    }


def mem(value, host="h", time=100.0):
    attrs = {"system.memory.state": "used"}
    return {
        "host": host,
        "metric": "system.memory.utilization",
        "attributes": attrs,
        "time": time,
        "value": value,
    }


def message(*points) -> bytes:
    return msgspec.json.encode(list(points))


def build(clock, parse, features=(CPU, MEM)) -> Assembly:
    """The stage on the real assembler (rows of ``features``, CPU required, closed at once when complete,
    after 15 s otherwise), with the real telemetry as ``stage.telemetry``."""
    telemetry = Telemetry(Metrics(), Health(60, 60, clock), 3600, clock)
    assembler = Assembler(
        rules_for(list(features)),
        [CPU],
        key=("host",),
        interval_s=10.0,
        max_wait_s=15.0,
        grace_s=0.0,
        fill="zero",
        typical={},
        clock=clock,
    )
    stage = Assembly(PointsFormat(), parse, assembler, 10_000, telemetry)
    stage.telemetry = telemetry
    return stage


@pytest.fixture
def assembly(clock, features_info):
    return build(clock, FeaturesProcessor(features_info([CPU, MEM])).parse_fields)


def points_counted(telemetry: Telemetry) -> dict[str, float]:
    return {
        s.labels["outcome"]: s.value
        for metric in telemetry.metrics.points.collect()
        for s in metric.samples
        if s.name.endswith("_total")
    }


def test_each_message_awaits_one_output_per_row_it_fed_and_per_bad_point(assembly, make_record):
    one = make_record(message(cpu(0.1), mem(0.2)), offset=0)
    two_rows = make_record(message(cpu(0.1, host="a"), cpu(0.1, host="b")), offset=1)
    nothing_used = make_record(message({"host": "h", "metric": "other", "time": 1.0, "value": 1.0}), offset=2)
    bad_point = make_record(message(cpu(0.3, host="c"), {"bad": "no values"}), offset=3)
    items, rejected, counts = assembly.decode([one, two_rows, nothing_used, bad_point])
    assert items == []
    assert [(r.offset, n) for r, n in counts] == [(1, 2), (2, 0), (3, 2)]
    assert [(r.record.offset, r.index, r.reason) for r in rejected] == [(3, 1, Reason.INVALID_EVENT)]
    assert len(assembly) == 4
    assert points_counted(assembly.telemetry) == {"used": 5.0, "ignored": 1.0}


def test_an_unreadable_message_is_one_dead_letter(assembly, make_record):
    _items, rejected, counts = assembly.decode([make_record(b"not json"), make_record(None, offset=1)])
    assert [(r.reason, r.index) for r in rejected] == [
        (Reason.INVALID_JSON, None),
        (Reason.EMPTY_VALUE, None),
    ]
    assert counts == []


def test_a_point_without_a_key_takes_the_kafka_key_or_goes_to_the_dead_letter_topic(
    assembly, clock, make_record
):
    keyed = make_record(message(cpu(0.1, host=None)), key=b"from-key")
    unkeyed = make_record(message(cpu(0.1, host=None), cpu(0.2)), offset=1)
    _, rejected, counts = assembly.decode([keyed, unkeyed])
    assert [(r.record.offset, r.index, r.detail) for r in rejected] == [
        (1, 0, "no key: the point has no 'host'")
    ]
    assert [(r.offset, n) for r, n in counts] == [(1, 2)]
    clock.advance(15.0)
    closed = assembly.due()[0]
    assert sorted(d.row.key for d in closed) == ["from-key", "h"]


def test_rows_close_into_items_of_their_first_message_or_settle_their_messages(assembly, clock, make_record):
    first = make_record(message(cpu(0.25)), offset=0)
    second = make_record(message(mem(0.5)), offset=1)
    lonely = make_record(message(mem(0.5, host="x")), offset=2)  # no cpu: required
    assembly.decode([first, second, lonely])
    items, rejected, settled = assembly.due()
    (item,) = items
    assert item.record is first and item.item == (0.25, 0.5)
    assert item.row.sources == (first, second) and item.row.key == "h"
    assert rejected == [] and settled == []
    clock.advance(15.0)
    items, rejected, settled = assembly.due()
    assert items == [] and rejected == [] and settled == [lonely]


def test_a_row_the_processor_refuses_is_a_dead_letter_per_message(clock, make_record):
    def refuse(fields):
        raise InvalidMessage(Reason.INVALID_EVENT, "out of range")

    stage = build(clock, refuse, features=(CPU,))
    records = [make_record(message(cpu(0.1)), offset=o) for o in (0, 1)]
    stage.decode(records)
    items, rejected, settled = stage.due()
    assert items == [] and settled == []
    assert [(r.record.offset, r.detail) for r in rejected] == [
        (0, "row 'h' at 100: out of range"),
        (1, "row 'h' at 100: out of range"),
    ]


def test_messages_of_partitions_handed_over_leave_the_open_rows_unanswered(assembly, clock, make_record):
    kept = make_record(message(cpu(0.25)), partition=0)
    handed = make_record(message(mem(0.5)), partition=1)
    assembly.decode([kept, handed])
    assembly.discard([("in", 1)])
    clock.advance(15.0)
    (item,), _, _ = assembly.due()
    assert item.row.sources == (kept,) and item.row.filled == (MEM,)
