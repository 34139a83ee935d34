"""bytes -> item, or a rejection bound for the dead-letter topic. Never raises for bad input. Pure."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from service.errors import InvalidMessage, Reason
from service.flow.records import Decoded, InputRecord, Rejection
from service.processors.base import Processor, prepare

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


Prepare = Callable[[list[Any]], list[Any]]


def prepare_all(decoded: Sequence[Decoded], prepare: Prepare) -> tuple[list[Decoded], list[Rejection]]:
    """Run the processor's ``prepare`` hook over a group of decoded messages at once. If it fails for
    the group, it is retried one message at a time, so only the messages it fails on are rejected
    (``invalid_event``). Never raises for a processor error."""
    if not decoded:
        return [], []
    try:
        items = prepare([d.item for d in decoded])
    except Exception as exc:
        if len(decoded) == 1:
            detail = f"processor failed to prepare it: {type(exc).__name__}: {exc}"[:500]
            return [], [Rejection(decoded[0].record, Reason.INVALID_EVENT, detail)]
        kept: list[Decoded] = []
        rejected: list[Rejection] = []
        for one in decoded:
            ok, bad = prepare_all([one], prepare)
            kept += ok
            rejected += bad
        return kept, rejected
    return [Decoded(d.record, item) for d, item in zip(decoded, items, strict=True)], []


class Decoder:
    """Turns one consumed group into items for the batcher and rejections for the dead-letter topic:
    :func:`decode` per message, then the processor's optional ``prepare`` over the whole group."""

    def __init__(self, processor: Processor, max_value_bytes: int) -> None:
        self._parse = processor.parse
        self._limit = max_value_bytes
        self._prepare = partial(prepare, processor) if hasattr(processor, "prepare") else None

    def decode(self, records: Sequence[InputRecord]) -> tuple[list[Decoded], list[Rejection]]:
        """``(accepted, rejected)``, each in consumption order. Never raises for bad input."""
        parse, limit = self._parse, self._limit
        accepted: list[Decoded] = []
        rejected: list[Rejection] = []
        for record in records:  # per message: keep it lean
            outcome = decode(record, parse, limit)
            if isinstance(outcome, Rejection):
                rejected.append(outcome)
            else:
                accepted.append(outcome)
        if self._prepare is not None and accepted:
            accepted, unprepared = prepare_all(accepted, self._prepare)
            rejected += unprepared
        return accepted, rejected
