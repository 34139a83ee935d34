"""Renderers of generated host rows as agents' messages (service/tools/generate/agents/): the shapes of
collectd write_kafka JSON, Telegraf line protocol and JSON, and hostmetrics OTLP requests; counters that
grow by rate x interval; what a consumer reads back is the row; deterministic bytes.

The parsing here is deliberately naive (the service's parsers live in service/formats/ and have their own
tests): just enough to read the numbers back."""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import defaultdict

import pytest
from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from service.tools.generate import HOST_FEATURES, HostSeries, HostSpec, host_rows
from service.tools.generate.agents import (
    AGENT_FORMATS,
    CPU_STATES,
    collectd_messages,
    influx_lines,
    otlp_metrics_messages,
    otlp_metrics_requests,
    render,
    telegraf_json,
)

SPEC = HostSpec("web-01", cpus=4, memory_bytes=16 << 30, filesystem_bytes=200 << 30, regime="busy")
INTERVAL = 10.0
COUNT = 6


@pytest.fixture(scope="module")
def series() -> HostSeries:
    [s] = host_rows(3, [SPEC], start=1_800_000_000, interval_s=INTERVAL, count=COUNT)
    return s


def kwargs(series: HostSeries) -> dict:
    return {"interval_s": series.interval_s, **series.spec.facts()}


