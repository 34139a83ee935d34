"""``collectd-json``: collectd's ``write_kafka`` plugin with ``Format JSON``, one point per value. Pure.

A message is a JSON array of value lists (write_kafka writes one per message; a lone object is read too)::

    [{"values":[16367400.2459166,24575.6760449198],"dstypes":["derive","derive"],"dsnames":["read","write"],
      "time":1796127909.695,"interval":1.000,"host":"testhost","plugin":"disk","plugin_instance":"vda",
      "type":"disk_octets","type_instance":""}]

Each value (one per data source, ``dsnames``) becomes a point (``points``): the semantic-convention one
where the plugin's type maps (``system.disk.io {system.device=vda, disk.io.direction=read}``), else the
native ``collectd.<plugin>.<type>[.<dsname>]`` with the non-empty ``plugin_instance`` and ``type_instance``
as attributes. ``gauge`` data sources give gauges; ``derive``, ``counter`` and ``absolute`` give rates:
write_kafka's ``StoreRates`` is on by default and divides them by time itself (``null`` for a series' first
sample), while ``dstypes`` still says ``derive``. With ``StoreRates false`` these values would be raw
counters that nothing in the message tells apart, so it must stay on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from service.errors import InvalidMessage, Reason
from service.formats.base import Entry
from service.formats.plain import parse_json
from service.formats.points import (
    CPU_MODES,
    GAUGE,
    LOAD_AVERAGES,
    MEMORY_STATES,
    RATE,
    Point,
    number,
    point,
)


class CollectdJsonFormat:
    """collectd ``write_kafka`` (``Format JSON``, with the default ``StoreRates true``)."""

    name: ClassVar[str] = "collectd-json"
    text_field: ClassVar[str | None] = None
    fans_out: ClassVar[bool] = True
    metrics: ClassVar[bool] = True

    def split(self, value: bytes) -> list[Entry]:
        document = parse_json(value)
        if isinstance(document, dict):
            document = [document]
        elif not isinstance(document, list):
            raise InvalidMessage(
                Reason.INVALID_EVENT, f"expected a JSON array of value lists, got {type(document).__name__}"
            )
        entries: list[Entry] = []
        for value_list in document:
            try:
                entries.extend(value_list_points(value_list))
            except (TypeError, ValueError) as exc:
                entries.append(InvalidMessage(Reason.INVALID_EVENT, f"bad collectd value list: {exc}"))
        return entries


_KINDS = {"gauge": GAUGE, "derive": RATE, "counter": RATE, "absolute": RATE}


def value_list_points(value_list: Any) -> list[Point]:
    """The points of one value list; TypeError or ValueError, naming what is wrong, for one of the wrong
    shape (all its values are then left out: its siblings are still read)."""
    if not isinstance(value_list, dict):
        raise TypeError(f"expected an object, got {type(value_list).__name__}")
    values = _list(value_list, "values")
    dsnames = _list(value_list, "dsnames")
    dstypes = _list(value_list, "dstypes")
    if not len(values) == len(dsnames) == len(dstypes):
        raise ValueError("values, dsnames and dstypes differ in length")
    time = number(value_list.get("time"))
    if time is None:
        raise ValueError("no time")
    host = _text(value_list, "host", required=True)
    plugin, plugin_instance = _text(value_list, "plugin", required=True), _text(value_list, "plugin_instance")
    type_, type_instance = _text(value_list, "type", required=True), _text(value_list, "type_instance")
    kinds = []
    for dstype in dstypes:
        kind = _KINDS.get(dstype) if isinstance(dstype, str) else None
        if kind is None:
            raise ValueError(f"unknown dstype {dstype!r}")
        kinds.append(kind)
    numbers = [number(v) for v in values]
    semconv = _PLUGINS.get(plugin)
    points = []  # returned whole or not at all: a bad value list leaves no part of itself behind
    for dsname, raw, kind in zip(dsnames, numbers, kinds, strict=True):
        if not isinstance(dsname, str):
            raise TypeError(f"dsname {dsname!r} is not a string")
        mapped = semconv(plugin_instance, type_, type_instance, dsname) if semconv else None
        if mapped is None:
            metric = (
                f"collectd.{plugin}.{type_}" if dsname == "value" else f"collectd.{plugin}.{type_}.{dsname}"
            )
            attributes = {}
            if plugin_instance:
                attributes["plugin_instance"] = plugin_instance
            if type_instance:
                attributes["type_instance"] = type_instance
            points.append(point(host, metric, attributes, time, raw, kind))
        else:
            metric, attributes, divisor = mapped
            scaled = raw / divisor if raw is not None and divisor != 1.0 else raw
            points.append(point(host, metric, attributes, time, scaled, kind))
    return points


def _list(value_list: dict[str, Any], key: str) -> list[Any]:
    found = value_list.get(key)
    if not isinstance(found, list):
        raise TypeError(f"{key} is {'missing' if found is None else 'not a list'}")
    return found


def _text(value_list: dict[str, Any], key: str, required: bool = False) -> str:
    found = value_list.get(key)
    if found is None and not required:
        return ""
    if not isinstance(found, str):
        raise TypeError(f"{key} is {'missing' if found is None else 'not a string'}")
    return found


# plugin -> (plugin_instance, type, type_instance, dsname) -> (metric, attributes, divisor), or None for a
# value that keeps its native name. Percentages are divided by 100: semconv utilizations are ratios.
_Mapped = tuple[str, dict[str, str], float]


def _cpu(instance: str, type_: str, type_instance: str, dsname: str) -> _Mapped | None:
    mode = CPU_MODES.get(type_instance)  # "active" (ReportByState false) is no mode: native
    if mode is None:
        return None
    attributes = {"cpu.mode": mode, "cpu": instance or "total"}  # ReportByCpu false: one all-CPU series
    if type_ == "percent":
        return "system.cpu.utilization", attributes, 100.0
    if type_ == "cpu":  # jiffies per second (USER_HZ, usually 100 per CPU)
        return "system.cpu.time", attributes, 1.0
    return None


def _memory(instance: str, type_: str, type_instance: str, dsname: str) -> _Mapped | None:
    state = MEMORY_STATES.get(type_instance)
    if state is None:
        return None
    if type_ == "memory":
        return "system.memory.usage", {"system.memory.state": state}, 1.0
    if type_ == "percent":  # ValuesPercentage true: percent of the sum of the states
        return "system.memory.utilization", {"system.memory.state": state}, 100.0
    return None


_LOAD = {"shortterm": LOAD_AVERAGES[0], "midterm": LOAD_AVERAGES[1], "longterm": LOAD_AVERAGES[2]}


def _load(instance: str, type_: str, type_instance: str, dsname: str) -> _Mapped | None:
    if type_ != "load" or type_instance:  # "relative" (ReportRelative): divided by the CPUs, native
        return None
    metric = _LOAD.get(dsname)
    return None if metric is None else (metric, {}, 1.0)


_INTERFACE = {
    "if_octets": "system.network.io",
    "if_packets": "system.network.packet.count",
    "if_errors": "system.network.errors",
    "if_dropped": "system.network.packet.dropped",
}
_NETWORK_DIRECTIONS = {"rx": "receive", "tx": "transmit"}


def _interface(instance: str, type_: str, type_instance: str, dsname: str) -> _Mapped | None:
    metric, direction = _INTERFACE.get(type_), _NETWORK_DIRECTIONS.get(dsname)
    if metric is None or direction is None:
        return None
    return metric, {"network.interface.name": instance, "network.io.direction": direction}, 1.0


_DISK = {"disk_octets": "system.disk.io", "disk_ops": "system.disk.operations"}
_DISK_DIRECTIONS = {"read": "read", "write": "write"}


def _disk(instance: str, type_: str, type_instance: str, dsname: str) -> _Mapped | None:
    metric, direction = _DISK.get(type_), _DISK_DIRECTIONS.get(dsname)
    if metric is None or direction is None:  # disk_time, disk_merged, disk_io_time, ...: native
        return None
    return metric, {"system.device": instance, "disk.io.direction": direction}, 1.0


_FILESYSTEM_STATES = {"used": "used", "free": "free", "reserved": "reserved"}


def _df(instance: str, type_: str, type_instance: str, dsname: str) -> _Mapped | None:
    # The mount point as collectd names it: "root" for /, "boot-efi" for /boot/efi.
    if type_ == "df_complex" and (state := _FILESYSTEM_STATES.get(type_instance)):
        return (
            "system.filesystem.usage",
            {"system.filesystem.mountpoint": instance, "system.filesystem.state": state},
            1.0,
        )
    if type_ == "percent_bytes" and type_instance == "used":  # percent of the size, reserved included
        return "system.filesystem.utilization", {"system.filesystem.mountpoint": instance}, 100.0
    return None


_PLUGINS: dict[str, Callable[[str, str, str, str], _Mapped | None]] = {
    "cpu": _cpu,
    "memory": _memory,
    "load": _load,
    "interface": _interface,
    "disk": _disk,
    "df": _df,
}
