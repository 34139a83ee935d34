"""Input formats: how shippers write messages (``MICROBATCH_INPUT__FORMAT``). Pure.

A format turns one message's bytes into items with named fields (``base.Format``); the processor then
takes its fields by path (``paths``). ``json`` is the default, and the one with a fast path: a
processor's own typed decoder reads the bytes directly.
"""

from __future__ import annotations

from service.formats.base import Entry, Fields, Format
from service.formats.paths import MISSING, PathError, Picker, lookup, parse_path

__all__ = [
    "FORMATS",
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

FORMATS = ("json", "text", "syslog", "otlp-proto", "otlp-json")


def load_format(name: str) -> Format:
    """The format called ``name`` (one of :data:`FORMATS`; settings validate it). The OTLP formats import
    the protobuf runtime only when chosen."""
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
        from service.formats.otlp import OtlpProtoFormat

        return OtlpProtoFormat()
    if name == "otlp-json":
        from service.formats.otlp import OtlpJsonFormat

        return OtlpJsonFormat()
    raise ValueError(f"unknown input format {name!r}")
