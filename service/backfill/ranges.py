"""How far a backfill has read each partition of its range, and when it is done. Pure.

A partition's range is ``[start, end)``. It is done once a record at ``end - 1`` or beyond was read, or
once the client's position in it reached ``end`` (the last offsets may hold no records: transaction
markers, compacted records), or at once when it is empty. Records at or past ``end`` are not part of the
range: :meth:`Ranges.admit` drops them, so they are never processed nor committed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from service.flow.records import InputRecord, TopicPartition


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
        """The records within the range, in order, and the partitions this call found done."""
        ends, nexts, pending = self.ends, self._next, self._pending
        kept: list[InputRecord] = []
        finished: list[TopicPartition] = []
        for record in records:
            tp = (record.topic, record.partition)
            end = ends.get(tp)
            if end is None or record.offset >= end:
                if tp in pending:  # a record past the end: everything before it was read
                    self._finish(tp, finished)
                continue
            kept.append(record)
            nexts[tp] = record.offset + 1
            if record.offset + 1 >= end and tp in pending:
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
