"""service/formats/telegraf.py: Telegraf's input plugins as semantic-convention points, from both of its
Kafka serializers (tests/fixtures/agents/telegraf: influx, json with 1s and 1ms timestamps)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from service.errors import InvalidMessage, Reason
from service.formats import load_format
from service.formats.influx import InfluxFormat
from service.formats.telegraf import TelegrafJsonFormat

TELEGRAF = Path(__file__).resolve().parents[2] / "fixtures" / "agents" / "telegraf"
T2 = 1718000010.0


def points_of(fixture: str) -> list:
    fmt = InfluxFormat() if fixture.endswith(".txt") else TelegrafJsonFormat()
    return [
        p for line in (TELEGRAF / fixture).read_bytes().splitlines(keepends=True) for p in fmt.split(line)
    ]


def canonical(points: list) -> list[bytes]:
    return sorted(msgspec.json.encode(p, order="sorted") for p in points)


def at_t2(metric: str, **attributes: str) -> dict:
    [found] = [
        p
        for p in points_of("influx.txt")
        if p["metric"] == metric and p["time"] == T2 and attributes.items() <= p["attributes"].items()
    ]
    return found


def test_the_three_serializations_give_the_same_points():
    influx = points_of("influx.txt")
    assert len(influx) == 210
    assert all(not isinstance(p, InvalidMessage) for p in influx)
    # Field order differs (the JSON serializer sorts), the points do not.
    assert canonical(points_of("json.jsonl")) == canonical(influx)
    assert canonical(points_of("json-ms.jsonl")) == canonical(influx)


def test_cpu_usage_is_utilization_per_mode_of_the_total():
    user = at_t2("system.cpu.utilization", **{"cpu.mode": "user"})
    assert user == {
        "host": "web-01",
        "metric": "system.cpu.utilization",
        "attributes": {"cpu.mode": "user", "cpu": "total"},
        "time": T2,
        "value": pytest.approx(0.0819999999999709),
        "kind": "gauge",
    }
    modes = {
        p["attributes"]["cpu.mode"]: p["value"]
        for p in points_of("influx.txt")
        if p["metric"] == "system.cpu.utilization" and p["time"] == T2
    }
    assert set(modes) == {
        "user", "system", "idle", "nice", "iowait", "interrupt", "softirq", "steal", "guest", "guest_nice"
    }  # fmt: skip
    assert modes["iowait"] == pytest.approx(0.009)
    # guest time is inside user and nice already: the other eight add up to the whole
    assert sum(v for k, v in modes.items() if not k.startswith("guest")) == pytest.approx(1.0)


def test_memory_load_network_disks_and_filesystems_map_to_their_conventions():
    assert at_t2("system.memory.utilization")["attributes"] == {"system.memory.state": "used"}
    assert at_t2("system.memory.utilization")["value"] == pytest.approx(0.30269188174492218)
    assert [at_t2(f"system.cpu.load_average.{m}")["value"] for m in ("1m", "5m", "15m")] == [0.51, 0.39, 0.32]
    received = at_t2("system.network.io", **{"network.io.direction": "receive"})
    assert received["attributes"] == {"network.interface.name": "eth0", "network.io.direction": "receive"}
    assert (received["value"], received["kind"]) == (9215692390.0, "counter")
    assert at_t2("system.network.packet.dropped", **{"network.io.direction": "receive"})["value"] == 12.0
    assert at_t2("system.network.errors", **{"network.io.direction": "transmit"})["value"] == 0.0
    written = at_t2("system.disk.io", **{"system.device": "sda", "disk.io.direction": "write"})
    assert (written["value"], written["kind"]) == (45678901248.0, "counter")
    assert at_t2("system.disk.operations", **{"system.device": "sda1", "disk.io.direction": "read"})[
        "value"
    ] == (398132.0)
    root = at_t2("system.filesystem.utilization", **{"system.filesystem.mountpoint": "/"})
    assert root["value"] == pytest.approx(0.4108318302399059)
    assert root["attributes"] == {"system.filesystem.mountpoint": "/"}
    efi = {"system.filesystem.mountpoint": "/boot/efi"}
    used = at_t2("system.filesystem.usage", **efi, **{"system.filesystem.state": "used"})
    assert (used["value"], used["kind"]) == (6782976.0, "gauge")
    assert (
        at_t2("system.filesystem.usage", **efi, **{"system.filesystem.state": "free"})["value"] == 102639616.0
    )


def test_fields_without_a_convention_keep_telegrafs_names_and_tags():
    assert at_t2("mem.total") == {
        "host": "web-01",
        "metric": "mem.total",
        "attributes": {},
        "time": T2,
        "value": 8343912448.0,
        "kind": "gauge",
    }
    assert at_t2("net.speed")["attributes"] == {"interface": "eth0"}
    assert at_t2("net.speed")["value"] == -1.0
    assert at_t2("disk.total", path="/")["attributes"] == {
        "device": "sda1",
        "fstype": "ext4",
        "mode": "rw",
        "path": "/",
    }
    assert at_t2("diskio.io_util", name="sda")["value"] == 4.58
    assert at_t2("system.uptime")["value"] == 260010.0
    assert at_t2("system.n_cpus")["value"] == 2.0
    metrics = {p["metric"] for p in points_of("influx.txt")}
    assert "system.uptime_format" not in metrics  # a string field


def test_per_cpu_and_cpu_time_fields():
    value = (
        b'{"fields":{"time_guest":0,"time_idle":1890.5,"time_iowait":12.25,"time_irq":0.5,"usage_active":11.5},'
        b'"name":"cpu","tags":{"cpu":"cpu1","host":"web-01"},"timestamp":1718000010}\n'
    )
    guest, idle, iowait, irq, active = TelegrafJsonFormat().split(value)
    assert idle == {
        "host": "web-01",
        "metric": "system.cpu.time",
        "attributes": {"cpu.mode": "idle", "cpu": "1"},
        "time": T2,
        "value": 1890.5,
        "kind": "counter",
    }
    assert iowait["attributes"]["cpu.mode"] == "iowait"
    assert irq["attributes"]["cpu.mode"] == "interrupt"
    assert guest["attributes"]["cpu.mode"] == "guest"
    assert (active["metric"], active["attributes"]) == ("cpu.usage_active", {"cpu": "cpu1"})


def test_without_a_host_tag_a_point_has_no_host():
    # omit_hostname = true
    [only] = TelegrafJsonFormat().split(b'{"fields":{"load1":0.5},"name":"system","tags":{},"timestamp":1}')
    assert "host" not in only
    assert only["metric"] == "system.cpu.load_average.1m"


def test_string_and_boolean_fields_are_left_out():
    value = (
        b'{"fields":{"ok":true,"state":"up","n":3},"name":"app","tags":{"host":"h"},"timestamp":1718000010}'
    )
    assert [p["metric"] for p in TelegrafJsonFormat().split(value)] == ["app.n"]


@pytest.mark.parametrize(
    ("stamp", "seconds"),
    [
        (1718000010, T2),
        (1718000010500, T2 + 0.5),
        (1718000010500000, T2 + 0.5),
        (1718000010500000000, T2 + 0.5),
    ],
)
def test_json_timestamp_units_are_told_by_magnitude(stamp, seconds):
    value = msgspec.json.encode({"fields": {"v": 1}, "name": "m", "tags": {}, "timestamp": stamp})
    [only] = TelegrafJsonFormat().split(value)
    assert only["time"] == seconds


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"cpu,host=a usage_user=1 1718000000000000000\n", Reason.INVALID_JSON),  # influx on a JSON topic
        (b"[1]", Reason.INVALID_EVENT),
        (b'{"metrics":[]}', Reason.INVALID_EVENT),  # SerializeBatch: never written by outputs.kafka
        (b'{"fields":{"v":1},"tags":{},"timestamp":1}', Reason.INVALID_EVENT),
        (b'{"fields":{"v":1},"name":"m","tags":{}}', Reason.INVALID_EVENT),
        (b'{"fields":[1],"name":"m","tags":{},"timestamp":1}', Reason.INVALID_EVENT),
        (b'{"fields":{"v":1},"name":"m","tags":{"a":1},"timestamp":1}', Reason.INVALID_EVENT),
        (b'{"fields":{"v":1},"name":"m","tags":{},"timestamp":"2024-06-10T06:13:30Z"}', Reason.INVALID_EVENT),
        (b'{"fields":{"v":1},"name":"m","tags":{},"timestamp":true}', Reason.INVALID_EVENT),
        (b'{"fields":{"v":1},"name":7,"tags":{},"timestamp":1}', Reason.INVALID_EVENT),
        (b'{"fields":{"v":1},"name":"m","tags":{},"timestamp":' + b"9" * 40 + b"}", Reason.INVALID_EVENT),
        (b'{"fields":{"v":' + b"9" * 5000 + b'},"name":"m","tags":{},"timestamp":1}', Reason.INVALID_EVENT),
    ],
)
def test_json_that_is_no_telegraf_metric_is_rejected(value, reason):
    with pytest.raises(InvalidMessage) as info:
        TelegrafJsonFormat().split(value)
    assert info.value.reason is reason


def test_the_format_is_registered_as_a_metrics_format():
    for metrics in (False, True):
        assert isinstance(load_format("telegraf-json", metrics=metrics), TelegrafJsonFormat)
    assert TelegrafJsonFormat.metrics and TelegrafJsonFormat.fans_out
    assert TelegrafJsonFormat.text_field is None
