"""collectd 5's ``write_kafka`` JSON (``Format JSON``, ``StoreRates`` true) from generated host rows."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from service.tools.generate._hosts import GIB
from service.tools.generate.agents._host import CPU_STATES, GROUPS, Host, Point, Sample


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
    h = Host(host, samples, cpus, memory_bytes, filesystem_bytes, interval_s)
    out: list[bytes] = []
    for k, p in enumerate(h.points):
        out += _collectd_sample(h, p, h.points[k - 1] if k else None)
    return out


def _collectd_sample(h: Host, p: Point, previous: Point | None) -> list[bytes]:
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
        loads = [float(p.row[f] or 0.0) for f in GROUPS["load"]]
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
    h: Host,
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
