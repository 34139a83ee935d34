"""The decode stage when rows are assembled: the format's points -> rows -> the processor's items. Pure.

This class is responsible for: splitting each message into points (the generic checks and the format, as
``decode``); feeding them to the assembler (``service.assemble``); telling the checkpoint how many outputs
each message awaits (one per row it fed, plus one per bad point; none when it fed nothing, so it is done at
once); and, as rows close, handing the scored ones to the processor's ``parse_fields`` and the incomplete
ones back as messages to settle without an output.

The delivery contract (docs/RELIABILITY.md): a message is done when the result (or dead letter) of every
row it fed is acknowledged, or the row closed incomplete (counted and logged). Open rows live in memory
only and are never answered early: a crash, a hand-over or a stop leaves their messages uncommitted, and
whoever reads them next assembles them again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import structlog

from service.assemble import Assembler, Closed
from service.errors import InvalidMessage, Reason
from service.flow.decode import split
from service.flow.ports import TelemetryLike
from service.flow.records import Counts, Decoded, Decoding, InputRecord, Rejection, Released, TopicPartition
from service.formats import Fields, Format

_log = structlog.get_logger("microbatch.assembly")


class Assembly:
    """The decode stage when rows are assembled (``ports.DecodeStage``), and the items it holds back, the
    open rows (``ports.HeldItems``). Not thread-safe: the loop's thread only. ``parse_fields`` is the
    processor's: a row's features (a flat mapping, feature name -> number) -> its item."""

    def __init__(
        self,
        fmt: Format,
        parse_fields: Callable[[Fields], Any],
        assembler: Assembler[InputRecord],
        max_value_bytes: int,
        telemetry: TelemetryLike,
    ) -> None:
        self._split = fmt.split
        self._parse = parse_fields
        self._assembler = assembler
        self._limit = max_value_bytes
        self._telemetry = telemetry

    def __len__(self) -> int:
        """Rows open."""
        return len(self._assembler)

    def decode(self, records: Sequence[InputRecord]) -> Decoding:
        """Feed one consumed group to the rows: ``([], rejected, counts)``. Items come out of :meth:`due`,
        as rows close. Never raises for bad input."""
        rejected: list[Rejection] = []
        counts: Counts = []
        used = ignored = late = empty = 0
        add = self._assembler.add
        for record in records:
            entries = split(record, self._split, self._limit)
            if isinstance(entries, Rejection):
                rejected.append(entries)
                continue
            points: list[Fields] = []
            positions: list[int] = []
            for position, entry in enumerate(entries):
                if isinstance(entry, InvalidMessage):
                    rejected.append(Rejection(record, entry.reason, entry.detail, position))
                else:
                    points.append(entry)
                    positions.append(position)
            key = record.key.decode("utf-8", "replace") if record.key else None
            fed = add(record, points, key)
            for position, why in fed.unkeyed:
                rejected.append(Rejection(record, Reason.INVALID_EVENT, why, positions[position]))
            outputs = len(entries) - len(points) + len(fed.unkeyed) + fed.rows
            if outputs != 1:
                counts.append((record, outputs))
            used, ignored, late, empty = (
                used + fed.used,
                ignored + fed.ignored,
                late + fed.late,
                empty + fed.empty,
            )
        self._telemetry.points(used, ignored, late, empty)
        return [], rejected, counts

    def discard(self, tps: Iterable[TopicPartition]) -> None:
        """Partitions handed over or lost: their messages leave the open rows unanswered (their offsets
        were not committed, so the next owner reads them again and assembles whole rows)."""
        gone = set(tps)
        taken = self._assembler.discard(lambda record: record.tp in gone)
        if taken:
            _log.info("rows_handed_over", messages=taken, open_rows=len(self._assembler))

    def due(self) -> Released:
        """The rows that close now: ``(items, rejected, settled)``. A scored row becomes one item (its first
        message as ``record``); a row the processor refuses, a dead letter per message that fed it; an
        incomplete row settles its messages."""
        closed = self._assembler.due()
        if not closed:
            return [], [], []
        items: list[Decoded] = []
        rejected: list[Rejection] = []
        settled: list[InputRecord] = []
        filled = incomplete = 0
        for row in closed:
            if not row.scored:
                incomplete += 1
                settled += row.sources
                _incomplete(row)
                continue
            try:
                item = self._parse(row.values)
            except InvalidMessage as exc:
                rejected += dead_letters(row, exc.reason, exc.detail)
                continue
            except Exception as exc:  # a processor's bug must not take the service down
                rejected += dead_letters(
                    row, Reason.INVALID_EVENT, f"processor failed: {type(exc).__name__}: {exc}"
                )
                continue
            filled += bool(row.filled)
            items.append(Decoded(row.sources[0], item, row=row))
        self._telemetry.rows(len(items) - filled, filled, incomplete)
        return items, rejected, settled


def dead_letters(row: Closed[InputRecord], reason: Reason, detail: str) -> list[Rejection]:
    """A failed row's dead letters: one per message that fed it, the row named in the message."""
    where = f"row {row.key!r} at {row.time:.0f}: "
    return [Rejection(record, reason, where + detail) for record in row.sources]


def _incomplete(row: Closed[InputRecord]) -> None:
    _log.warning(
        "row_incomplete",
        key=row.key,
        time=row.time,
        missing=list(row.missing),
        inputs=len(row.sources),
    )
