"""The source a backfill's loop reads: the range's partitions assigned at their start offsets (no group
membership, so no live service's partitions move), records past the end dropped, each partition paused
once read to its end, and the loop told to stop when every one is.

It is a ``SourceLike`` for :class:`service.flow.pipeline.Pipeline`, so the backfill runs the service's own
loop, with its commit contract: offsets are committed under the backfill's group only when delivered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from service.backfill.plan import PlanLookup
from service.backfill.ranges import Ranges
from service.flow.ports import RebalanceListener, SourceLike
from service.flow.records import InputRecord, TopicPartition

MAX_BLOCK_S = 0.2
"""The longest one consume may block, so that a partition whose last offsets hold no record is found done
(by its position) soon, rather than when a batch's window would have closed."""


class AssignableSource(SourceLike, Protocol):
    """What :class:`service.kafka.RangeReader` offers beyond the loop's ``SourceLike``."""

    def assign(self, starts: Mapping[TopicPartition, int]) -> None: ...

    def positions(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]: ...

    def take_ends(self) -> dict[TopicPartition, int]: ...

    def offsets(self) -> PlanLookup: ...

    def note(self, notes: Mapping[TopicPartition, str]) -> None: ...

    def pause_partitions(self, tps: Sequence[TopicPartition]) -> None: ...


class RangeSource:
    """Reads ``ranges`` through ``source``; calls ``on_done()`` after every consume once every partition
    was read to its end (it stops the loop, which then finishes, flushes and commits as on a signal), and
    ``on_read(ranges)`` after every consume, for progress."""

    def __init__(
        self,
        source: AssignableSource,
        ranges: Ranges,
        on_done: Callable[[], None],
        on_read: Callable[[Ranges], None] = lambda _r: None,
    ) -> None:
        self._source = source
        self.ranges = ranges
        self._on_done = on_done
        self._on_read = on_read

    def subscribe(self, topics: list[str], listener: RebalanceListener) -> None:
        """Assign the partitions with anything left to read, at their start (``topics`` is the range's
        already)."""
        pending = self.ranges.pending
        self._source.assign({tp: self.ranges.starts[tp] for tp in pending})
        listener.on_assigned(pending)
        if self.ranges.done:
            self._on_done()

    def consume(self, max_messages: int, timeout_s: float) -> list[InputRecord]:
        records = self._source.consume(max_messages, min(timeout_s, MAX_BLOCK_S))
        ranges = self.ranges
        kept, finished = ranges.admit(records)
        ends = self._source.take_ends()
        if ends:
            finished += ranges.reached(ends)
        if not records and not ranges.done:
            # Nothing came: the last offsets may hold no record (transaction markers); the client's
            # position has moved past them.
            finished += ranges.reached(self._source.positions(ranges.pending))
        if finished:
            self._source.pause_partitions(finished)  # a live topic's later records are not fetched
        self._on_read(ranges)
        if ranges.done:
            self._on_done()
        return kept

    def lag(self) -> dict[TopicPartition, int]:
        return self._source.lag()

    def store(self, offsets: dict[TopicPartition, int]) -> None:
        self._source.store(offsets)

    def commit(self) -> bool:
        return self._source.commit()

    def pause(self) -> None:
        self._source.pause()

    def resume(self, tps: list[TopicPartition] | None = None) -> None:
        """Resume what back-pressure paused, never a partition read to its end."""
        pending = set(self.ranges.pending)
        parts = [tp for tp in (tps if tps is not None else pending) if tp in pending]
        if parts:
            self._source.resume(parts)

    def rewind(self, offsets: dict[TopicPartition, int]) -> None:
        self._source.rewind(offsets)

    def close(self) -> None:
        self._source.close()
