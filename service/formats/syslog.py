"""``syslog``: RFC 5424, RFC 3164 and rsyslog's file and forward templates, one line per message. Pure.

Each line becomes the fields ``timestamp`` (as written), ``host``, ``app``, ``pid``, ``msgid`` and
``structured_data`` (RFC 5424 only), ``facility`` and ``severity`` (names, from the ``<PRI>`` when the line
has one), ``priority`` (the number) and ``message``: the text after the header, which is what a model
should read. Fields the line does not carry are absent. Like rsyslog itself, the parser is lenient: a
line with no recognisable header is all ``message``.

The shapes it reads, with rsyslog's template names::

    RFC 5424 (RSYSLOG_SyslogProtocol23Format)
        <34>1 2026-12-01T10:00:00.123Z web-1 sshd 4242 ID47 [ex@32473 k="v"] message
    RSYSLOG_ForwardFormat
        <34>2026-12-01T10:00:00.123456+00:00 web-1 sshd[4242]: message
    RFC 3164 (RSYSLOG_TraditionalForwardFormat)
        <34>Dec  1 10:00:00 web-1 sshd[4242]: message
    RSYSLOG_FileFormat (omkafka's default)
        2026-12-01T10:00:00.123456+00:00 web-1 sshd[4242]: message
    RSYSLOG_TraditionalFileFormat
        Dec  1 10:00:00 web-1 sshd[4242]: message
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from service.formats.base import Entry, utf8

FACILITIES = (
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv", "ftp",
    "ntp", "security", "console", "solaris-cron", "local0", "local1", "local2", "local3", "local4",
    "local5", "local6", "local7",
)  # fmt: skip
SEVERITIES = ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug")

_PRI = r"(?:<(?P<pri>\d{1,3})>)?"
_RFC5424 = re.compile(
    r"<(?P<pri>\d{1,3})>(?P<version>[1-9]\d?) (?P<timestamp>\S+) (?P<host>\S+) (?P<app>\S+) (?P<pid>\S+)"
    r" (?P<msgid>\S+) (?P<rest>.*)",
    re.S,
)
_HEADER = re.compile(
    _PRI + r"(?P<timestamp>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)"
    r"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) (?P<host>\S+) "
    # The tag: "app:" or "app[pid]:" (RFC 3164 section 5.3); a line without one is all message.
    r"(?:(?P<app>[^\s\[\]:]+)(?:\[(?P<pid>[^\]\s]*)\])?:(?= |$))?"
    r" ?(?P<message>.*)",
    re.S,
)
_BARE = re.compile(_PRI + r"(?P<message>.*)", re.S)
_SD_ELEMENT = re.compile(r'\[(?P<id>[^\s\]=]+)(?P<params>(?: [^\s=\]"]+="(?:[^"\\]|\\.)*")*)\]')
_SD_PARAM = re.compile(r'([^\s=\]"]+)="((?:[^"\\]|\\.)*)"')
_SD_UNESCAPE = re.compile(r'\\(["\\\]])')
_NIL = "-"


class SyslogFormat:
    """One syslog line per message (rsyslog ``omkafka``, syslog-ng, Fluent Bit's syslog parser off)."""

    name: ClassVar[str] = "syslog"
    text_field: ClassVar[str | None] = "message"
    fans_out: ClassVar[bool] = False
    metrics: ClassVar[bool] = False

    def split(self, value: bytes) -> list[Entry]:
        return [parse_line(utf8(value).rstrip("\r\n"))]


def parse_line(line: str) -> dict[str, Any]:
    """The fields of one syslog line (see the module's docstring). Never raises."""
    fields: dict[str, Any] = {}
    match = _RFC5424.match(line)
    if match is not None:
        for name in ("timestamp", "host", "app", "pid", "msgid"):
            if match[name] != _NIL:
                fields[name] = match[name]
        data, message = _structured_data(match["rest"])
        if data is not None:
            fields["structured_data"] = data
    else:
        match = _HEADER.match(line) or _BARE.match(line)
        assert match is not None  # _BARE matches any line
        groups = match.groupdict()
        fields.update((k, groups[k]) for k in ("timestamp", "host", "app", "pid") if groups.get(k))
        message = match["message"]
    if "pid" in fields and fields["pid"].isascii() and fields["pid"].isdigit():  # not "²": int() refuses it
        fields["pid"] = int(fields["pid"])
    if match["pri"] is not None and int(match["pri"]) < 8 * len(FACILITIES):
        priority = int(match["pri"])
        fields.update(
            priority=priority, facility=FACILITIES[priority >> 3], severity=SEVERITIES[priority & 7]
        )
    fields["message"] = (
        message.lstrip(" ").removeprefix("\ufeff").strip()
    )  # RFC 5424 allows a BOM before UTF-8 text
    return fields


def _structured_data(rest: str) -> tuple[dict[str, dict[str, str]] | None, str]:
    """RFC 5424 STRUCTURED-DATA and the message after it: ``({sd-id: {name: value}}, msg)``; None for
    the nil value. Text that is not well-formed structured data is left in the message."""
    if rest == _NIL or rest.startswith(_NIL + " "):
        return None, rest[2:]
    data: dict[str, dict[str, str]] = {}
    pos = 0
    while (element := _SD_ELEMENT.match(rest, pos)) is not None:
        params = _SD_PARAM.findall(element["params"])
        data[element["id"]] = {k: _SD_UNESCAPE.sub(r"\1", v) for k, v in params}
        pos = element.end()
    return (data or None), rest[pos:]
