"""Generated host rows as the messages real metrics agents put in Kafka, for the demo and the integration
tests: collectd 5 ``write_kafka`` JSON, Telegraf's ``kafka`` output (line protocol or JSON) and the
OpenTelemetry Collector's ``kafka`` exporter after the ``hostmetrics`` receiver (OTLP protobuf or JSON).

Every renderer takes a host name and its rows as ``(time, row)`` pairs at a fixed interval
(:meth:`HostSeries.samples`): ``time`` in unix seconds, the end of the interval the row's rates are over,
``row`` feature -> value with the :data:`HOST_FEATURES` names. The host's size comes as keyword arguments
(``cpus``, ``memory_bytes``, ``filesystem_bytes``: :meth:`HostSpec.facts`), since the agents send bytes and
per-CPU counters where the rows hold ratios. A row missing a feature group (or holding None there) leaves
that group's messages out at that sample: cpu (user, system, iowait), memory, load (1m, 5m, 15m), network
(all six), disk (read, write), filesystem.

What a consumer reads back is the row (see ``tests/fixtures/agents/MAPPINGS.md`` for the mappings):

- cpu: jiffies at 100 per second per CPU; every renderer's per-state share of an interval is the row's
  value (user, system, iowait; nice, irq and steal are 0, softirq takes ~1 % of the busy time out of idle).
  collectd (``ReportByCpu false``, ``ValuesPercentage true``) and Telegraf (``cpu-total``) send no cpu on
  the first sample, as they need two readings; hostmetrics sends cumulative ``system.cpu.time`` per CPU,
  whose per-CPU shares differ but average (each CPU has the same total) to the row's.
- memory: ``used`` is the row's share of the total (collectd: of the sum of its type_instances, which is
  the total; Telegraf: ``used_percent``; hostmetrics: of used + free + buffered + cached, and of the total).
- filesystem ``/``: used / (used + free), free being what non-root users may still use (Telegraf's
  ``used_percent``, hostmetrics' utilization, ``df``); 5 % of the filesystem is reserved for root, so
  collectd's ``percent_bytes`` (of the whole size) reads lower.
- network ``eth0`` (and loopback ``lo``, whose traffic is not the host's and must be left out; Telegraf's
  ``net`` skips it itself) and disk ``sda``: collectd sends rates (``StoreRates``: the value of a derive is
  already per second; the first sample of a series is null), Telegraf and hostmetrics cumulative integer
  counters from boot that grow by the row's rate times the interval.

Deterministic: the same arguments give the same bytes (boot time and counter bases come from the host
name).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

import msgspec
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as pb

from service.tools.generate._hosts import GIB, USER_HZ, HostSeries, name_seed

Sample = tuple[float, Mapping[str, float | None]]
Encoding = Literal["proto", "json"]

CPU_STATES = ("user", "system", "wait", "nice", "interrupt", "softirq", "steal", "idle")
"""collectd's cpu type_instances, in the order it sends them (hostmetrics: the same names)."""
RESERVED_SHARE = 0.05  # of a filesystem, for root (ext4's default)
SOFTIRQ_SHARE = 0.01  # of the busy time, taken from idle
IO_SIZE = 64 * 1024  # bytes per disk operation, for the operation counters
NS = 1_000_000_000

_GROUPS: dict[str, tuple[str, ...]] = {
    "cpu": ("system.cpu.utilization.user", "system.cpu.utilization.system", "system.cpu.utilization.iowait"),
    "memory": ("system.memory.utilization",),
    "load": ("system.cpu.load_average.1m", "system.cpu.load_average.5m", "system.cpu.load_average.15m"),
    "network": (
        "system.network.io.receive",
        "system.network.io.transmit",
        "system.network.packet.count.receive",
        "system.network.packet.count.transmit",
        "system.network.errors.receive",
        "system.network.errors.transmit",
    ),
    "disk": ("system.disk.io.read", "system.disk.io.write"),
    "filesystem": ("system.filesystem.utilization",),
}
# Counters per interval: name -> the row's rate it grows by (loopback comes from the cpu, see _loopback).
_COUNTERS = {
    "rx_bytes": "system.network.io.receive",
    "tx_bytes": "system.network.io.transmit",
    "rx_packets": "system.network.packet.count.receive",
    "tx_packets": "system.network.packet.count.transmit",
    "rx_errors": "system.network.errors.receive",
    "tx_errors": "system.network.errors.transmit",
    "read_bytes": "system.disk.io.read",
    "write_bytes": "system.disk.io.write",
}


# ---------------------------------------------------------------------------------------------- the host


@dataclass(frozen=True)
class _Point:
    """One sample, with everything the renderers need: the row's groups present, interval counts and
    cumulative counters since boot."""

    time: float
    interval: float
    first: bool
    has: dict[str, bool]
    row: Mapping[str, float | None]
    jiffies: dict[str, int]  # this interval, per state, the whole host
    cpu_jiffies: dict[str, float]  # cumulative since boot, per state, the whole host
    per_cpu_jiffies: list[dict[str, float]]  # cumulative since boot, per CPU and state
    counts: dict[str, int]  # this interval
    totals: dict[str, int]  # cumulative since boot
    memory: dict[str, int]
    filesystem: dict[str, int]


