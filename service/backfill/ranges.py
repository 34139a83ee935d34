"""How far a backfill has read each partition of its range, and when it is done. Pure.

A partition's range is ``[start, end)``. It is done once a record at ``end - 1`` or beyond was read, or
once the client's position in it reached ``end`` (the last offsets may hold no records: transaction
markers, compacted records), or at once when it is empty. Records at or past ``end`` are not part of the
range: :meth:`Ranges.admit` drops them, so they are never processed nor committed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import groupby
from operator import attrgetter

from service.flow.records import InputRecord, TopicPartition

_TP = attrgetter("topic", "partition")


class Ranges:
    """The range of each partition and the next offset to read in it. Not thread-safe (the loop's)."""

    def __init__(self, starts: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int]) -> None:
        if starts.keys() != ends.keys():
            raise ValueError("starts and ends must name the same partitions")
        self.starts = dict(starts)
        self.ends = {tp: max(ends[tp], starts[tp]) for tp in starts}
        self._next = dict(self.starts)
        self._pending = {tp for tp in self.starts if self.ends[tp] > self.starts[tp]}

    @property
    def pending(self) -> list[TopicPartition]:
        """The partitions not read to their end yet, sorted."""
        return sorted(self._pending)

    @property
    def done(self) -> bool:
        return not self._pending

    @property
    def total(self) -> int:
        """Offsets in the whole range (records, less any gaps the partitions have)."""
        return sum(self.ends[tp] - self.starts[tp] for tp in self.starts)

    @property
    def read(self) -> int:
        """Offsets of the range read so far."""
        return sum(self._next[tp] - self.starts[tp] for tp in self.starts)

    def admit(self, records: Sequence[InputRecord]) -> tuple[list[InputRecord], list[TopicPartition]]:
        """The records within the range, in order, and the partitions this call found done. Looks at one
        consumed run of a partition at a time (its offsets rise, as librdkafka returns them), not at each
        record: a run that ends inside the range is kept whole."""
        kept: list[InputRecord] = []
        finished: list[TopicPartition] = []
        for tp, group in groupby(records, _TP):
            end = self.ends.get(tp)
            if end is None:
                continue  # not part of the range
            run = list(group)
            inside = run if run[-1].offset < end else [r for r in run if r.offset < end]
            kept += inside
            if inside:
                self._next[tp] = inside[-1].offset + 1
            # Done at the last offset of the range, or at a record past it (everything before was read).
            if tp in self._pending and (len(inside) < len(run) or self._next[tp] >= end):
                self._finish(tp, finished)
        return kept, finished

    def reached(self, positions: Mapping[TopicPartition, int]) -> list[TopicPartition]:
        """The client's read positions (the next offset it will return, or where a partition's end was
        found); returns the partitions this call found done."""
        finished: list[TopicPartition] = []
        for tp, position in positions.items():
            if tp in self._pending and position >= self.ends[tp]:
                self._finish(tp, finished)
        return finished

    def _finish(self, tp: TopicPartition, finished: list[TopicPartition]) -> None:
        self._pending.discard(tp)
        self._next[tp] = self.ends[tp]
        finished.append(tp)
