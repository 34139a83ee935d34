"""The point contract of the metrics formats (``metrics = True``), and the helpers they share. Pure.

A metrics format's ``split`` returns one entry per data point, each a plain dict::

    host        "web-01": the host it describes (absent when the message does not say)
    metric      "system.cpu.utilization": the semantic-convention name where the agent's metric maps
                to one, else the agent's own name (``collectd.<plugin>.<type>[.<ds>]``,
                ``<measurement>.<field>``, the OTLP metric's name)
    attributes  {"cpu.mode": "user", "cpu": "total"}: all values strings
    time        1718000010.0: seconds since the epoch
    value       0.082, or None: no value (a rate's first sample, OTLP's NO_RECORDED_VALUE, a non-finite
                number)
    kind        "gauge": the value is the measurement; "counter": a cumulative monotonic total (a
                consumer takes Δvalue / Δtime of the series, a decrease being a restart); "rate":
                already per second
    start       only OTLP counters: their start time, seconds (a new one means a reset); absent when the
                point has none
    resource    only OTLP: the resource's attributes, values as strings

A series is ``(host, metric, sorted attributes)``. Points are plain dicts, built by :func:`point`, because
there are many of them per message: no class per point. Points of one message may share their
``attributes`` and ``resource`` dicts: read them, never change them.
"""

from __future__ import annotations

import math
from typing import Any, Final

GAUGE: Final = "gauge"
COUNTER: Final = "counter"
RATE: Final = "rate"

Point = dict[str, Any]


def point(
    host: str | None, metric: str, attributes: dict[str, str], time: float, value: float | None, kind: str
) -> Point:
    """One point of the contract above; ``host`` is left out when None or empty."""
    if host:
        return {
            "host": host,
            "metric": metric,
            "attributes": attributes,
            "time": time,
            "value": value,
            "kind": kind,
        }
    return {"metric": metric, "attributes": attributes, "time": time, "value": value, "kind": kind}


def number(raw: Any) -> float | None:
    """A JSON number as a point's value: a float, or None for null, NaN, an infinity or an integer too
    large for a float. TypeError for anything else (a bool is not a number)."""
    if raw is None:
        return None
    if isinstance(raw, float):
        return raw if math.isfinite(raw) else None
    if isinstance(raw, int) and not isinstance(raw, bool):
        try:
            return float(raw)
        except OverflowError:  # an int above 1.8e308: infinite as a float
            return None
    raise TypeError(f"expected a number, got {type(raw).__name__}")


def finite(value: float) -> float | None:
    """``value``, or None when it is NaN or infinite."""
    return value if math.isfinite(value) else None


def epoch_seconds(stamp: int | float) -> float:
    """An epoch timestamp of unknown unit as seconds, the unit told by its magnitude: from 1e17 on
    nanoseconds, from 1e14 microseconds, from 1e11 milliseconds, below that seconds. (Unambiguous from
    1973 to 5138: 1e11 seconds is the year 5138, 1e11 milliseconds 1973.)"""
    magnitude = abs(stamp)
    if magnitude >= 1e17:
        return stamp / 1_000_000_000
    if magnitude >= 1e14:
        return stamp / 1_000_000
    if magnitude >= 1e11:
        return stamp / 1_000
    return float(stamp)


# The semantic conventions' ``cpu.mode`` values, by the names agents give them.
CPU_MODES: Final = {
    "user": "user",
    "system": "system",
    "iowait": "iowait",
    "wait": "iowait",  # collectd, hostmetrics
    "idle": "idle",
    "nice": "nice",
    "interrupt": "interrupt",
    "irq": "interrupt",  # Telegraf
    "softirq": "softirq",
    "steal": "steal",
    "guest": "guest",
    "guest_nice": "guest_nice",
}

# ``system.memory.state`` values, likewise.
MEMORY_STATES: Final = {
    "used": "used",
    "free": "free",
    "buffers": "buffers",
    "buffered": "buffers",  # collectd, hostmetrics
    "cached": "cached",
    "slab_reclaimable": "slab_reclaimable",
    "slab_recl": "slab_reclaimable",  # collectd
    "slab_unreclaimable": "slab_unreclaimable",
    "slab_unrecl": "slab_unreclaimable",  # collectd
    "available": "available",
}

LOAD_AVERAGES: Final = (
    "system.cpu.load_average.1m",
    "system.cpu.load_average.5m",
    "system.cpu.load_average.15m",
)
