"""service/formats/collectd.py: collectd 5.12 write_kafka JSON as captured from the real agent
(tests/fixtures/agents/collectd, see SOURCES.md there), and the variants SOURCES.md quotes."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from service.errors import InvalidMessage, Reason
from service.formats import load_format
from service.formats.collectd import CollectdJsonFormat

COLLECTD = Path(__file__).resolve().parents[2] / "fixtures" / "agents" / "collectd"
MESSAGES = [line.encode() for line in (COLLECTD / "write_kafka-json.jsonl").read_text().splitlines()]


def split(value: bytes | str) -> list:
    return CollectdJsonFormat().split(value.encode() if isinstance(value, str) else value)


def value_list(**overrides: object) -> str:
    """One write_kafka message holding one value list: a gauge of the memory plugin unless told (a field
    given as ``...`` is left out)."""
    fields: dict[str, object] = {
        "values": [379539456],
        "dstypes": ["gauge"],
        "dsnames": ["value"],
        "time": 1796127907.698,
        "interval": 1.0,
        "host": "testhost",
        "plugin": "memory",
        "plugin_instance": "",
        "type": "memory",
        "type_instance": "used",
    }
    fields.update(overrides)
    return "[" + msgspec.json.encode({k: v for k, v in fields.items() if v is not ...}).decode() + "]"


def test_every_captured_message_gives_one_point_per_value():
    for message in MESSAGES:
        [listed] = json.loads(message)
        points = split(message)
        assert len(points) == len(listed["values"])
        assert all(not isinstance(p, InvalidMessage) for p in points)
        assert {p["host"] for p in points} == {"testhost"}
        assert {p["time"] for p in points} == {listed["time"]}


def test_the_documented_messages_point_by_point():
    # SOURCES.md quotes lines 1, 13 and 77.
    assert split(MESSAGES[0]) == [
        {
            "host": "testhost",
            "metric": "system.memory.usage",
            "attributes": {"system.memory.state": "used"},
            "time": 1796127907.698,
            "value": 379539456.0,
            "kind": "gauge",
        }
    ]
    receive, transmit = split(MESSAGES[12])  # a rate's first sample: null
    assert receive == {
        "host": "testhost",
        "metric": "system.network.io",
        "attributes": {"network.interface.name": "eth0", "network.io.direction": "receive"},
        "time": 1796127907.699,
        "value": None,
        "kind": "rate",
    }
    assert transmit["attributes"]["network.io.direction"] == "transmit"
    assert transmit["value"] is None
    read, write = split(MESSAGES[76])
    assert (read["metric"], read["attributes"], read["value"], read["kind"]) == (
        "system.disk.io",
        {"system.device": "vda", "disk.io.direction": "read"},
        16367400.2459166,
        "rate",
    )
    assert write["attributes"]["disk.io.direction"] == "write"
    assert write["value"] == 24575.6760449198


def test_cpu_percentages_are_utilization_ratios_of_the_all_cpu_series():
    points = [p for m in MESSAGES for p in split(m) if p["metric"] == "system.cpu.utilization"]
    first = {p["attributes"]["cpu.mode"]: p["value"] for p in points if p["time"] == 1796127908.694}
    assert first == pytest.approx(
        {
            "user": 0.282828282828283,
            "system": 0.0101010101010101,
            "iowait": 0.0,  # collectd's "wait"
            "nice": 0.0,
            "interrupt": 0.0,
            "softirq": 0.00505050505050505,
            "steal": 0.0,
            "idle": 0.702020202020202,
        }
    )
    assert {p["attributes"]["cpu"] for p in points} == {"total"}  # ReportByCpu false: empty plugin_instance
    assert sum(first.values()) == pytest.approx(1.0)


def test_every_plugin_maps_to_its_semantic_conventions():
    points = [p for m in MESSAGES for p in split(m)]
    by_metric: dict[str, set] = {}
    for p in points:
        by_metric.setdefault(p["metric"], set()).add(tuple(sorted(p["attributes"].items())))
    assert by_metric["system.memory.usage"] == {
        (("system.memory.state", s),)
        for s in ("used", "free", "buffers", "cached", "slab_reclaimable", "slab_unreclaimable")
    }
    assert by_metric["system.cpu.load_average.1m"] == {()}
    assert by_metric["system.filesystem.usage"] == {
        (("system.filesystem.mountpoint", "root"), ("system.filesystem.state", s))
        for s in ("used", "free", "reserved")
    }
    for metric in (
        "system.network.io",
        "system.network.packet.count",
        "system.network.errors",
        "system.network.packet.dropped",
    ):
        assert by_metric[metric] == {
            (("network.interface.name", i), ("network.io.direction", d))
            for i in ("lo", "eth0")
            for d in ("receive", "transmit")
        }
    assert by_metric["system.disk.operations"] == {
        (("disk.io.direction", d), ("system.device", "vda")) for d in ("read", "write")
    }
    load = split(MESSAGES[6])
    assert [(p["metric"], p["value"]) for p in load] == [
        ("system.cpu.load_average.1m", 1.669921875),
        ("system.cpu.load_average.5m", 0.9794921875),
        ("system.cpu.load_average.15m", 0.900390625),
    ]


def test_types_without_a_convention_keep_collectds_names():
    points = [p for m in MESSAGES for p in split(m)]
    native = {(p["metric"], tuple(sorted(p["attributes"].items())), p["kind"]) for p in points}
    vda = (("plugin_instance", "vda"),)
    assert native >= {
        ("collectd.disk.disk_time.read", vda, "rate"),
        ("collectd.disk.disk_merged.write", vda, "rate"),
        ("collectd.disk.disk_io_time.weighted_io_time", vda, "rate"),
        ("collectd.disk.pending_operations", vda, "gauge"),  # ds "value": no suffix
    }


@pytest.mark.parametrize(
    ("message", "metric", "attributes", "value", "kind"),
    [
        # The default cpu plugin (SOURCES.md): per CPU, derive jiffies, as a rate.
        (
            '[{"values":[24.0023930148917],"dstypes":["derive"],"dsnames":["value"],"time":1796127556.669,'
            '"interval":1.000,"host":"vm","plugin":"cpu","plugin_instance":"1","type":"cpu","type_instance":"user"}]',
            "system.cpu.time",
            {"cpu.mode": "user", "cpu": "1"},
            24.0023930148917,
            "rate",
        ),
        (
            '[{"values":[null],"dstypes":["derive"],"dsnames":["value"],"time":1796127552.670,"interval":1.000,'
            '"host":"vm","plugin":"cpu","plugin_instance":"1","type":"cpu","type_instance":"wait"}]',
            "system.cpu.time",
            {"cpu.mode": "iowait", "cpu": "1"},
            None,
            "rate",
        ),
        (
            '[{"values":[89.3065609921152],"dstypes":["gauge"],"dsnames":["value"],"time":1796127551.676,'
            '"interval":1.000,"host":"vm","plugin":"memory","plugin_instance":"","type":"percent",'
            '"type_instance":"free"}]',
            "system.memory.utilization",
            {"system.memory.state": "free"},
            0.893065609921152,
            "gauge",
        ),
        (
            '[{"values":[63.8543128967285],"dstypes":["gauge"],"dsnames":["value"],"time":1796127552.671,'
            '"interval":1.000,"host":"vm","plugin":"df","plugin_instance":"root","type":"percent_bytes",'
            '"type_instance":"reserved"}]',
            "collectd.df.percent_bytes",
            {"plugin_instance": "root", "type_instance": "reserved"},
            63.8543128967285,
            "gauge",
        ),
        (
            value_list(
                values=[39.03],
                plugin="df",
                plugin_instance="boot-efi",
                type="percent_bytes",
                type_instance="used",
            ),
            "system.filesystem.utilization",
            {"system.filesystem.mountpoint": "boot-efi"},
            0.3903,
            "gauge",
        ),
        (
            value_list(values=[12.5], plugin="cpu", type="percent", type_instance="active"),
            "collectd.cpu.percent",
            {"type_instance": "active"},
            12.5,
            "gauge",
        ),
        (
            value_list(
                values=[0.8, 0.5, 0.45],
                dstypes=["gauge"] * 3,
                dsnames=["shortterm", "midterm", "longterm"],
                plugin="load",
                type="load",
                type_instance="relative",
            ),
            "collectd.load.load.shortterm",
            {"type_instance": "relative"},
            0.8,
            "gauge",
        ),
        (
            value_list(
                values=[1234], dstypes=["counter"], plugin="memory", type="memory", type_instance="wired"
            ),
            "collectd.memory.memory",
            {"type_instance": "wired"},
            1234.0,
            "rate",
        ),
        (
            value_list(
                values=[7], dstypes=["absolute"], plugin="processes", type="fork_rate", type_instance=""
            ),
            "collectd.processes.fork_rate",
            {},
            7.0,
            "rate",
        ),
    ],
)
def test_other_plugin_settings(message, metric, attributes, value, kind):
    first = split(message)[0]
    assert (first["metric"], first["attributes"], first["kind"]) == (metric, attributes, kind)
    assert first["value"] == (None if value is None else pytest.approx(value))


def test_a_lone_value_list_object_is_read_too():
    [lone] = split(value_list()[1:-1])
    assert lone == split(value_list())[0]


def test_a_bad_value_list_is_an_entry_of_its_own():
    good = value_list()[1:-1]
    bad = [
        "5",
        value_list(values=None)[1:-1],
        value_list(values=[1, 2])[1:-1],  # two values, one dsname
        value_list(dstypes=["gauge_ish"])[1:-1],
        value_list(values=["12"])[1:-1],
        value_list(values=[True])[1:-1],
        value_list(time="now")[1:-1],
        value_list(time=None)[1:-1],
        value_list(host=None)[1:-1],
        value_list(plugin=3)[1:-1],
        value_list(dsnames=[None])[1:-1],
    ]
    entries = split("[" + ",".join([good, *bad, good]) + "]")
    assert len(entries) == len(bad) + 2
    assert entries[0] == entries[-1] and entries[0]["metric"] == "system.memory.usage"
    for entry in entries[1:-1]:
        assert isinstance(entry, InvalidMessage)
        assert entry.reason is Reason.INVALID_EVENT


def test_a_value_list_without_instances_reads_them_as_empty():
    message = value_list(
        plugin="load", type="load", dsnames=["shortterm"], plugin_instance=..., type_instance=...
    )
    [only] = split(message)
    assert only["metric"] == "system.cpu.load_average.1m"
    assert only["attributes"] == {}


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"testhost.load.load.shortterm 1.669921875 1796127908\r\n", Reason.INVALID_JSON),  # Graphite
        (b"PUTVAL testhost/load/load interval=1.000 1796127907.699:1.6:0.9:0.9", Reason.INVALID_JSON),
        (b'"a string"', Reason.INVALID_EVENT),
        (b"17", Reason.INVALID_EVENT),
        (b"[1e400]", Reason.INVALID_EVENT),
        (b"\xff\xfe", Reason.INVALID_UTF8),
    ],
)
def test_a_message_that_is_no_write_kafka_json_is_rejected_whole(value, reason):
    with pytest.raises(InvalidMessage) as info:
        split(value)
    assert info.value.reason is reason


def test_an_empty_array_holds_no_points():
    assert split(b"[]") == []


def test_the_format_is_registered_as_a_metrics_format():
    for metrics in (False, True):
        fmt = load_format("collectd-json", metrics=metrics)
        assert isinstance(fmt, CollectdJsonFormat)
    assert CollectdJsonFormat.metrics and CollectdJsonFormat.fans_out
    assert CollectdJsonFormat.text_field is None
