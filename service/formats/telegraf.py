"""Telegraf's metrics as points, and ``telegraf-json``: its ``outputs.kafka`` with ``data_format = "json"``.
Pure.

A Telegraf metric is a measurement name, tags, fields and a time; ``influx`` (line protocol) and
``telegraf-json`` both hand theirs to :func:`metric_points`, which makes one point per numeric field: the
semantic-convention one where the input plugin's field maps (``cpu`` ``usage_user`` ->
``system.cpu.utilization {cpu.mode=user, cpu=total}``, a ratio), else the native ``<measurement>.<field>``,
a gauge, with the tags as attributes. The tag ``host`` (which the agent adds to every metric) is the
point's host, never an attribute. String and boolean fields are left out: they are not measurements.

The JSON serializer writes one metric per message, keys sorted::

    {"fields":{"load1":0.51,"load15":0.32,"load5":0.39,"n_cpus":2},"name":"system","tags":{"host":"web-01"},"timestamp":1718000010}

``timestamp`` is an integer in ``json_timestamp_units`` (default ``1s``), read by its magnitude
(``points.epoch_seconds``), so any unit works; ``json_timestamp_format`` (a string time) does not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import ClassVar

from service.errors import InvalidMessage, Reason
from service.formats.base import Entry
from service.formats.plain import json_object
from service.formats.points import (
    COUNTER,
    CPU_MODES,
    GAUGE,
    LOAD_AVERAGES,
    epoch_seconds,
    number,
    point,
)


class TelegrafJsonFormat:
    """Telegraf ``outputs.kafka`` with ``data_format = "json"``: one metric per message."""

    name: ClassVar[str] = "telegraf-json"
    text_field: ClassVar[str | None] = None
    fans_out: ClassVar[bool] = True
    metrics: ClassVar[bool] = True

    def split(self, value: bytes) -> list[Entry]:
        document = json_object(value)
        try:
            name, tags, fields = document["name"], document.get("tags"), document["fields"]
            if tags is None:  # Go's encoding/json writes {} for no tags; null or absent reads the same
                tags = {}
            stamp = document["timestamp"]
            if not isinstance(name, str):
                raise TypeError("name is not a string")
            if not isinstance(fields, dict):
                raise TypeError("fields is not an object")
            if not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values()):
                raise TypeError("tags is not an object of strings")
            if isinstance(stamp, bool) or not isinstance(stamp, int | float):
                raise TypeError("timestamp is not a number (json_timestamp_format is not supported)")
            if not abs(stamp) < 2**63:  # what Go's int64 holds
                raise TypeError("timestamp is out of range")
            numeric = [
                (key, number(raw))
                for key, raw in fields.items()
                if isinstance(raw, int | float) and not isinstance(raw, bool)  # strings, booleans: no
            ]
        except (KeyError, TypeError) as exc:
            detail = f"{exc.args[0]} is missing" if isinstance(exc, KeyError) else str(exc)
            raise InvalidMessage(Reason.INVALID_EVENT, f"not a Telegraf JSON metric: {detail}") from None
        points: list[Entry] = []
        metric_points(points, name, tags, numeric, epoch_seconds(stamp))
        return points


def metric_points(
    out: list[Entry],
    measurement: str,
    tags: dict[str, str],
    fields: Iterable[tuple[str, float | None]],
    time: float,
) -> None:
    """Append to ``out`` the points of one Telegraf metric: its numeric ``fields`` (field order kept)."""
    host = tags.get("host")
    mapper = _MEASUREMENTS.get(measurement)
    native: dict[str, str] | None = None
    for field, value in fields:
        mapped = mapper(field, tags) if mapper is not None else None
        if mapped is None:
            if native is None:  # one dict for all of this metric's native points: read, never written
                native = {k: v for k, v in tags.items() if k != "host"}
            out.append(point(host, f"{measurement}.{field}", native, time, value, GAUGE))
        else:
            metric, attributes, divisor, kind = mapped
            scaled = value / divisor if value is not None and divisor != 1.0 else value
            out.append(point(host, metric, attributes, time, scaled, kind))


# measurement -> (field, tags) -> (metric, attributes, divisor, kind), or None for a native point.
# Percentages are divided by 100: semconv utilizations are ratios.
_Mapped = tuple[str, dict[str, str], float, str]


def _cpu_number(tag: str) -> str:
    """``cpu-total`` -> ``total``, ``cpu3`` -> ``3``."""
    if tag == "cpu-total":
        return "total"
    return tag[3:] if tag.startswith("cpu") and tag[3:].isdigit() else tag


def _cpu(field: str, tags: dict[str, str]) -> _Mapped | None:
    prefix, _, mode = field.partition("_")  # usage_guest_nice -> "usage", "guest_nice"
    semconv_mode = CPU_MODES.get(mode)  # usage_active (report_active) is no mode: native
    cpu = tags.get("cpu")
    if semconv_mode is None or cpu is None:
        return None
    attributes = {"cpu.mode": semconv_mode, "cpu": _cpu_number(cpu)}
    if prefix == "usage":  # percent of the CPU time since the previous gather
        return "system.cpu.utilization", attributes, 100.0, GAUGE
    if prefix == "time":  # collect_cpu_time: seconds since boot
        return "system.cpu.time", attributes, 1.0, COUNTER
    return None


def _mem(field: str, tags: dict[str, str]) -> _Mapped | None:
    if field == "used_percent":  # 100 * (total - available) / total
        return "system.memory.utilization", {"system.memory.state": "used"}, 100.0, GAUGE
    return None


_LOAD = {"load1": LOAD_AVERAGES[0], "load5": LOAD_AVERAGES[1], "load15": LOAD_AVERAGES[2]}


def _system(field: str, tags: dict[str, str]) -> _Mapped | None:
    metric = _LOAD.get(field)
    return None if metric is None else (metric, {}, 1.0, GAUGE)


_NET = {
    "bytes_recv": ("system.network.io", "receive"),
    "bytes_sent": ("system.network.io", "transmit"),
    "packets_recv": ("system.network.packet.count", "receive"),
    "packets_sent": ("system.network.packet.count", "transmit"),
    "err_in": ("system.network.errors", "receive"),
    "err_out": ("system.network.errors", "transmit"),
    "drop_in": ("system.network.packet.dropped", "receive"),
    "drop_out": ("system.network.packet.dropped", "transmit"),
}


def _net(field: str, tags: dict[str, str]) -> _Mapped | None:
    found, interface = _NET.get(field), tags.get("interface")
    if found is None or interface is None:  # speed: native
        return None
    metric, direction = found
    return metric, {"network.interface.name": interface, "network.io.direction": direction}, 1.0, COUNTER


_DISKIO = {
    "read_bytes": ("system.disk.io", "read"),
    "write_bytes": ("system.disk.io", "write"),
    "reads": ("system.disk.operations", "read"),
    "writes": ("system.disk.operations", "write"),
}


def _diskio(field: str, tags: dict[str, str]) -> _Mapped | None:
    found, device = _DISKIO.get(field), tags.get("name")
    if found is None or device is None:
        return None
    metric, direction = found
    return metric, {"system.device": device, "disk.io.direction": direction}, 1.0, COUNTER


def _disk(field: str, tags: dict[str, str]) -> _Mapped | None:
    path = tags.get("path")
    if path is None:
        return None
    if field == "used_percent":  # used / (used + free): root-reserved blocks left out
        return "system.filesystem.utilization", {"system.filesystem.mountpoint": path}, 100.0, GAUGE
    if field in ("used", "free"):  # free: what non-root users may still use (f_bavail)
        return (
            "system.filesystem.usage",
            {"system.filesystem.mountpoint": path, "system.filesystem.state": field},
            1.0,
            GAUGE,
        )
    return None


_MEASUREMENTS: dict[str, Callable[[str, dict[str, str]], _Mapped | None]] = {
    "cpu": _cpu,
    "mem": _mem,
    "system": _system,
    "net": _net,
    "diskio": _diskio,
    "disk": _disk,
}
