"""Telegraf's ``kafka`` output from generated host rows: line protocol (``influx``) or JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from service.tools.generate._hosts import GIB
from service.tools.generate.agents._host import NS, Host, Sample, nanoseconds


@dataclass(frozen=True)
class _Metric:
    name: str
    tags: dict[str, str]
    fields: Sequence[tuple[str, float | int | str]]
    time_ns: int


def _telegraf_metrics(h: Host) -> list[_Metric]:
    """The metrics of ``inputs.cpu`` (``percpu = false``, ``totalcpu = true``), ``mem``, ``system``,
    ``net``, ``disk`` and ``diskio``, in the order Telegraf's plugins add their fields."""
    out: list[_Metric] = []
    for p in h.points:
        ns = nanoseconds(p.time)
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
    h = Host(host, samples, cpus, memory_bytes, filesystem_bytes, interval_s)
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
    h = Host(host, samples, cpus, memory_bytes, filesystem_bytes, interval_s)
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
