"""``json`` (one JSON object per message) and ``text`` (the whole value is one line). Pure."""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from service.errors import InvalidMessage, Reason
from service.formats.base import Entry, utf8

_ANY: msgspec.json.Decoder[Any] = msgspec.json.Decoder()


def parse_json(value: bytes, decoder: msgspec.json.Decoder[Any] = _ANY) -> Any:
    """Decode JSON with ``decoder`` (typed or not), telling apart bad text (``invalid_utf8``), text that
    is not JSON (``invalid_json``, whatever its first character) and JSON of the wrong shape
    (``invalid_event``)."""
    try:
        return decoder.decode(value)
    except RecursionError:
        raise InvalidMessage(Reason.INVALID_EVENT, "JSON nested too deeply") from None
    except msgspec.ValidationError as exc:
        # A typed decoder stops at the first value of the wrong type, before it sees that the rest is not
        # JSON (a syslog line starts with a number: "got int"). Only on this error path, decode untyped.
        if decoder is not _ANY:
            parse_json(value)
        raise InvalidMessage(Reason.INVALID_EVENT, str(exc)) from None
    except msgspec.DecodeError as exc:
        utf8(value)  # bad bytes are the root cause whatever msgspec saw
        raise InvalidMessage(Reason.INVALID_JSON, f"not JSON: {exc}") from None


def json_object(value: bytes) -> dict[str, Any]:
    """A JSON object, or InvalidMessage (``invalid_event`` for JSON that is not an object)."""
    document = parse_json(value)
    if not isinstance(document, dict):
        raise InvalidMessage(Reason.INVALID_EVENT, f"expected a JSON object, got {type(document).__name__}")
    return document


class JsonFormat:
    """One JSON object per message (the generator, Fluent Bit, Vector, Filebeat, rsyslog's JSON templates).

    The service's fast path does not call :meth:`split`: a processor's ``parse`` decodes the bytes with a
    typed decoder for exactly its fields. ``split`` is the general path (nested paths, included fields).
    """

    name: ClassVar[str] = "json"
    text_field: ClassVar[str | None] = None
    fans_out: ClassVar[bool] = False
    metrics: ClassVar[bool] = False

    def split(self, value: bytes) -> list[Entry]:
        return [json_object(value)]


class TextFormat:
    """The whole value is one line of text (kcat, the console producer, rsyslog's ``%msg%``): the field
    ``message``, without the line's trailing newline."""

    name: ClassVar[str] = "text"
    text_field: ClassVar[str | None] = "message"
    fans_out: ClassVar[bool] = False
    metrics: ClassVar[bool] = False

    def split(self, value: bytes) -> list[Entry]:
        return [{"message": utf8(value).rstrip("\r\n")}]