def close(a: float, b: float, rel: float = 1e-9, abs_: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


# ---------------------------------------------------------------------------------------------- collectd


def collectd_by_sample(messages: list[bytes]) -> dict[int, dict[tuple[str, str, str, str], dict]]:
    out: dict[int, dict[tuple[str, str, str, str], dict]] = defaultdict(dict)
    for raw in messages:
        doc = json.loads(raw)
        assert isinstance(doc, list) and len(doc) == 1
        [vl] = doc
        key = (vl["plugin"], vl["plugin_instance"], vl["type"], vl["type_instance"])
        out[round(vl["time"])][key] = vl
    return out


def test_collectd_value_lists(series: HostSeries) -> None:
    messages = collectd_messages(SPEC.name, series.samples(), **kwargs(series))
    keys = ["values", "dstypes", "dsnames", "time", "interval", "host", "plugin", "plugin_instance", "type"]
    for raw in messages:
        [vl] = json.loads(raw)
        assert list(vl) == [*keys, "type_instance"]
        assert len(vl["values"]) == len(vl["dstypes"]) == len(vl["dsnames"])
        assert vl["host"] == "web-01" and vl["interval"] == INTERVAL
        assert set(vl["dstypes"]) <= {"gauge", "derive"}
        assert b'"interval":10.000,' in raw  # format_json's %.3f
    by_sample = collectd_by_sample(messages)
    times = [round(t) for t in series.times.tolist()]
    assert sorted(by_sample) == times
    first = by_sample[times[0]]
    assert not any(k[0] == "cpu" for k in first)  # two readings needed
    assert first[("interface", "eth0", "if_octets", "")]["values"] == [None, None]
    assert first[("disk", "sda", "disk_octets", "")]["values"] == [None, None]
    assert first[("interface", "lo", "if_octets", "")]["dstypes"] == ["derive", "derive"]


def test_collectd_reads_back_as_the_rows(series: HostSeries) -> None:
    by_sample = collectd_by_sample(collectd_messages(SPEC.name, series.samples(), **kwargs(series)))
    for t, row in series.samples()[1:]:
        got = by_sample[round(t)]
        cpu = {k[3]: v["values"][0] for k, v in got.items() if k[:3] == ("cpu", "", "percent")}
        assert set(cpu) == set(CPU_STATES) and close(sum(cpu.values()), 100.0, rel=1e-12)
        assert close(cpu["user"] / 100, row["system.cpu.utilization.user"], abs_=1e-12)
        assert close(cpu["system"] / 100, row["system.cpu.utilization.system"], abs_=1e-12)
        assert close(cpu["wait"] / 100, row["system.cpu.utilization.iowait"], abs_=1e-12)
        memory = {k[3]: v["values"][0] for k, v in got.items() if k[0] == "memory"}
        assert set(memory) == {"used", "buffered", "cached", "free", "slab_recl", "slab_unrecl"}
        assert sum(memory.values()) == SPEC.memory_bytes
        assert close(memory["used"] / sum(memory.values()), row["system.memory.utilization"], abs_=1e-6)
        load = got[("load", "", "load", "")]
        assert load["dsnames"] == ["shortterm", "midterm", "longterm"]
        assert load["values"] == [row[f"system.cpu.load_average.{w}"] for w in ("1m", "5m", "15m")]
        octets = got[("interface", "eth0", "if_octets", "")]["values"]
        packets = got[("interface", "eth0", "if_packets", "")]["values"]
        errors = got[("interface", "eth0", "if_errors", "")]["values"]
        for value, feature in (
            (octets[0], "system.network.io.receive"),
            (octets[1], "system.network.io.transmit"),
            (packets[0], "system.network.packet.count.receive"),
            (packets[1], "system.network.packet.count.transmit"),
            (errors[0], "system.network.errors.receive"),
            (errors[1], "system.network.errors.transmit"),
        ):
            assert close(value, row[feature], rel=1e-12), feature
        lo = got[("interface", "lo", "if_octets", "")]["values"]
        assert lo[0] > 0  # loopback traffic a consumer must leave out
        disk = got[("disk", "sda", "disk_octets", "")]
        assert disk["dsnames"] == ["read", "write"]
        assert close(disk["values"][0], row["system.disk.io.read"], rel=1e-12)
        assert close(disk["values"][1], row["system.disk.io.write"], rel=1e-12)
        df = {k[3]: v["values"][0] for k, v in got.items() if k[:3] == ("df", "root", "df_complex")}
        assert close(df["used"] / (df["used"] + df["free"]), row["system.filesystem.utilization"], abs_=1e-6)
        pct = {k[3]: v["values"][0] for k, v in got.items() if k[:3] == ("df", "root", "percent_bytes")}
        assert close(sum(pct.values()), 100.0, rel=1e-9)


# ---------------------------------------------------------------------------------------------- Telegraf

LINE = re.compile(r"^(?P<name>[a-z]+)(?P<tags>(?:,[^ ]+)?) (?P<fields>\S+) (?P<ts>\d+)\n$")


def parse_line(raw: bytes) -> tuple[str, dict[str, str], dict[str, float | int | str], int]:
    """Line protocol without escapes or spaces in strings (what these renderers emit for these hosts)."""
    text = raw.decode()
    if "uptime_format" in text:  # the one string field, with spaces
        name, rest = text.split(" ", 1)
        tags = dict(t.split("=") for t in name.split(",")[1:])
        value, ts = rest.rsplit(" ", 1)
        return name.split(",")[0], tags, {"uptime_format": value.split("=", 1)[1].strip('"')}, int(ts)
    m = LINE.match(text)
    assert m, text
    tags = dict(t.split("=") for t in m["tags"].split(",")[1:]) if m["tags"] else {}
    fields: dict[str, float | int | str] = {}
    for pair in m["fields"].split(","):
        key, value = pair.split("=")
        fields[key] = int(value[:-1]) if value.endswith("i") else float(value)
    return m["name"], tags, fields, int(m["ts"])


def test_influx_lines(series: HostSeries) -> None:
    lines = influx_lines(SPEC.name, series.samples(), **kwargs(series))
    parsed = [parse_line(raw) for raw in lines]
    assert all(raw.endswith(b"\n") and raw.count(b"\n") == 1 for raw in lines)
    names = {p[0] for p in parsed}
    assert names == {"cpu", "mem", "system", "net", "disk", "diskio"}
    assert all(p[1]["host"] == "web-01" for p in parsed)
    by_time: dict[int, dict[str, dict]] = defaultdict(dict)
    for name, tags, fields, ts in parsed:
        assert ts % 1_000_000_000 == 0
        key = name if name != "system" else "system." + ",".join(sorted(fields))
        by_time[ts // 1_000_000_000][key] = {"tags": tags, **fields}
    times = [round(t) for t in series.times.tolist()]
    assert "cpu" not in by_time[times[0]]  # no cpu on the first gather
    rows = dict(series.samples())
    for t in times[1:]:
        got, row = by_time[t], rows[float(t)]
        cpu = got["cpu"]
        assert cpu["tags"]["cpu"] == "cpu-total"
        assert close(cpu["usage_user"] / 100, row["system.cpu.utilization.user"], abs_=1e-12)
        assert close(cpu["usage_iowait"] / 100, row["system.cpu.utilization.iowait"], abs_=1e-12)
        usage = sum(v for k, v in cpu.items() if k.startswith("usage_") and isinstance(v, float))
        assert close(usage, 100.0, rel=1e-9)
        assert close(got["mem"]["used_percent"] / 100, row["system.memory.utilization"], abs_=1e-6)
        assert close(got["disk"]["used_percent"] / 100, row["system.filesystem.utilization"], abs_=1e-6)
        assert got["disk"]["tags"]["path"] == "/"
        system = got["system.load1,load15,load5,n_cpus,n_physical_cpus,n_unique_users,n_users"]
        assert system["load1"] == row["system.cpu.load_average.1m"] and system["n_cpus"] == 4
        assert got["net"]["tags"]["interface"] == "eth0"
    # Counters are cumulative integers that grow by rate x interval.
    for (t0, _), (t1, row) in zip(series.samples(), series.samples()[1:], strict=False):
        a, b = by_time[round(t0)], by_time[round(t1)]
        for field, feature in (
            ("bytes_recv", "system.network.io.receive"),
            ("bytes_sent", "system.network.io.transmit"),
            ("packets_recv", "system.network.packet.count.receive"),
            ("packets_sent", "system.network.packet.count.transmit"),
            ("err_in", "system.network.errors.receive"),
        ):
            assert isinstance(b["net"][field], int)
            assert (b["net"][field] - a["net"][field]) / INTERVAL == pytest.approx(row[feature], rel=1e-12)
        for field, feature in (
            ("read_bytes", "system.disk.io.read"),
            ("write_bytes", "system.disk.io.write"),
        ):
            delta = b["diskio"][field] - a["diskio"][field]
            assert delta / INTERVAL == pytest.approx(row[feature], rel=1e-12)


def test_telegraf_json_is_the_same_metrics(series: HostSeries) -> None:
    lines = [parse_line(raw) for raw in influx_lines(SPEC.name, series.samples(), **kwargs(series))]
    docs = [json.loads(raw) for raw in telegraf_json(SPEC.name, series.samples(), **kwargs(series))]
    assert len(docs) == len(lines)
    for doc, (name, tags, fields, ts) in zip(docs, lines, strict=True):
        assert list(doc) == ["fields", "name", "tags", "timestamp"]
        assert list(doc["fields"]) == sorted(doc["fields"]) and list(doc["tags"]) == sorted(doc["tags"])
        assert doc["name"] == name and doc["tags"] == tags
        assert doc["timestamp"] == ts // 1_000_000_000
        assert doc["fields"] == fields


# ---------------------------------------------------------------------------------------------- OTLP


def points(request: ExportMetricsServiceRequest) -> dict[str, list]:
    out: dict[str, list] = defaultdict(list)
    for rm in request.resource_metrics:
        attrs = {kv.key: kv.value.string_value for kv in rm.resource.attributes}
        assert attrs == {"host.name": "web-01", "os.type": "linux"}
        assert rm.schema_url == "https://opentelemetry.io/schemas/1.9.0"
        [sm] = rm.scope_metrics
        assert sm.scope.name.endswith("scraper")
        for metric in sm.metrics:
            data = metric.sum if metric.HasField("sum") else metric.gauge
            for dp in data.data_points:
                a = {kv.key: kv.value.string_value for kv in dp.attributes}
                value = dp.as_double if dp.HasField("as_double") else dp.as_int
                out[metric.name].append((a, value, dp))
    return out


def test_otlp_requests_one_per_scrape(series: HostSeries) -> None:
    requests = otlp_metrics_requests(SPEC.name, series.samples(), **kwargs(series))
    assert len(requests) == COUNT
    scrapers = [rm.scope_metrics[0].scope.name.rsplit("/", 1)[1] for rm in requests[0].resource_metrics]
    assert scrapers == [
        "cpuscraper",
        "diskscraper",
        "filesystemscraper",
        "loadscraper",
        "memoryscraper",
        "networkscraper",
    ]
    p = points(requests[0])
    assert {
        "system.cpu.time",
        "system.memory.usage",
        "system.cpu.load_average.1m",
        "system.cpu.load_average.5m",
        "system.cpu.load_average.15m",
        "system.network.io",
        "system.network.packets",
        "system.network.errors",
        "system.network.dropped",
        "system.disk.io",
        "system.filesystem.usage",
    } <= set(p)
    assert "system.cpu.utilization" not in p  # optional, off by default
    cpus = {a["cpu"] for a, _, _ in p["system.cpu.time"]}
    assert cpus == {"cpu0", "cpu1", "cpu2", "cpu3"}
    assert {a["state"] for a, _, _ in p["system.cpu.time"]} == set(CPU_STATES)
    assert {a["device"] for a, _, _ in p["system.network.io"]} == {"lo", "eth0"}
    [(fs_attrs, _, _), *_] = p["system.filesystem.usage"]
    assert {k: fs_attrs[k] for k in ("device", "mode", "mountpoint", "type")} == {
        "device": "/dev/sda1",
        "mode": "rw",
        "mountpoint": "/",
        "type": "ext4",
    }
    for _, _, dp in p["system.cpu.time"]:
        assert dp.start_time_unix_nano < dp.time_unix_nano


def test_otlp_reads_back_as_the_rows(series: HostSeries) -> None:
    requests = otlp_metrics_requests(SPEC.name, series.samples(), **kwargs(series), optional_metrics=True)
    samples = series.samples()
    for k in range(1, COUNT):
        before, now = points(requests[k - 1]), points(requests[k])
        row = samples[k][1]
        # cpu: per CPU Δstate / Σ Δ, averaged over the CPUs
        shares: dict[str, list[float]] = defaultdict(list)
        for cpu in ("cpu0", "cpu1", "cpu2", "cpu3"):
            a = {x["state"]: v for x, v, _ in before["system.cpu.time"] if x["cpu"] == cpu}
            b = {x["state"]: v for x, v, _ in now["system.cpu.time"] if x["cpu"] == cpu}
            elapsed = sum(b.values()) - sum(a.values())
            assert elapsed == pytest.approx(INTERVAL, rel=1e-9)
            for state in CPU_STATES:
                shares[state].append((b[state] - a[state]) / elapsed)
        assert sum(shares["user"]) / 4 == pytest.approx(row["system.cpu.utilization.user"], abs=1e-9)
        assert sum(shares["wait"]) / 4 == pytest.approx(row["system.cpu.utilization.iowait"], abs=1e-9)
        util = {(x["cpu"], x["state"]): v for x, v, _ in now["system.cpu.utilization"]}
        assert util[("cpu1", "user")] == pytest.approx(shares["user"][1], abs=1e-9)
        memory = {x["state"]: v for x, v, _ in now["system.memory.usage"]}
        whole = memory["used"] + memory["free"] + memory["buffered"] + memory["cached"]
        assert whole == SPEC.memory_bytes
        assert memory["used"] / whole == pytest.approx(row["system.memory.utilization"], abs=1e-6)
        [(_, load1, _)] = now["system.cpu.load_average.1m"]
        assert load1 == row["system.cpu.load_average.1m"]
        for metric, direction, feature in (
            ("system.network.io", "receive", "system.network.io.receive"),
            ("system.network.io", "transmit", "system.network.io.transmit"),
            ("system.network.packets", "receive", "system.network.packet.count.receive"),
            ("system.network.errors", "receive", "system.network.errors.receive"),
            ("system.disk.io", "read", "system.disk.io.read"),
            ("system.disk.io", "write", "system.disk.io.write"),
        ):
            device = "sda" if metric == "system.disk.io" else "eth0"
            a = [v for x, v, _ in before[metric] if x["device"] == device and x["direction"] == direction]
            b = [v for x, v, _ in now[metric] if x["device"] == device and x["direction"] == direction]
            assert (b[0] - a[0]) / INTERVAL == pytest.approx(row[feature], rel=1e-12), (metric, direction)
        fs = {x["state"]: v for x, v, _ in now["system.filesystem.usage"]}
        assert fs["used"] / (fs["used"] + fs["free"]) == pytest.approx(
            row["system.filesystem.utilization"], abs=1e-6
        )
        [(_, fs_util, _)] = now["system.filesystem.utilization"]
        assert fs_util == pytest.approx(row["system.filesystem.utilization"], abs=1e-6)


def test_otlp_messages_proto_and_json_say_the_same(series: HostSeries) -> None:
    requests = otlp_metrics_requests(SPEC.name, series.samples(), **kwargs(series))
    proto = otlp_metrics_messages(SPEC.name, series.samples(), **kwargs(series))
    as_json = otlp_metrics_messages(SPEC.name, series.samples(), encoding="json", **kwargs(series))
    for request, binary, text in zip(requests, proto, as_json, strict=True):
        assert ExportMetricsServiceRequest.FromString(binary) == request
        document = json.loads(text)
        assert "resourceMetrics" in document
        first_point = document["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["sum"]["dataPoints"][0]
        assert isinstance(first_point["timeUnixNano"], str)  # 64-bit integers as strings
        assert (
            document["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["sum"]["aggregationTemporality"]
            == 2
        )
        assert ParseDict(document, ExportMetricsServiceRequest()) == request
    with pytest.raises(ValueError, match="encoding"):
        otlp_metrics_messages(SPEC.name, series.samples(), encoding="xml", **kwargs(series))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- all


@pytest.mark.parametrize("agent", AGENT_FORMATS)
def test_rendering_is_deterministic(series: HostSeries, agent: str) -> None:
    again = host_rows(3, [SPEC], start=1_800_000_000, interval_s=INTERVAL, count=COUNT)[0]
    assert render(series, agent) == render(again, agent)
    assert render(series, agent)


def test_a_row_without_a_group_leaves_its_messages_out(series: HostSeries) -> None:
    samples = series.samples()
    t, row = samples[3]
    samples[3] = (t, {k: v for k, v in row.items() if not k.startswith("system.disk.")})
    collectd = collectd_by_sample(collectd_messages(SPEC.name, samples, **kwargs(series)))
    assert not any(k[0] == "disk" for k in collectd[round(t)])
    assert any(k[0] == "disk" for k in collectd[round(samples[4][0])])
    assert collectd[round(samples[4][0])][("disk", "sda", "disk_octets", "")]["values"] == [None, None]
    lines = [parse_line(raw) for raw in influx_lines(SPEC.name, samples, **kwargs(series))]
    assert not any(name == "diskio" and ts // 1_000_000_000 == round(t) for name, _, _, ts in lines)
    request = otlp_metrics_requests(SPEC.name, samples, **kwargs(series))[3]
    assert "system.disk.io" not in points(request)


def test_counters_are_consistent_over_a_long_series() -> None:
    [s] = host_rows(8, [HostSpec("ci-01", cpus=2, regime="ci")], interval_s=1.0, count=300)
    lines = [parse_line(raw) for raw in influx_lines("ci-01", s.samples(), cpus=2)]
    net = [fields for name, _, fields, _ in lines if name == "net"]
    assert len(net) == 300
    received = [n["bytes_recv"] for n in net]
    assert all(b >= a for a, b in itertools.pairwise(received))
    assert received[-1] - received[0] == round(sum(s.values["system.network.io.receive"][1:].tolist()))


def test_samples_must_be_in_order() -> None:
    row = dict.fromkeys(HOST_FEATURES, 0.0)
    with pytest.raises(ValueError, match="increase"):
        collectd_messages("h", [(10.0, row), (10.0, row)])
    with pytest.raises(ValueError, match="no samples"):
        influx_lines("h", [])
    with pytest.raises(ValueError, match="unknown agent"):
        render(host_rows(1, 1, count=2)[0], "graphite")
