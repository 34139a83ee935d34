"""Input formats: how shippers write messages (``MICROBATCH_INPUT__FORMAT``). Pure.

A format turns one message's bytes into items with named fields (``base.Format``); the processor then
takes its fields by path (``paths``). ``json`` is the default, and the one with a fast path: a
processor's own typed decoder reads the bytes directly. The metrics formats (``collectd-json``,
``influx``, ``telegraf-json``, and the OTLP ones asked for metrics) give data points instead, one per
item (``points``).
"""

from __future__ import annotations

from service.formats.base import Entry, Fields, Format
from service.formats.paths import MISSING, PathError, Picker, lookup, parse_path

__all__ = [
    "FORMATS",
    "METRICS_FORMATS",
    "MISSING",
    "Entry",
    "Fields",
    "Format",
    "PathError",
    "Picker",
    "load_format",
    "lookup",
    "parse_path",
]

FORMATS = ("json", "text", "syslog", "otlp-proto", "otlp-json", "collectd-json", "influx", "telegraf-json")
METRICS_FORMATS = ("otlp-proto", "otlp-json", "collectd-json", "influx", "telegraf-json")
"""The formats that can give data points (``points``): with ``metrics=True``, or always for the agents'."""


def load_format(name: str, metrics: bool = False) -> Format:
    """The format called ``name`` (one of :data:`FORMATS`; settings validate it). The OTLP formats read
    logs requests, or metrics requests (one item per data point) when ``metrics`` is set; ``collectd-json``,
    ``influx`` and ``telegraf-json`` always give data points. The OTLP formats import the protobuf runtime
    only when chosen."""
    if name == "json":
        from service.formats.plain import JsonFormat

        return JsonFormat()
    if name == "text":
        from service.formats.plain import TextFormat

        return TextFormat()
    if name == "syslog":
        from service.formats.syslog import SyslogFormat

        return SyslogFormat()
    if name == "otlp-proto":
        if metrics:
            from service.formats.otlp_metrics import OtlpMetricsProtoFormat

            return OtlpMetricsProtoFormat()
        from service.formats.otlp import OtlpProtoFormat

        return OtlpProtoFormat()
    if name == "otlp-json":
        if metrics:
            from service.formats.otlp_metrics import OtlpMetricsJsonFormat

            return OtlpMetricsJsonFormat()
        from service.formats.otlp import OtlpJsonFormat

        return OtlpJsonFormat()
    if name == "collectd-json":
        from service.formats.collectd import CollectdJsonFormat

        return CollectdJsonFormat()
    if name == "influx":
        from service.formats.influx import InfluxFormat

        return InfluxFormat()
    if name == "telegraf-json":
        from service.formats.telegraf import TelegrafJsonFormat

        return TelegrafJsonFormat()
    raise ValueError(f"unknown input format {name!r}")
