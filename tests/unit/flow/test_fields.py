"""service/flow/fields.py: a field none of the first events carries is reported once, with the closest names
the events did carry; through the Decoder, for the JSON fast path and for fielded formats."""

from __future__ import annotations

import msgspec

from service.flow.decode import Decoder
from service.flow.fields import FieldWatch
from service.formats import Picker, load_format
from service.processors import Capabilities
from service.processors.features import FeaturesProcessor


def _watch(fields, events=3):
    reports: list[tuple[str, list[str]]] = []
    return FieldWatch(fields, lambda field, closest: reports.append((field, closest)), events), reports


def test_a_field_no_event_carries_is_reported_once_after_the_first_events():
    watch, reports = _watch(["cpu_pct", "mem_pct", "host.name"])
    for _ in range(2):
        watch.see({"cpu_pc": 1.0, "mem_pct": 2.0, "host": {"nam": "a"}})
    assert reports == []  # not yet: two events of three
    watch.see({"cpu_pc": 1.0, "mem_pct": 2.0})
    assert reports == [("cpu_pct", ["cpu_pc"]), ("host.name", ["host.nam", "host"])]
    watch.see({})
    assert len(reports) == 2 and watch.done


def test_a_field_one_event_carries_is_not_reported():
    watch, reports = _watch(["cpu_pct"])
    for fields in ({}, {"cpu_pct": 3}, {"other": 1}):
        watch.see(fields)
    assert watch.done and reports == []


def test_the_decoder_shows_the_watch_what_each_format_carries(make_record, features_info):
    processor = FeaturesProcessor(features_info(["cpu_pct"]))
    raw = msgspec.json.encode({"cpu_pc": 1.0, "host": "a"})
    for include in ([], ["host"]):  # the fast path reads raw values; copying fields, every format's path
        watch, reports = _watch(processor.fields, events=2)
        decoder = Decoder(
            load_format("json"), processor, Capabilities.of(processor), 1 << 20, Picker(include), watch
        )
        accepted, rejected, _counts = decoder.decode([make_record(raw), make_record(b"not json")])
        assert not accepted and len(rejected) == 2  # dead letters still, as they were
        assert reports == [("cpu_pct", ["cpu_pc"])], include
