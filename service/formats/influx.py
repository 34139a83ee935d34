"""``influx``: InfluxDB line protocol, as Telegraf's ``outputs.kafka`` writes it by default
(``data_format = "influx"``). Pure.

One line is one metric, ``measurement[,tag=value...] field=value[,field=value...] timestamp``::

    system,host=web-01 load1=0.51,load5=0.39,load15=0.32,n_cpus=2i 1718000010000000000

and becomes its points through Telegraf's naming (``telegraf.metric_points``). A message may hold several
lines (Telegraf writes one per message, ``influx_max_line_bytes`` can split one metric into more); a line
that cannot be read is an InvalidMessage entry of its own, and the other lines' points still come back.
Blank lines and ``#`` comments are skipped.

The rules, as Telegraf's serializer writes and its parser reads them:

- measurement names escape comma and space (``\\,`` ``\\ ``); tag keys, tag values and field keys also
  the equals sign (``\\=``); all of them tab, LF, FF and CR as ``\\t`` ``\\n`` ``\\f`` ``\\r``. Any other
  backslash is itself (``C:\\Temp`` is ``C:\\Temp``).
- string field values are double-quoted and escape only ``\\"`` and ``\\\\``; a raw LF inside one is part
  of the string, not the end of the line.
- numbers are floats (``1``, ``-1.5e-07``), ``42i`` a signed and ``42u`` an unsigned 64-bit integer (both
  points' floats here); booleans ``t``, ``true``, ``True``, ``TRUE`` and the like.
- the timestamp is an integer, nanoseconds for Telegraf (any unit is read by its magnitude,
  ``points.epoch_seconds``); a line without one (the server's time, in InfluxDB) is an entry of its own:
  nothing here knows the time it arrived.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import ClassVar

from service.errors import InvalidMessage, Reason
from service.formats.base import Entry, utf8
from service.formats.points import epoch_seconds, finite
from service.formats.telegraf import metric_points

FieldValue = float | int | bool | str
Line = tuple[str, dict[str, str], dict[str, FieldValue], int]
"""One metric: measurement, tags, typed fields (in the line's order), timestamp as written."""


class InfluxFormat:
    """InfluxDB line protocol (Telegraf ``outputs.kafka``, ``data_format = "influx"``)."""

    name: ClassVar[str] = "influx"
    text_field: ClassVar[str | None] = None
    fans_out: ClassVar[bool] = True
    metrics: ClassVar[bool] = True

    def split(self, value: bytes) -> list[Entry]:
        entries: list[Entry] = []
        for line in parse_lines(utf8(value)):
            if isinstance(line, InvalidMessage):
                entries.append(line)
                continue
            name, tags, fields, stamp = line
            numeric = [
                (key, finite(float(raw)))
                for key, raw in fields.items()
                if not isinstance(raw, bool | str)  # not measurements
            ]
            metric_points(entries, name, tags, numeric, epoch_seconds(stamp))
        return entries


_NAME = r"(?:[^\\, \n]|\\.)+"
_KEY = r"(?:[^\\,= \n]|\\.)+"  # tag keys, tag values, field keys
_STRING = r'"(?:[^"\\]|\\[\s\S])*"'  # may span lines
_BARE = r'[^,\s"\\]+'  # a number or a boolean, checked after
_FIELD = rf"{_KEY}=(?:{_STRING}|{_BARE})"
_LINE = re.compile(
    rf"[ \t]*(?P<name>{_NAME})(?P<tags>(?:,{_KEY}={_KEY})*) +(?P<fields>{_FIELD}(?:,{_FIELD})*)"
    r"(?: +(?P<time>-?[0-9]{1,19}))?[ \t\r]*(?:\n|\Z)"
)
_TAG = re.compile(rf",({_KEY})=({_KEY})")
_FIELD_PARTS = re.compile(rf'({_KEY})=(?:"((?:[^"\\]|\\[\s\S])*)"|({_BARE}))')
_FLOAT = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_INT64 = (-(2**63), 2**63 - 1)
_UINT64 = (0, 2**64 - 1)
_BOOLS = {
    **dict.fromkeys(("t", "T", "true", "True", "TRUE"), True),
    **dict.fromkeys(("f", "F", "false", "False", "FALSE"), False),
}

_ESCAPE = re.compile(r"\\(.)", re.S)
_KEY_ESCAPES = {",": ",", "=": "=", " ": " ", "t": "\t", "n": "\n", "f": "\f", "r": "\r"}
_NAME_ESCAPES = {k: v for k, v in _KEY_ESCAPES.items() if k != "="}
_STRING_ESCAPE = re.compile(r'\\(["\\])')


def _key_escape(match: re.Match[str]) -> str:
    return _KEY_ESCAPES.get(match[1], match[0])


def _name_escape(match: re.Match[str]) -> str:
    return _NAME_ESCAPES.get(match[1], match[0])


def _key(text: str) -> str:
    return _ESCAPE.sub(_key_escape, text) if "\\" in text else text


def parse_lines(text: str) -> Iterator[Line | InvalidMessage]:
    """Each metric of ``text`` in order, or InvalidMessage(invalid_event) for a line that is not one."""
    pos, end, number = 0, len(text), 0
    while pos < end:
        eol = text.find("\n", pos)
        if eol == -1:
            eol = end
        number += 1
        head = text[pos:eol].strip()
        if not head or head.startswith("#"):
            pos = eol + 1
            continue
        match = _LINE.match(text, pos)
        if match is None:
            yield InvalidMessage(Reason.INVALID_EVENT, f"line {number} is not line protocol: {head[:120]!r}")
            pos = eol + 1
            continue
        pos = match.end()
        line = _line(match)
        if isinstance(line, str):
            yield InvalidMessage(Reason.INVALID_EVENT, f"line {number} {line}: {head[:120]!r}")
        else:
            yield line
        number += match[0].count("\n", 0, -1)  # a string field's own newlines


def _line(match: re.Match[str]) -> Line | str:
    """The metric of a matched line, or why it is not one."""
    if match["time"] is None:
        return "has no timestamp"
    stamp = int(match["time"])
    if not _INT64[0] <= stamp <= _INT64[1]:
        return "has a timestamp out of range"
    name = match["name"]
    if "\\" in name:
        name = _ESCAPE.sub(_name_escape, name)
    tags = {_key(k): _key(v) for k, v in _TAG.findall(match["tags"])}
    fields: dict[str, FieldValue] = {}
    for key, string, bare in _FIELD_PARTS.findall(match["fields"]):
        if bare:
            typed = _bare(bare)
            if typed is None:
                return f"has a field value that is no number nor boolean ({bare!r})"
            fields[_key(key)] = typed
        else:
            fields[_key(key)] = _STRING_ESCAPE.sub(r"\1", string) if "\\" in string else string
    return name, tags, fields, stamp


def _bare(token: str) -> FieldValue | None:
    """An unquoted field value: ``42i``, ``42u``, a float, a boolean; None if it is none of them (an
    integer out of its 64-bit range included)."""
    suffix, body = token[-1], token[:-1]
    if suffix in "iu":
        digits = body[1:] if suffix == "i" and body.startswith("-") else body
        if not (digits.isascii() and digits.isdigit() and len(digits) <= 20):  # int() of any longer: slow
            return None
        low, high = _INT64 if suffix == "i" else _UINT64
        integer = int(body)
        return integer if low <= integer <= high else None
    if _FLOAT.fullmatch(token):
        return float(token)
    return _BOOLS.get(token)
