"""Typed values that cross module boundaries: consumed records, decode outcomes and records to produce."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

import msgspec

from service.assemble import Closed
from service.errors import Reason

Headers = list[tuple[str, bytes | None]]
TopicPartition = tuple[str, int]


class Ack(StrEnum):
    """How a share group's member answers a record it acquired (KIP-932)."""

    ACCEPT = "accept"
    """Done: its outputs (or its dead letter) were acknowledged."""
    RELEASE = "release"
    """Not done: back to the group, for this or another member to take again."""
    REJECT = "reject"
    """Never to be delivered again (archived unprocessed)."""


# msgspec Structs rather than frozen dataclasses: one of each is built per message, and a frozen dataclass's
# __init__ costs over ten times as much (it goes through object.__setattr__ per field). gc=False where a
# record can only hold bytes, strings and numbers, so the cycle collector never scans millions of them.


class InputRecord(msgspec.Struct, frozen=True, gc=False):
    """One consumed Kafka message, copied out of the client so pure code never touches librdkafka.

    ``timestamp_ms`` is the record's Kafka timestamp (None when the broker has none); ``received`` is the
    monotonic clock reading when the service got it, the start of its batching wait.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers | None
    timestamp_ms: int | None
    received: float
    header_error: str | None = None
    """Set when the headers could not be read (then ``headers`` is None): the record is dead-lettered."""
    delivery_count: int | None = None
    """How many times a share group has handed this record out, this time included (1 the first time);
    None from a consumer group."""

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


class Decoded(msgspec.Struct, frozen=True):
    """An item a processor accepted: ``item`` is whatever its ``parse`` (or ``parse_fields``) returned.

    ``index`` is the item's position in its message when the input format fans out (OTLP: one item per
    log record), else None; ``fields`` are the input fields copied into its result
    (``MICROBATCH_OUTPUT__INCLUDE_FIELDS``), None when none are chosen."""

    record: InputRecord
    item: Any
    index: int | None = None
    fields: dict[str, Any] | None = None
    row: Closed[InputRecord] | None = None
    """Set for an assembled row: its key, interval and features, and every message that fed it
    (``record`` is the first of them)."""


class Rejection(msgspec.Struct, frozen=True):
    """A message, or one item of it (``index``), bound for the dead-letter topic, with everything needed
    to write that record."""

    record: InputRecord
    reason: Reason
    detail: str
    index: int | None = None


class OutRecord(msgspec.Struct, frozen=True, gc=False):
    """A record to produce, remembering which input (and which item of it) it answers, so that its ack
    can advance that input's offset and a replacement can name the same item."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers | None
    source: InputRecord
    index: int | None = None
    also: tuple[InputRecord, ...] = ()
    """Further inputs this output answers (the other messages that fed an assembled row): its ack
    answers each of them once."""


Counts = list[tuple[InputRecord, int]]
"""Messages that hold other than one item, with how many: their offsets are done only when that many
outputs are acknowledged (zero: at once)."""

Decoding = tuple[list[Decoded], list[Rejection], Counts]
"""What a decode stage makes of a consumed group: items for the batcher, rejections for the dead-letter
topic, and the messages holding other than one item (:data:`Counts`), each in consumption order."""

Released = tuple[list[Decoded], list[Rejection], list[InputRecord]]
"""What a stage that holds items back releases: items now due, their rejections, and the messages one of
whose outputs will never come (a row closed incomplete): settled as if acknowledged."""


@dataclass(frozen=True, slots=True)
class LoopState:
    """What the loop looks like now, for the state gauges and the stats line (built about once a second)."""

    target_size: int
    in_flight: int
    stale_acks: int
    assigned: int
    paused: int
    lag: Mapping[TopicPartition, int]
    open_rows: int = 0


@dataclass(frozen=True, slots=True)
class Permission:
    """An ACL the service's principal needs: ``operation`` on ``resource`` ``name``."""

    operation: Literal["READ", "WRITE"]
    resource: Literal["group", "topic"]
    name: str

    def __str__(self) -> str:
        return f"{self.operation} on {self.resource} {self.name!r}"


Access = Callable[[Permission, bool], None]
"""``access(permission, refused)``: True when the cluster refused it, False when it was seen to work."""


def no_access_report(_permission: Permission, _refused: bool) -> None:
    """The default ``Access``: report nothing."""
