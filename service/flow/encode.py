"""The record formats the service writes: results (of items, and of assembled rows) and dead letters. Pure."""

from __future__ import annotations

from typing import Any, Protocol

import msgspec
import structlog

from service.assemble import Closed
from service.errors import Reason
from service.flow.model import ModelRef
from service.flow.records import Headers, InputRecord, OutRecord, Rejection

_log = structlog.get_logger("microbatch.checkpoint")

_ENCODER = msgspec.json.Encoder()


class _Source(msgspec.Struct, gc=False, omit_defaults=True):
    topic: str
    partition: int
    offset: int
    index: int | None = None  # present when the input format fans out: the item's position in its message


class _Timestamps(msgspec.Struct, gc=False):
    event_ms: int | None
    consumed_ms: int
    produced_ms: int


class _Result(msgspec.Struct, gc=False, omit_defaults=True):
    """The result value, field for field as in the README. A Struct encodes about twice as fast as the
    equivalent nested dicts, and this runs once per message."""

    source: _Source
    model: ModelRef
    result: dict[str, Any]
    batch_size: int
    timestamps: _Timestamps
    fields: dict[str, Any] | None = None  # MICROBATCH_OUTPUT__INCLUDE_FIELDS


def result_record(
    record: InputRecord,
    topic: str,
    model: ModelRef,
    result: dict[str, Any],
    batch_size: int,
    consumed_ms: int,
    produced_ms: int,
    index: int | None = None,
    fields: dict[str, Any] | None = None,
) -> OutRecord:
    """One result for one item of an input (``index``: its position, when the format fans out): same
    key, input headers passed through, value as in the README, with the ``fields`` chosen to be copied.
    Raises TypeError or ValueError when ``result`` or ``fields`` hold something JSON cannot encode."""
    value = _Result(
        _Source(record.topic, record.partition, record.offset, index),
        model,
        result,
        batch_size,
        _Timestamps(record.timestamp_ms, consumed_ms, produced_ms),
        fields,
    )
    return OutRecord(topic, record.key, _ENCODER.encode(value), record.headers, record, index)


class _Inputs(msgspec.Struct, gc=False):
    count: int
    offsets: dict[str, list[int]]  # "topic[partition]" -> the offsets of the messages that fed it, ascending


class _Row(msgspec.Struct, gc=False):
    key: str
    time_ms: int  # the interval's nominal time
    interval_s: float
    features: dict[str, float]
    filled: list[str]
    inputs: _Inputs


class _RowResult(msgspec.Struct, gc=False):
    source: _Source  # the row's first message
    row: _Row
    model: ModelRef
    result: dict[str, Any]
    batch_size: int
    timestamps: _Timestamps


def row_record(
    row: Closed[InputRecord],
    topic: str,
    model: ModelRef,
    result: dict[str, Any],
    batch_size: int,
    consumed_ms: int,
    produced_ms: int,
) -> OutRecord:
    """The one result of an assembled row: keyed by the row's key (the host), no headers (the row has many
    inputs), the row's features, what was filled and which messages fed it; its delivery answers all of
    them. Raises TypeError or ValueError when ``result`` holds something JSON cannot encode."""
    first = row.sources[0]
    offsets: dict[str, list[int]] = {}
    for record in row.sources:
        offsets.setdefault(f"{record.topic}[{record.partition}]", []).append(record.offset)
    for listed in offsets.values():
        listed.sort()
    time_ms = round(row.time * 1000)
    value = _RowResult(
        _Source(first.topic, first.partition, first.offset),
        _Row(
            row.key, time_ms, row.interval_s, row.values, list(row.filled), _Inputs(len(row.sources), offsets)
        ),
        model,
        result,
        batch_size,
        _Timestamps(time_ms, consumed_ms, produced_ms),
    )
    return OutRecord(topic, row.key.encode(), _ENCODER.encode(value), None, first, None, row.sources[1:])


def dead_letter(rejection: Rejection, topic: str) -> OutRecord:
    """The original key and bytes, unchanged (a null value stays null); why and where from in the
    ``error.*`` and ``source.*`` headers, after the input's own headers. The dead letter of one item of a
    message carries the whole message, and the item's position in ``source.index``."""
    record = rejection.record
    headers: Headers = list(record.headers or [])
    headers += [
        ("error.reason", rejection.reason.value.encode()),
        ("error.message", rejection.detail.encode("utf-8", "replace")[:1000]),
        ("source.topic", record.topic.encode()),
        ("source.partition", str(record.partition).encode()),
        ("source.offset", str(record.offset).encode()),
    ]
    if rejection.index is not None:
        headers.append(("source.index", str(rejection.index).encode()))
    return OutRecord(topic, record.key, record.value, headers, record, rejection.index)


def replace_refused(out: OutRecord, why: str, dlq_topic: str) -> OutRecord | None:
    """What to send instead of a record the broker refused for good (too large, invalid).

    A result becomes a dead letter of its input (``output_rejected``). A dead letter is sent again without
    its value, its original size in ``error.value_dropped``, so its partition is not stuck behind it.
    None when there is nothing smaller left to try (the caller keeps the offset uncommitted).
    """
    if out.topic != dlq_topic:
        dead = dead_letter(Rejection(out.source, Reason.OUTPUT_REJECTED, why, out.index), dlq_topic)
        # A row's result answers every message that fed it; so must what replaces it.
        return msgspec.structs.replace(dead, also=out.also) if out.also else dead
    if out.value is None:
        return None
    headers: Headers = [*(out.headers or []), ("error.value_dropped", str(len(out.value)).encode())]
    return OutRecord(out.topic, out.key, None, headers, out.source, out.index, out.also)


class _Resending(Protocol):
    def take_refused(self) -> list[tuple[OutRecord, str]]: ...

    def send(self, out: OutRecord) -> None: ...


def resend_refused(sink: _Resending, dlq_topic: str) -> int:
    """Send a replacement (:func:`replace_refused`) for each record ``sink`` says the broker refused for
    good since the last call; returns how many were sent. One with nothing smaller left to send is
    logged, and its input stays unanswered."""
    sent = 0
    for out, why in sink.take_refused():
        replacement = replace_refused(out, why, dlq_topic)
        if replacement is None:
            _log.error("dead_letter_undeliverable", offset=out.source.offset, error=why)
        else:
            sink.send(replacement)
            sent += 1
    return sent
