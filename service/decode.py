"""bytes -> item, or a rejection bound for the dead-letter topic. Never raises for bad input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from service.errors import InvalidMessage, Reason
from service.records import Decoded, InputRecord, Rejection

Parse = Callable[[bytes], Any]


def decode(record: InputRecord, parse: Parse, max_value_bytes: int) -> Decoded | Rejection:
    """Apply the generic checks (empty, too large), then the processor's ``parse``.

    A processor signals bad input with :class:`InvalidMessage`; any other exception from it is a bug in
    the processor but is still contained here, so that one message can never stop the loop.
    """
    if record.header_error is not None:
        return Rejection(record, Reason.INVALID_HEADERS, record.header_error)
    value = record.value
    if value is None:
        return Rejection(record, Reason.EMPTY_VALUE, "null value (tombstone)")
    if not value:
        return Rejection(record, Reason.EMPTY_VALUE, "empty value")
    if len(value) > max_value_bytes:
        return Rejection(record, Reason.VALUE_TOO_LARGE, f"{len(value)} bytes, limit is {max_value_bytes}")
    try:
        return Decoded(record, parse(value))
    except InvalidMessage as exc:
        return Rejection(record, exc.reason, exc.detail)
    except Exception as exc:  # a processor's bug must not take the service down
        return Rejection(record, Reason.INVALID_EVENT, f"processor failed: {type(exc).__name__}: {exc}")
