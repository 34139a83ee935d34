"""bytes -> items, or rejections bound for the dead-letter topic. Never raises for bad input. Pure.

The input format splits a message into items with named fields (``service.formats``); the processor
takes what it needs from each. ``json`` has a fast path: the processor's ``parse`` reads the raw value
with a typed decoder, with no intermediate fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from service.errors import InvalidMessage, Reason
from service.flow.fields import FieldWatch
from service.flow.records import Counts, Decoded, Decoding, InputRecord, Rejection
from service.formats import Entry, Format, Picker
from service.formats.plain import json_object, parse_json
from service.processors.base import Capabilities, Processor

Parse = Callable[[bytes], Any]


def check(record: InputRecord, max_value_bytes: int) -> Rejection | None:
    """The checks every message gets before its format reads it: readable headers, a value, a size."""
    if record.header_error is not None:
        return Rejection(record, Reason.INVALID_HEADERS, record.header_error)
    value = record.value
    if value is None:
        return Rejection(record, Reason.EMPTY_VALUE, "null value (tombstone)")
    if not value:
        return Rejection(record, Reason.EMPTY_VALUE, "empty value")
    if len(value) > max_value_bytes:
        return Rejection(record, Reason.VALUE_TOO_LARGE, f"{len(value)} bytes, limit is {max_value_bytes}")
    return None


def split(
    record: InputRecord, split: Callable[[bytes], list[Entry]], max_value_bytes: int
) -> list[Entry] | Rejection:
    """The generic checks, then the format's split of the value into its items. A format signals an
    unreadable message with InvalidMessage; anything else it raises is a bug, contained here as well."""
    rejection = check(record, max_value_bytes)
    if rejection is not None:
        return rejection
    try:
        return split(record.value or b"")
    except InvalidMessage as exc:
        return Rejection(record, exc.reason, exc.detail)
    except Exception as exc:  # a format's bug must not take the service down either
        return Rejection(record, Reason.INVALID_EVENT, f"format failed: {type(exc).__name__}: {exc}")


def decode(record: InputRecord, parse: Parse, max_value_bytes: int) -> Decoded | Rejection:
    """One message, one item: the generic checks, then the processor's ``parse`` of the raw value.

    A processor signals bad input with :class:`InvalidMessage`; any other exception from it is a bug in
    the processor but is still contained here, so that one message can never stop the loop.
    """
    value = record.value
    if record.header_error is not None or not value or len(value) > max_value_bytes:
        rejection = check(record, max_value_bytes)
        assert rejection is not None
        return rejection
    try:
        return Decoded(record, parse(value))
    except InvalidMessage as exc:
        return Rejection(record, exc.reason, exc.detail)
    except Exception as exc:  # a processor's bug must not take the service down
        return Rejection(record, Reason.INVALID_EVENT, f"processor failed: {type(exc).__name__}: {exc}")


Prepare = Callable[[list[Any]], list[Any]]


def prepare_all(decoded: Sequence[Decoded], prepare: Prepare) -> tuple[list[Decoded], list[Rejection]]:
    """Run the processor's ``prepare`` hook over a group of decoded items at once. If it fails for the
    group, it is retried one item at a time, so only the items it fails on are rejected
    (``invalid_event``). Never raises for a processor error."""
    if not decoded:
        return [], []
    try:
        items = prepare([d.item for d in decoded])
    except Exception as exc:
        if len(decoded) == 1:
            detail = f"processor failed to prepare it: {type(exc).__name__}: {exc}"[:500]
            one = decoded[0]
            return [], [Rejection(one.record, Reason.INVALID_EVENT, detail, one.index)]
        kept: list[Decoded] = []
        rejected: list[Rejection] = []
        for one in decoded:
            ok, bad = prepare_all([one], prepare)
            kept += ok
            rejected += bad
        return kept, rejected
    replace = msgspec.structs.replace
    return [replace(d, item=item) for d, item in zip(decoded, items, strict=True)], []


# Formats whose raw value a processor without parse_fields can still read with its parse.
_RAW_FORMATS = ("json", "text")


def takes_format(caps: Capabilities, fmt: Format) -> bool:
    """Whether a processor with ``caps`` can read items of ``fmt``: any, with ``parse_fields``; else json
    and text."""
    return caps.parse_fields is not None or fmt.name in _RAW_FORMATS


class Decoder:
    """The decode stage of one item per message or per record (``ports.DecodeStage``): turns one consumed
    group into items for the batcher and rejections for the dead-letter topic: the format's split and the
    processor's parse per message, then the processor's optional ``prepare`` over the whole group. Holds
    nothing back between groups. Requires ``takes_format(caps, fmt)``; ``caps`` are the processor's."""

    def __init__(
        self,
        fmt: Format,
        processor: Processor,
        caps: Capabilities,
        max_value_bytes: int,
        include: Picker | None = None,
        watch: FieldWatch | None = None,
    ) -> None:
        if not takes_format(caps, fmt):
            raise ValueError(f"this processor cannot read {fmt.name} items: it has no parse_fields")
        self._limit = max_value_bytes
        self._parse = processor.parse
        self._parse_fields = caps.parse_fields
        self._split = fmt.split
        self._fans_out = fmt.fans_out
        self._include = include or Picker([])
        # The raw value goes straight to parse for json (the fast path: typed decoding of exactly the
        # processor's fields) unless fields are copied into results, which needs them all decoded.
        self._raw = self._parse_fields is None or (fmt.name == "json" and not self._include)
        self._prepare = caps.prepare if caps.prepare_hook is not None else None
        self._watch = watch

    def decode(self, records: Sequence[InputRecord]) -> Decoding:
        """``(accepted, rejected, counts)``, each in consumption order; ``counts`` lists the messages
        holding other than one item. Never raises for bad input."""
        accepted: list[Decoded] = []
        rejected: list[Rejection] = []
        counts: Counts = []
        if self._watch is not None and not self._watch.done:
            self._watched(records)
        if self._raw:
            parse, limit, include, picking = self._parse, self._limit, self._include, bool(self._include)
            for record in records:  # per message: keep it lean
                outcome = decode(record, parse, limit)
                if isinstance(outcome, Rejection):
                    rejected.append(outcome)
                elif picking:
                    accepted.append(msgspec.structs.replace(outcome, fields=_picked(include, record.value)))
                else:
                    accepted.append(outcome)
        else:
            for record in records:
                self._items(record, accepted, rejected, counts)
        if self._prepare is not None and accepted:
            accepted, unprepared = prepare_all(accepted, self._prepare)
            rejected += unprepared
        return accepted, rejected, counts

    def _watched(self, records: Sequence[InputRecord]) -> None:
        """Show the field watch the first events' fields (decoded once more: only while it watches)."""
        watch = self._watch
        assert watch is not None
        for record in records:
            if watch.done:
                return
            entries: Sequence[object]
            try:
                value = record.value or b""
                entries = [json_object(value)] if self._raw else self._split(value)
            except Exception:  # decode() rejects it as it should; here it is one event with no fields
                entries = [{}]
            for entry in entries:
                watch.see(entry if isinstance(entry, Mapping) else {})

    def _items(
        self, record: InputRecord, accepted: list[Decoded], rejected: list[Rejection], counts: Counts
    ) -> None:
        """Split one message and parse each of its items; a bad item is rejected alone."""
        entries = split(record, self._split, self._limit)
        if isinstance(entries, Rejection):
            rejected.append(entries)
            return
        if len(entries) != 1:
            counts.append((record, len(entries)))
        parse, include = self._parse_fields, self._include
        assert parse is not None
        for position, entry in enumerate(entries):
            index = position if self._fans_out else None
            if isinstance(entry, InvalidMessage):
                rejected.append(Rejection(record, entry.reason, entry.detail, index))
                continue
            try:
                item = parse(entry)
            except InvalidMessage as exc:
                rejected.append(Rejection(record, exc.reason, exc.detail, index))
                continue
            except Exception as exc:
                detail = f"processor failed: {type(exc).__name__}: {exc}"
                rejected.append(Rejection(record, Reason.INVALID_EVENT, detail, index))
                continue
            accepted.append(Decoded(record, item, index, include.pick(entry) if include else None))


def _picked(include: Picker, value: bytes | None) -> dict[str, Any]:
    """The included fields of a JSON value the processor already accepted (its own parse may have read
    only part of it)."""
    try:
        return include.pick(parse_json(value or b""))
    except InvalidMessage:
        return {}
