"""The two ends of a backfill range, as written on the command line, and their offsets in each partition.

A bound is one of:

- ``earliest`` / ``latest``: the partition's first retained offset / its end when the run starts;
- ``now``: the time the run starts, as a timestamp (the end, unless records carry timestamps ahead of it);
- a timestamp: ISO 8601 with a zone (``2026-11-30T00:00:00Z``, ``2026-11-30T01:00+01:00``) or epoch
  milliseconds written ``@1764460800000``; it resolves, per partition, to the first offset whose record
  timestamp is at or after it (the broker's ``ListOffsets`` by time), or the end when none is;
- offsets: ``*=OFFSET`` in every partition, or ``P=OFFSET`` per partition (``TOPIC:P=OFFSET`` where
  there are several input topics), comma-separated; every partition read must be named, or ``*=``.

A range is half-open, ``[from, to)``, in offsets and in time alike: ``--to 2026-12-01T00:00:00Z`` takes the
records stamped before midnight, ``--to 0=500`` offsets up to 499. Offsets outside what the partition holds
are clamped to it (what retention deleted is gone; nothing past the end exists yet), and each clamp is
reported, never silent.

Pure: resolving asks an :class:`OffsetsLookup` (``service.kafka.lookup.Offsets`` in the service).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from service.errors import UsageError
from service.flow.records import TopicPartition


class OffsetsLookup(Protocol):
    def watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        """(first retained offset, end offset) of ``tp``."""
        ...

    def at_time(self, tps: Sequence[TopicPartition], ms: int) -> dict[TopicPartition, int]:
        """The first offset of each of ``tps`` whose record timestamp is >= ``ms``; -1 where none is."""
        ...


@dataclass(frozen=True, slots=True)
class Named:
    """``earliest`` or ``latest``."""

    name: str


@dataclass(frozen=True, slots=True)
class Time:
    """A point in time, epoch milliseconds (``now`` is resolved to one when the run starts)."""

    ms: int
    now: bool = False


@dataclass(frozen=True, slots=True)
class Offsets:
    """Offsets per partition; ``default`` (``*=``) for those not named."""

    by_partition: dict[tuple[str | None, int], int]
    default: int | None = None

    def of(self, tp: TopicPartition) -> int | None:
        topic, partition = tp
        found = self.by_partition.get((topic, partition), self.by_partition.get((None, partition)))
        return found if found is not None else self.default


Bound = Named | Time | Offsets


def parse(flag: str, text: str, now_ms: Callable[[], int]) -> Bound:
    """One bound as written after ``flag``. Raises UsageError naming the flag and what is accepted."""
    spec = text.strip()
    if spec in ("earliest", "latest"):
        return Named(spec)
    if spec == "now":
        return Time(now_ms(), now=True)
    if spec.startswith("@"):
        try:
            ms = int(spec[1:])
            if ms < 0:
                raise ValueError
            return Time(ms)
        except ValueError:
            raise UsageError(flag, f"{spec!r}: @ takes epoch milliseconds, e.g. @1764460800000") from None
    if "=" in spec:
        return _offsets(flag, spec)
    if spec.lstrip("-").isdigit():
        raise UsageError(
            flag,
            f"{spec!r} is ambiguous: write *={spec} for that offset in every partition, or @{spec} for epoch "
            "milliseconds",
        )
    try:
        when = datetime.fromisoformat(spec)
    except ValueError:
        raise UsageError(flag, f"{spec!r} is not a bound: {ACCEPTED}") from None
    if when.tzinfo is None:
        raise UsageError(flag, f"{spec!r} has no time zone: add Z for UTC, or an offset such as +01:00")
    return Time(int(when.timestamp() * 1000))


ACCEPTED = (
    "earliest, latest, now, an ISO 8601 time with a zone (2026-11-30T00:00:00Z), @EPOCH_MS, *=OFFSET, "
    "or P=OFFSET[,P=OFFSET...] per partition (TOPIC:P=OFFSET with several input topics)"
)


def _offsets(flag: str, spec: str) -> Offsets:
    by_partition: dict[tuple[str | None, int], int] = {}
    default = None
    for part in spec.split(","):
        where, _, value = part.strip().partition("=")
        try:
            offset = int(value)
            if offset < 0:
                raise ValueError
            if where == "*":
                default = offset
                continue
            topic, _, partition = where.rpartition(":")
            number = int(partition)
            if number < 0:
                raise ValueError
            by_partition[(topic or None, number)] = offset
        except ValueError:
            wrong = part.strip()
            raise UsageError(flag, f"{wrong!r} is not P=OFFSET (offsets and partitions >= 0)") from None
    return Offsets(by_partition, default)


@dataclass(frozen=True, slots=True)
class Clamp:
    """An offset asked for outside what the partition holds, and where it was moved."""

    tp: TopicPartition
    flag: str
    asked: int
    used: int


def resolve(
    flag: str, bound: Bound, tps: Sequence[TopicPartition], lookup: OffsetsLookup
) -> tuple[dict[TopicPartition, int], list[Clamp]]:
    """The offset of ``bound`` in each of ``tps``, within [first retained, end], and the clamps made to
    keep it there. Raises UsageError naming ``flag`` when per-partition offsets leave one of ``tps`` out."""
    marks = {tp: lookup.watermarks(tp) for tp in tps}
    if isinstance(bound, Named):
        index = 0 if bound.name == "earliest" else 1
        return {tp: marks[tp][index] for tp in tps}, []
    if isinstance(bound, Time):
        found = lookup.at_time(list(tps), bound.ms)
        # -1: no record at or after that time, so the bound is the end; a record the broker found is
        # within what it holds, so no clamp applies.
        return {tp: found[tp] if found.get(tp, -1) >= 0 else marks[tp][1] for tp in tps}, []
    asked = {tp: bound.of(tp) for tp in tps}
    known = set(tps) | {(None, p) for _t, p in tps}
    stray = [key for key in bound.by_partition if key not in known]
    if stray:
        named = ", ".join(f"{t}:{p}" if t else str(p) for t, p in stray)
        raise UsageError(flag, f"names partition(s) {named} that this run does not read")
    missing = [tp for tp, offset in asked.items() if offset is None]
    if missing:
        named = ", ".join(f"{t}[{p}]" for t, p in missing)
        raise UsageError(flag, f"no offset for partition(s) {named}: name each, or add *=OFFSET for the rest")
    offsets, clamps = {}, []
    for tp, offset in asked.items():
        if offset is None:
            continue  # refused above
        low, high = marks[tp]
        used = min(max(offset, low), high)
        if used != offset:
            clamps.append(Clamp(tp, flag, offset, used))
        offsets[tp] = used
    return offsets, clamps


def parse_partitions(flag: str, text: str | None) -> Callable[[int], bool]:
    """Which partitions a process reads: all (None), a list with ranges (``0,2,4-7``), or ``I/N``, the
    partitions ``p`` with ``p % N == I`` (for N processes, e.g. a Kubernetes indexed Job's index I).
    Raises UsageError naming the flag."""
    if text is None or not text.strip():
        return lambda _p: True
    spec = text.strip()
    try:
        if "/" in spec:
            index, _, count = spec.partition("/")
            i, n = int(index), int(count)
            if n < 1 or not 0 <= i < n:
                raise ValueError
            return lambda p: p % n == i
        chosen: set[int] = set()
        for part in spec.split(","):
            first, dash, last = part.strip().partition("-")
            low = int(first)
            high = int(last) if dash else low
            if low < 0 or high < low:
                raise ValueError
            chosen.update(range(low, high + 1))
    except ValueError:
        raise UsageError(
            flag, f"{spec!r}: give partitions (0,2,4-7) or I/N (the partitions p with p % N == I, 0 <= I < N)"
        ) from None
    return chosen.__contains__