class _Host:
    def __init__(
        self,
        host: str,
        samples: Sequence[Sample],
        cpus: int,
        memory_bytes: int,
        filesystem_bytes: int,
        interval_s: float | None,
    ) -> None:
        if not samples:
            raise ValueError("no samples")
        if cpus < 1 or memory_bytes < 1 or filesystem_bytes < 1:
            raise ValueError("cpus, memory_bytes and filesystem_bytes must be positive")
        times = [float(t) for t, _ in samples]
        if any(b <= a for a, b in itertools.pairwise(times)):
            raise ValueError("sample times must increase")
        if interval_s is None:
            gaps = sorted(b - a for a, b in itertools.pairwise(times))
            interval_s = gaps[len(gaps) // 2] if gaps else 10.0
        self.name, self.cpus = host, cpus
        self.memory_bytes, self.filesystem_bytes = memory_bytes, filesystem_bytes
        self.interval = float(interval_s)
        seed = name_seed(host)
        self.uptime0 = 86_400 * (1 + seed % 40) + seed % 86_400  # at the first sample
        self.boot = int(times[0] - self.interval) - self.uptime0
        self.points = self._points(samples)

    def _points(self, samples: Sequence[Sample]) -> list[_Point]:
        seed = name_seed(self.name)
        since_boot = float(self.uptime0)
        # Counters start from what the host has done since boot, at a rate of its rows' typical values.
        totals = {}
        for key, feature in _COUNTERS.items():
            rates = [r.get(feature) for _, r in samples]
            mean = sum(v for v in rates if v is not None) / max(1, sum(v is not None for v in rates))
            totals[key] = int(mean * since_boot * (0.5 + (seed % 1000) / 2000))
        totals["lo_bytes"] = int(2e4 * since_boot)
        totals["lo_packets"] = totals["lo_bytes"] // 900
        totals["rx_dropped"] = seed % 97
        totals["tx_dropped"] = 0
        totals["reads"] = totals["read_bytes"] // IO_SIZE
        totals["writes"] = totals["write_bytes"] // IO_SIZE
        cpu_total = {s: 0.0 for s in CPU_STATES}
        cpu_total["idle"] = USER_HZ * since_boot * self.cpus * 0.8
        cpu_total["user"] = USER_HZ * since_boot * self.cpus * 0.15
        cpu_total["system"] = USER_HZ * since_boot * self.cpus * 0.05
        per_cpu_total = [{s: v / self.cpus for s, v in cpu_total.items()} for _ in range(self.cpus)]
        points = []
        previous_time = None
        for k, (when, row) in enumerate(samples):
            t = float(when)
            interval = self.interval if previous_time is None else t - previous_time
            previous_time = t
            has = {g: all(row.get(f) is not None for f in fs) for g, fs in _GROUPS.items()}
            jiffies = self._jiffies(row, interval) if has["cpu"] else {}
            for state, j in jiffies.items():
                cpu_total[state] += j
            for total, part in zip(per_cpu_total, self._spread(jiffies), strict=True):
                for state, seconds in part.items():
                    total[state] += seconds
            counts: dict[str, int] = {}
            if has["network"]:
                for key in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_errors", "tx_errors"):
                    counts[key] = max(0, round(float(row[_COUNTERS[key]] or 0.0) * interval))
            if has["disk"]:
                for key in ("read_bytes", "write_bytes"):
                    counts[key] = max(0, round(float(row[_COUNTERS[key]] or 0.0) * interval))
                counts["reads"] = math.ceil(counts["read_bytes"] / IO_SIZE)
                counts["writes"] = math.ceil(counts["write_bytes"] / IO_SIZE)
            busy = (jiffies.get("user", 0) + jiffies.get("system", 0)) / max(1, sum(jiffies.values()) or 1)
            counts["lo_bytes"] = round((1.5e4 + 6e4 * busy + 997 * (k % 7)) * interval)
            counts["lo_packets"] = max(1, counts["lo_bytes"] // 900)
            for key, value in counts.items():
                totals[key] = totals.get(key, 0) + value
            points.append(
                _Point(
                    time=t,
                    interval=interval,
                    first=k == 0,
                    has=has,
                    row=row,
                    jiffies=jiffies,
                    cpu_jiffies=dict(cpu_total),
                    per_cpu_jiffies=[dict(t) for t in per_cpu_total],
                    counts=counts,
                    totals=dict(totals),
                    memory=self._memory(row) if has["memory"] else {},
                    filesystem=self._filesystem(row) if has["filesystem"] else {},
                )
            )
        return points

    def _jiffies(self, row: Mapping[str, float | None], interval: float) -> dict[str, int]:
        total = max(1, round(USER_HZ * interval * self.cpus))

        def share(feature: str) -> int:
            return max(0, round(min(1.0, max(0.0, float(row[feature] or 0.0))) * total))

        user = min(share("system.cpu.utilization.user"), total)
        system = min(share("system.cpu.utilization.system"), total - user)
        wait = min(share("system.cpu.utilization.iowait"), total - user - system)
        softirq = min(round(SOFTIRQ_SHARE * (user + system)), total - user - system - wait)
        idle = total - user - system - wait - softirq
        jiffies = dict.fromkeys(CPU_STATES, 0)
        jiffies.update(user=user, system=system, wait=wait, softirq=softirq, idle=idle)
        return jiffies

    def _memory(self, row: Mapping[str, float | None]) -> dict[str, int]:
        """Linux memory in bytes: used = the row's share of the total (= total - available)."""
        total = self.memory_bytes
        used = _pages(min(1.0, max(0.0, float(row["system.memory.utilization"] or 0.0))) * total)
        rest = total - used
        buffered, cached = _pages(0.03 * rest), _pages(0.5 * rest)
        slab_recl, slab_unrecl = _pages(0.08 * cached), _pages(0.01 * rest)
        return {
            "total": total,
            "used": used,
            "available": rest,
            "free": rest - buffered - cached,  # used + free + buffered + cached = total
            "buffered": buffered,
            "cached": cached,  # gopsutil's Cached: the page cache and SReclaimable
            "slab_recl": slab_recl,
            "slab_unrecl": slab_unrecl,
        }

    def _filesystem(self, row: Mapping[str, float | None]) -> dict[str, int]:
        """``/`` in bytes: used / (used + free) = the row's share; 5 % reserved for root."""
        size = _pages(self.filesystem_bytes)
        reserved = _pages(RESERVED_SHARE * size)
        share = min(1.0, max(0.0, float(row["system.filesystem.utilization"] or 0.0)))
        used = _pages(share * (size - reserved))
        inodes = max(1024, size // (16 * 1024))
        inodes_used = min(inodes, int(inodes * (0.02 + 0.5 * share)))
        return {
            "size": size,
            "used": used,
            "free": size - reserved - used,
            "reserved": reserved,
            "inodes": inodes,
            "inodes_used": inodes_used,
        }

    def per_cpu_seconds(self, point: _Point) -> list[dict[str, float]]:
        """Cumulative seconds per CPU and state (:meth:`_spread` of every interval so far)."""
        return [{s: total[s] / USER_HZ for s in CPU_STATES} for total in point.per_cpu_jiffies]

    def _spread(self, jiffies: Mapping[str, int]) -> list[dict[str, float]]:
        """One interval's jiffies of the host spread over its CPUs: unevenly for the busy states (CPU i a
        little busier or idler than the mean), every CPU with the same total and none busier than that, so
        every CPU's counters only ever grow."""
        c = self.cpus
        weights = [1.0 + 0.3 * math.sin(1.7 * i + 0.5) for i in range(c)]
        mean = sum(weights) / c
        weights = [w / mean for w in weights]
        busy = sum(v for s, v in jiffies.items() if s != "idle")
        capacity = sum(jiffies.values()) / c
        spread = max((w - 1.0) for w in weights) if c > 1 else 0.0
        alpha = 1.0 if spread == 0 else min(1.0, max(0.0, (capacity * c / max(busy, 1e-9) - 1.0) / spread))
        out = []
        for w in weights:
            scale = 1.0 + alpha * (w - 1.0)
            states = {s: float(v) / c * scale for s, v in jiffies.items() if s != "idle"}
            states["idle"] = max(0.0, capacity - sum(states.values()))
            out.append({s: states.get(s, 0.0) for s in CPU_STATES})
        return out


def _pages(value: float) -> int:
    return round(value / 4096.0) * 4096


def _ns(seconds: float) -> int:
    whole = math.floor(seconds)
    return whole * NS + round((seconds - whole) * NS)


# ---------------------------------------------------------------------------------------------- collectd


def collectd_messages(
    host: str,
    samples: Sequence[Sample],
    *,
    cpus: int = 2,
    memory_bytes: int = 8 * GIB,
    filesystem_bytes: int = 64 * GIB,
    interval_s: float | None = None,
) -> list[bytes]:
    """collectd 5's ``write_kafka`` (``Format JSON``, ``StoreRates`` true, its default) messages for the
    samples: one value list per message, a JSON array of one object, as ``tests/fixtures/agents/collectd``.

    Plugins: ``cpu`` with ``ReportByCpu false``, ``ValuesPercentage true`` (type ``percent``, the
    type_instances of :data:`CPU_STATES` adding up to 100; none on the first sample), ``memory`` (bytes),
    ``load``, ``interface`` ``lo`` and ``eth0`` (``if_octets``, ``if_packets``, ``if_errors``,
    ``if_dropped``: rates, null on the first sample), ``disk`` ``sda`` (``disk_octets``, ``disk_ops``),
    ``df`` ``root`` (``df_complex`` bytes and ``percent_bytes``).
    """
    h = _Host(host, samples, cpus, memory_bytes, filesystem_bytes, interval_s)
    out: list[bytes] = []
    for k, p in enumerate(h.points):
        out += _collectd_sample(h, p, h.points[k - 1] if k else None)
    return out


def _collectd_sample(h: _Host, p: _Point, previous: _Point | None) -> list[bytes]:
    out: list[bytes] = []

    def emit(
        plugin: str,
        instance: str,
        type_: str,
        type_instance: str,
        values: Sequence[float | int | None],
        dsnames: Sequence[str] = ("value",),
        derive: bool = False,
    ) -> None:
        vl = _collectd(h, p.time + 0.002, plugin, instance, type_, type_instance, values, dsnames, derive)
        out.append(vl)

    if p.has["memory"]:
        m = p.memory
        # The six add up to the total (collectd 5.12: used = total - free - buffered - cached - slab; its
        # cached is the page cache alone).
        for name, value in (
            ("used", m["used"]),
            ("buffered", m["buffered"]),
            ("cached", m["cached"] - m["slab_recl"]),
            ("free", m["free"] - m["slab_unrecl"]),
            ("slab_recl", m["slab_recl"]),
            ("slab_unrecl", m["slab_unrecl"]),
        ):
            emit("memory", "", "memory", name, [value])
    if p.has["load"]:
        loads = [float(p.row[f] or 0.0) for f in _GROUPS["load"]]
        emit("load", "", "load", "", loads, dsnames=("shortterm", "midterm", "longterm"))
    net_ok = previous is not None and previous.has["network"]
    for device in ("lo", "eth0"):
        if device == "eth0" and not p.has["network"]:
            continue
        for type_, what in (
            ("if_octets", "bytes"),
            ("if_packets", "packets"),
            ("if_errors", "errors"),
            ("if_dropped", "dropped"),
        ):
            if device == "lo":
                per = p.counts.get(f"lo_{what}", 0) / p.interval
                pair: list[float | None] = [per, per]
            else:
                pair = [
                    p.counts.get(f"rx_{what}", 0) / p.interval,
                    p.counts.get(f"tx_{what}", 0) / p.interval,
                ]
            if previous is None or (device == "eth0" and not net_ok):
                pair = [None, None]
            emit("interface", device, type_, "", pair, dsnames=("rx", "tx"), derive=True)
    if p.has["filesystem"]:
        f = p.filesystem
        for name in ("free", "reserved", "used"):
            emit("df", "root", "df_complex", name, [f[name]])
        for name in ("free", "reserved", "used"):
            emit("df", "root", "percent_bytes", name, [100.0 * f[name] / f["size"]])
    if p.has["cpu"] and previous is not None:
        total = sum(p.jiffies.values())
        for state in CPU_STATES:
            emit("cpu", "", "percent", state, [100.0 * p.jiffies[state] / total])
    if p.has["disk"]:
        disk_ok = previous is not None and previous.has["disk"]
        octets = [p.counts["read_bytes"] / p.interval, p.counts["write_bytes"] / p.interval]
        ops = [p.counts["reads"] / p.interval, p.counts["writes"] / p.interval]
        for type_, values in (("disk_octets", octets), ("disk_ops", ops)):
            emit(
                "disk",
                "sda",
                type_,
                "",
                values if disk_ok else [None, None],
                dsnames=("read", "write"),
                derive=True,
            )
    return out


def _collectd(
    h: _Host,
    time: float,
    plugin: str,
    instance: str,
    type_: str,
    type_instance: str,
    values: Sequence[float | int | None],
    dsnames: Sequence[str] = ("value",),
    derive: bool = False,
) -> bytes:
    """One value list as format_json.c writes it: numbers as %.15g (null for NaN), time and interval %.3f."""
    dstype = '"derive"' if derive else '"gauge"'
    return (
        '[{"values":[' + ",".join(_g15(v) for v in values) + "],"
        '"dstypes":[' + ",".join([dstype] * len(values)) + "],"
        '"dsnames":[' + ",".join(json.dumps(d) for d in dsnames) + "],"
        f'"time":{time:.3f},"interval":{h.interval:.3f},"host":{json.dumps(h.name)},'
        f'"plugin":{json.dumps(plugin)},"plugin_instance":{json.dumps(instance)},'
        f'"type":{json.dumps(type_)},"type_instance":{json.dumps(type_instance)}}}]'
    ).encode()


def _g15(value: float | int | None) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "null"
    return format(float(value), ".15g")


# ---------------------------------------------------------------------------------------------- Telegraf


@dataclass(frozen=True)
class _Metric:
    name: str
    tags: dict[str, str]
    fields: Sequence[tuple[str, float | int | str]]
    time_ns: int


def _telegraf_metrics(h: _Host) -> list[_Metric]:
    """The metrics of ``inputs.cpu`` (``percpu = false``, ``totalcpu = true``), ``mem``, ``system``,
    ``net``, ``disk`` and ``diskio``, in the order Telegraf's plugins add their fields."""
    out: list[_Metric] = []
    for p in h.points:
        ns = _ns(p.time)
        host = {"host": h.name}
        if p.has["cpu"] and not p.first:
            total = sum(p.jiffies.values())
            j = p.jiffies

            def pct(state: str, _j: dict[str, int] = j, _total: int = total) -> float:
                return 100.0 * _j[state] / _total

            usage = {
                "usage_guest": 0.0,
                "usage_guest_nice": 0.0,
                "usage_idle": pct("idle"),
                "usage_iowait": pct("wait"),
                "usage_irq": pct("interrupt"),
                "usage_nice": pct("nice"),
                "usage_softirq": pct("softirq"),
                "usage_steal": pct("steal"),
                "usage_system": pct("system"),
                "usage_user": pct("user"),
            }
            out.append(_Metric("cpu", {"cpu": "cpu-total", **host}, list(usage.items()), ns))
        if p.has["memory"]:
            m = p.memory
            mem: list[tuple[str, float | int | str]] = [
                ("active", m["used"] // 2 + m["cached"] // 2),
                ("available", m["available"]),
                ("available_percent", 100.0 * m["available"] / m["total"]),
                ("buffered", m["buffered"]),
                ("cached", m["cached"]),
                ("free", m["free"]),
                ("inactive", m["cached"] // 2),
                ("slab", m["slab_recl"] + m["slab_unrecl"]),
                ("sreclaimable", m["slab_recl"]),
                ("sunreclaim", m["slab_unrecl"]),
                ("swap_free", 0),
                ("swap_total", 0),
                ("total", m["total"]),
                ("used", m["used"]),
                ("used_percent", 100.0 * m["used"] / m["total"]),
            ]
            out.append(_Metric("mem", host, mem, ns))
        if p.has["load"]:
            r = p.row
            load = [
                ("load1", float(r["system.cpu.load_average.1m"] or 0.0)),
                ("load5", float(r["system.cpu.load_average.5m"] or 0.0)),
                ("load15", float(r["system.cpu.load_average.15m"] or 0.0)),
                ("n_users", 1),
                ("n_unique_users", 1),
                ("n_cpus", h.cpus),
                ("n_physical_cpus", max(1, h.cpus // 2)),
            ]
            out.append(_Metric("system", host, load, ns))
            uptime = int(p.time) - h.boot
            out.append(_Metric("system", host, [("uptime", uptime)], ns))
            out.append(_Metric("system", host, [("uptime_format", _uptime_format(uptime))], ns))
        if p.has["network"]:
            t = p.totals
            net: list[tuple[str, float | int | str]] = [
                ("bytes_sent", t["tx_bytes"]),
                ("bytes_recv", t["rx_bytes"]),
                ("packets_sent", t["tx_packets"]),
                ("packets_recv", t["rx_packets"]),
                ("err_in", t["rx_errors"]),
                ("err_out", t["tx_errors"]),
                ("drop_in", t["rx_dropped"]),
                ("drop_out", t["tx_dropped"]),
                ("speed", -1),
            ]
            out.append(_Metric("net", {**host, "interface": "eth0"}, net, ns))
        if p.has["filesystem"]:
            f = p.filesystem
            disk: list[tuple[str, float | int | str]] = [
                ("free", f["free"]),
                ("inodes_free", f["inodes"] - f["inodes_used"]),
                ("inodes_total", f["inodes"]),
                ("inodes_used", f["inodes_used"]),
                ("total", f["size"]),
                ("used", f["used"]),
                ("used_percent", 100.0 * f["used"] / (f["used"] + f["free"])),
                ("inodes_used_percent", 100.0 * f["inodes_used"] / f["inodes"]),
            ]
            tags = {"device": "sda1", "fstype": "ext4", **host, "mode": "rw", "path": "/"}
            out.append(_Metric("disk", tags, disk, ns))
        if p.has["disk"]:
            t = p.totals
            busy_ms = int(p.counts["reads"] + p.counts["writes"]) // 2
            diskio: list[tuple[str, float | int | str]] = [
                ("merged_reads", t["reads"] // 20),
                ("reads", t["reads"]),
                ("writes", t["writes"]),
                ("write_bytes", t["write_bytes"]),
                ("write_time", t["writes"] // 2),
                ("io_time", (t["reads"] + t["writes"]) // 2),
                ("weighted_io_time", (t["reads"] + t["writes"]) * 3 // 4),
                ("read_bytes", t["read_bytes"]),
                ("read_time", t["reads"] // 2),
                ("iops_in_progress", 0),
                ("merged_writes", t["writes"] // 3),
                ("io_util", min(100.0, 100.0 * busy_ms / (1000.0 * p.interval))),
            ]
            out.append(_Metric("diskio", {**host, "name": "sda"}, diskio, ns))
    return out


def influx_lines(
    host: str,
    samples: Sequence[Sample],
    *,
    cpus: int = 2,
    memory_bytes: int = 8 * GIB,
    filesystem_bytes: int = 64 * GIB,
    interval_s: float | None = None,
) -> list[bytes]:
    """Telegraf's ``kafka`` output with ``data_format = "influx"``: one metric per message, one line
    protocol line ending in a newline, timestamps in ns, integers with the ``i`` suffix (counters
    cumulative), floats as Go's ``FormatFloat(f, 'f', -1, 64)``; as ``tests/fixtures/agents/telegraf``."""
    h = _Host(host, samples, cpus, memory_bytes, filesystem_bytes, interval_s)
    return [_influx(m) for m in _telegraf_metrics(h)]


def telegraf_json(
    host: str,
    samples: Sequence[Sample],
    *,
    cpus: int = 2,
    memory_bytes: int = 8 * GIB,
    filesystem_bytes: int = 64 * GIB,
    interval_s: float | None = None,
) -> list[bytes]:
    """The same metrics as :func:`influx_lines` with ``data_format = "json"`` (``json_timestamp_units =
    "1s"``): ``{"fields":{…},"name":…,"tags":{…},"timestamp":<seconds>}``, keys sorted, a newline after."""
    h = _Host(host, samples, cpus, memory_bytes, filesystem_bytes, interval_s)
    out = []
    for m in _telegraf_metrics(h):
        fields = "{" + ",".join(f"{_go_str(k)}:{_go_json(v)}" for k, v in sorted(m.fields)) + "}"
        tags = "{" + ",".join(f"{_go_str(k)}:{_go_str(v)}" for k, v in sorted(m.tags.items())) + "}"
        stamp = m.time_ns // NS
        out.append(
            f'{{"fields":{fields},"name":{_go_str(m.name)},"tags":{tags},"timestamp":{stamp}}}\n'.encode()
        )
    return out


_LP_ESCAPES = {"\t": r"\t", "\n": r"\n", "\f": r"\f", "\r": r"\r", ",": r"\,", " ": r"\ ", "=": r"\="}


def _lp_escape(text: str) -> str:
    return "".join(_LP_ESCAPES.get(ch, ch) for ch in text)


def _influx(m: _Metric) -> bytes:
    header = m.name + "".join(f",{_lp_escape(k)}={_lp_escape(v)}" for k, v in sorted(m.tags.items()) if v)
    pairs = []
    for key, value in m.fields:
        if isinstance(value, str):
            text = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        elif isinstance(value, int):
            text = f"{value}i"
        else:
            text = _go_float_f(value)
        pairs.append(f"{_lp_escape(key)}={text}")
    return f"{header} {','.join(pairs)} {m.time_ns}\n".encode()


def _go_float_f(value: float) -> str:
    """strconv.FormatFloat(value, 'f', -1, 64): shortest round-trip digits, no exponent."""
    return format(Decimal(repr(float(value))).normalize(), "f")


def _go_json(value: float | int | str) -> str:
    if isinstance(value, str):
        return _go_str(value)
    if isinstance(value, int):
        return str(value)
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):  # encoding/json switches to 'e'
        mantissa, exponent = repr(float(value)).split("e")
        sign, digits = exponent[0], exponent[1:].lstrip("0") or "0"
        return f"{mantissa}e{sign}{digits.rjust(2, '0') if sign == '+' else digits}"
    return _go_float_f(value)


def _go_str(text: str) -> str:
    encoded = json.dumps(text, ensure_ascii=False)
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        encoded = encoded.replace(raw, escaped)
    return encoded


def _uptime_format(uptime: int) -> str:
    days = uptime // 86400
    prefix = f"{days} day{'s' if days > 1 else ''}, " if days else ""
    return f"{prefix}{(uptime // 3600) % 24:2d}:{(uptime // 60) % 60:02d}"


# ---------------------------------------------------------------------------------------------- OTLP

SCOPE_PREFIX = "github.com/open-telemetry/opentelemetry-collector-contrib/receiver/hostmetricsreceiver"
SCHEMA_URL = "https://opentelemetry.io/schemas/1.9.0"
COLLECTOR_VERSION = "0.136.0"
_CUMULATIVE = pb.AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
# hostmetrics' cpu states in the order its Linux scraper records them.
_OTLP_CPU_STATES = ("user", "system", "idle", "interrupt", "nice", "softirq", "steal", "wait")
_SCRAPE_OFFSET_NS = {"cpu": 4_918_273, "disk": 6_121_391, "filesystem": 6_958_824, "load": 7_230_180}
_SCRAPE_OFFSET_NS |= {"memory": 7_386_575, "network": 7_821_988}


def otlp_metrics_requests(
    host: str,
    samples: Sequence[Sample],
    *,
    cpus: int = 2,
    memory_bytes: int = 8 * GIB,
    filesystem_bytes: int = 64 * GIB,
    interval_s: float | None = None,
    optional_metrics: bool = False,
) -> list[ExportMetricsServiceRequest]:
    """One ``ExportMetricsServiceRequest`` per scrape, as the Collector's ``hostmetrics`` receiver (scrapers
    cpu, disk, filesystem, load, memory, network at their defaults; ``resourcedetection`` adding
    ``host.name`` and ``os.type``) hands it to the ``kafka`` exporter: one ResourceMetrics per scraper,
    semconv-1.9 names and attributes (``cpu``, ``state``, ``device``, ``direction``), cumulative sums with
    ``startTimeUnixNano`` = boot. ``optional_metrics`` also enables ``system.cpu.utilization`` (from the
    second scrape on), ``system.memory.utilization`` and ``system.filesystem.utilization``."""
    h = _Host(host, samples, cpus, memory_bytes, filesystem_bytes, interval_s)
    return [_otlp_request(h, p, optional_metrics, i) for i, p in enumerate(h.points)]


def otlp_metrics_messages(
    host: str,
    samples: Sequence[Sample],
    *,
    encoding: Encoding = "proto",
    cpus: int = 2,
    memory_bytes: int = 8 * GIB,
    filesystem_bytes: int = 64 * GIB,
    interval_s: float | None = None,
    optional_metrics: bool = False,
) -> list[bytes]:
    """:func:`otlp_metrics_requests` as Kafka message values: ``otlp_proto`` (the exporter's default) or
    ``otlp_json`` (lowerCamelCase keys, 64-bit integers as strings, enums as numbers)."""
    requests = otlp_metrics_requests(
        host,
        samples,
        cpus=cpus,
        memory_bytes=memory_bytes,
        filesystem_bytes=filesystem_bytes,
        interval_s=interval_s,
        optional_metrics=optional_metrics,
    )
    if encoding == "proto":
        return [r.SerializeToString(deterministic=True) for r in requests]
    if encoding == "json":
        return [msgspec.json.encode(MessageToDict(r, use_integers_for_enums=True)) for r in requests]
    raise ValueError(f"unknown encoding {encoding!r}; use 'proto' or 'json'")


def _kv(pairs: Mapping[str, str | int | float]) -> list[KeyValue]:
    out = []
    for key, value in pairs.items():
        if isinstance(value, str):
            out.append(KeyValue(key=key, value=AnyValue(string_value=value)))
        elif isinstance(value, int):
            out.append(KeyValue(key=key, value=AnyValue(int_value=value)))
        else:
            out.append(KeyValue(key=key, value=AnyValue(double_value=value)))
    return out


def _otlp_request(h: _Host, p: _Point, optional: bool, index: int) -> ExportMetricsServiceRequest:
    scrape = _Scrape(h, p, optional, index)
    scrapers: dict[str, Callable[[], list[pb.Metric]]] = {
        "cpu": scrape.cpu,
        "disk": scrape.disk,
        "filesystem": scrape.filesystem,
        "load": scrape.load,
        "memory": scrape.memory,
        "network": scrape.network,
    }
    request = ExportMetricsServiceRequest()
    for scraper, make in scrapers.items():
        if not p.has[scraper]:
            continue
        rm = request.resource_metrics.add()
        rm.resource.attributes.extend(_kv({"host.name": h.name, "os.type": "linux"}))
        rm.schema_url = SCHEMA_URL
        sm = rm.scope_metrics.add()
        sm.scope.name = f"{SCOPE_PREFIX}/internal/scraper/{scraper}scraper"
        sm.scope.version = COLLECTOR_VERSION
        sm.metrics.extend(make())
    return request


class _Scrape:
    """The metrics of one scrape, per scraper, as the hostmetrics receiver's metadata.yaml names them."""

    def __init__(self, h: _Host, p: _Point, optional: bool, index: int) -> None:
        self.h, self.p, self.optional, self.index = h, p, optional, index
        self.boot_ns, self.base_ns = h.boot * NS, _ns(p.time)

    def point(self, scraper: str, value: float, attrs: Mapping[str, str | int | float]) -> pb.NumberDataPoint:
        dp = pb.NumberDataPoint(
            start_time_unix_nano=self.boot_ns, time_unix_nano=self.base_ns + _SCRAPE_OFFSET_NS[scraper]
        )
        dp.attributes.extend(_kv(attrs))
        if isinstance(value, int):
            dp.as_int = value
        else:
            dp.as_double = float(value)
        return dp

    @staticmethod
    def sum_(name: str, desc: str, unit: str, points: list, monotonic: bool) -> pb.Metric:
        data = pb.Sum(data_points=points, aggregation_temporality=_CUMULATIVE, is_monotonic=monotonic)
        return pb.Metric(name=name, description=desc, unit=unit, sum=data)

    @staticmethod
    def gauge(name: str, desc: str, unit: str, points: list) -> pb.Metric:
        return pb.Metric(name=name, description=desc, unit=unit, gauge=pb.Gauge(data_points=points))

    def cpu(self) -> list[pb.Metric]:
        h, point = self.h, self.point
        per_cpu = h.per_cpu_seconds(self.p)
        times = [
            point("cpu", seconds[state], {"cpu": f"cpu{i}", "state": state})
            for i, seconds in enumerate(per_cpu)
            for state in _OTLP_CPU_STATES
        ]
        desc = "Total seconds each logical CPU spent on each mode."
        metrics = [self.sum_("system.cpu.time", desc, "s", times, True)]
        if self.optional and self.index > 0:
            utilization = []
            before_all = h.per_cpu_seconds(h.points[self.index - 1])
            for i, (now, before) in enumerate(zip(per_cpu, before_all, strict=True)):
                elapsed = sum(now.values()) - sum(before.values())
                for state in _OTLP_CPU_STATES:
                    share = (now[state] - before[state]) / elapsed if elapsed > 0 else 0.0
                    utilization.append(point("cpu", share, {"cpu": f"cpu{i}", "state": state}))
            desc = (
                "Difference in system.cpu.time since the last measurement per logical CPU, divided by the "
                "elapsed time (value in interval [0,1])."
            )
            metrics.append(self.gauge("system.cpu.utilization", desc, "1", utilization))
        return metrics

    def disk(self) -> list[pb.Metric]:
        t, point = self.p.totals, self.point
        io = [point("disk", t[f"{d}_bytes"], {"device": "sda", "direction": d}) for d in ("read", "write")]
        ops = [point("disk", t[f"{d}s"], {"device": "sda", "direction": d}) for d in ("read", "write")]
        return [
            self.sum_("system.disk.io", "Disk bytes transferred.", "By", io, True),
            self.sum_("system.disk.operations", "Disk operations count.", "{operations}", ops, True),
        ]

    def filesystem(self) -> list[pb.Metric]:
        f, point = self.p.filesystem, self.point
        base: dict[str, str | int | float] = {
            "device": "/dev/sda1",
            "mode": "rw",
            "mountpoint": "/",
            "type": "ext4",
        }
        usage = [
            point("filesystem", f[state], {**base, "state": state}) for state in ("used", "free", "reserved")
        ]
        inodes = [
            point("filesystem", f["inodes_used"], {**base, "state": "used"}),
            point("filesystem", f["inodes"] - f["inodes_used"], {**base, "state": "free"}),
        ]
        metrics = [
            self.sum_("system.filesystem.inodes.usage", "FileSystem inodes used.", "{inodes}", inodes, False),
            self.sum_("system.filesystem.usage", "Filesystem bytes used.", "By", usage, False),
        ]
        if self.optional:
            share = [point("filesystem", f["used"] / (f["used"] + f["free"]), base)]
            desc = "Fraction of filesystem bytes used."
            metrics.append(self.gauge("system.filesystem.utilization", desc, "1", share))
        return metrics

    def load(self) -> list[pb.Metric]:
        metrics = []
        for window, text in (("15m", "15 minutes"), ("1m", "1 minute"), ("5m", "5 minutes")):
            value = float(self.p.row[f"system.cpu.load_average.{window}"] or 0.0)
            name, desc = f"system.cpu.load_average.{window}", f"Average CPU Load over {text}."
            metrics.append(self.gauge(name, desc, "{thread}", [self.point("load", value, {})]))
        return metrics

    def memory(self) -> list[pb.Metric]:
        m = self.p.memory
        states = {
            "used": m["used"],
            "free": m["free"],
            "buffered": m["buffered"],
            "cached": m["cached"],
            "slab_reclaimable": m["slab_recl"],
            "slab_unreclaimable": m["slab_unrecl"],
        }
        usage = [self.point("memory", v, {"state": s}) for s, v in states.items()]
        metrics = [self.sum_("system.memory.usage", "Bytes of memory in use.", "By", usage, False)]
        if self.optional:
            shares = [self.point("memory", v / m["total"], {"state": s}) for s, v in states.items()]
            desc = "Percentage of memory bytes in use."
            metrics.append(self.gauge("system.memory.utilization", desc, "1", shares))
        return metrics

    def network(self) -> list[pb.Metric]:
        t, point = self.p.totals, self.point
        series: dict[str, list[pb.NumberDataPoint]] = {"dropped": [], "errors": [], "io": [], "packets": []}
        devices: dict[str, dict[str, tuple[str, str]]] = {
            "lo": {"io": ("lo_bytes", "lo_bytes"), "packets": ("lo_packets", "lo_packets")},
            "eth0": {
                "io": ("tx_bytes", "rx_bytes"),
                "packets": ("tx_packets", "rx_packets"),
                "errors": ("tx_errors", "rx_errors"),
                "dropped": ("tx_dropped", "rx_dropped"),
            },
        }
        for device, keys in devices.items():
            for direction, side in (("transmit", 0), ("receive", 1)):
                attrs = {"device": device, "direction": direction}
                for name, points in series.items():
                    key = keys.get(name)
                    points.append(point("network", t[key[side]] if key else 0, attrs))
        connections = [
            point("network", n, {"protocol": "tcp", "state": s})
            for s, n in (("ESTABLISHED", 12), ("LISTEN", 6), ("TIME_WAIT", 3))
        ]
        counters = [
            ("dropped", "The number of packets dropped.", "{packets}"),
            ("errors", "The number of errors encountered.", "{errors}"),
            ("io", "The number of bytes transmitted and received.", "By"),
            ("packets", "The number of packets transferred.", "{packets}"),
        ]
        desc = "The number of connections."
        metrics = [self.sum_("system.network.connections", desc, "{connections}", connections, False)]
        metrics += [self.sum_(f"system.network.{n}", d, u, series[n], True) for n, d, u in counters]
        return metrics


# ---------------------------------------------------------------------------------------------- by name

AGENT_FORMATS = ("collectd", "influx", "telegraf-json", "otlp-proto", "otlp-json")


def render(series: HostSeries, agent: str) -> list[bytes]:
    """A generated host's rows as one agent's messages: ``agent`` one of :data:`AGENT_FORMATS`."""
    spec, samples = series.spec, series.samples()
    facts = {"cpus": spec.cpus, "memory_bytes": spec.memory_bytes, "filesystem_bytes": spec.filesystem_bytes}
    if agent == "collectd":
        return collectd_messages(spec.name, samples, interval_s=series.interval_s, **facts)
    if agent == "influx":
        return influx_lines(spec.name, samples, interval_s=series.interval_s, **facts)
    if agent == "telegraf-json":
        return telegraf_json(spec.name, samples, interval_s=series.interval_s, **facts)
    if agent in ("otlp-proto", "otlp-json"):
        encoding: Encoding = "proto" if agent == "otlp-proto" else "json"
        return otlp_metrics_messages(
            spec.name,
            samples,
            encoding=encoding,
            cpus=spec.cpus,
            memory_bytes=spec.memory_bytes,
            filesystem_bytes=spec.filesystem_bytes,
            interval_s=series.interval_s,
        )
    raise ValueError(f"unknown agent format {agent!r}; known: {AGENT_FORMATS}")
