"""The format contract: one message's bytes -> the items it holds, each a mapping of named fields. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

from service.errors import InvalidMessage, Reason

Fields = Mapping[str, Any]
Entry = Fields | InvalidMessage
"""One item of a message: its fields, or why this one record is bad (its siblings are still answered)."""


class Format(Protocol):
    """How a shipper writes messages.

    ``split`` runs per message: it returns one entry per item, in the message's order (possibly none: an
    OTLP request without log records), and raises InvalidMessage when the message as a whole is
    unreadable. It never raises anything else for bad input.

    ``text_field`` is where this format puts the log text (None: the format does not know); it is the
    default of ``MICROBATCH_MODEL__TEXT_FIELD``. ``fans_out`` says one message may hold many items, so
    each result names its item (``source.index``). ``metrics`` says the items are data points, each a
    dict of the point contract (``points``: host, metric, attributes, time, value, kind).
    """

    name: ClassVar[str]
    text_field: ClassVar[str | None]
    fans_out: ClassVar[bool]
    metrics: ClassVar[bool]

    def split(self, value: bytes) -> list[Entry]: ...


def utf8(value: bytes) -> str:
    """``value`` as text, or InvalidMessage(invalid_utf8)."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidMessage(Reason.INVALID_UTF8, str(exc)) from None
