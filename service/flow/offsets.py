"""Per-partition commit watermarks: pure bookkeeping of which consumed offsets are safely done.

The one rule of at-least-once: the offset committed for a partition is the first offset that is NOT yet
done, so everything before it has a result (or a dead-letter record) acknowledged by the broker.

Worked example, offsets 34..40 consumed, acks arriving out of order::

    acked 34 35 36 40  -> commit 37   (37, 38, 39 still in flight)
    acked 37 38 39     -> commit 41   (everything through 40 is done)

Offsets are tracked in the order they were consumed rather than assumed consecutive, so gaps (compacted
topics, transaction markers) never stall the watermark.

A message may hold many items (an OTLP request: one per log record), each answered by its own output. An
offset is done only when EVERY output of its message is acknowledged: ``track`` expects one, ``expect``
says how many (none: done at once, e.g. a request without log records).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from itertools import islice, repeat
from operator import lt

from service.errors import OffsetOrderError
from service.flow.records import TopicPartition


class _Partition:
    __slots__ = ("committable", "order", "outstanding")

    def __init__(self) -> None:
        self.order: deque[int] = deque()  # consumed offsets, oldest first, until the watermark passes them
        self.outstanding: dict[int, int] = {}  # those of them not done yet -> outputs still unacknowledged
        self.committable: int | None = None


class OffsetTracker:
    """Tracks consumed offsets until they are done, and says what may be committed."""

    def __init__(self) -> None:
        self._parts: dict[TopicPartition, _Partition] = {}
        self._moved: set[TopicPartition] = set()
        # Outputs awaited beyond one per outstanding offset (fan-out), in all partitions: kept apart so
        # that a message with one output costs no bookkeeping beyond its dict entry.
        self._extra = 0
        self.stale_acks = 0
        """Acks for offsets not in flight: outputs of a partition we gave up (revoked, lost) that were
        delivered late. Harmless (the result exists) and ignored, but counted so a bug would show."""

    def track(self, tp: TopicPartition, offset: int) -> None:
        """Record that ``offset`` was consumed, expecting one output for it. Raises OffsetOrderError
        unless it is above every offset already tracked for ``tp``: a partition is consumed in order."""
        part = self._parts.get(tp)
        if part is None:
            part = self._parts[tp] = _Partition()
        floor = part.order[-1] + 1 if part.order else part.committable
        if floor is not None and offset < floor:
            raise OffsetOrderError(f"{tp}: offset {offset} tracked below {floor}")
        part.order.append(offset)
        part.outstanding[offset] = 1

    def track_run(self, tp: TopicPartition, offsets: Sequence[int]) -> None:
        """``track`` for each of ``offsets`` of ``tp``, in one call: what one consume returned of a
        partition. The same rules, checked per run rather than per offset (this runs per message).
        Raises OffsetOrderError, tracking none of them, unless they rise strictly from above every
        offset already tracked for ``tp``."""
        if not offsets:
            return
        part = self._parts.get(tp)
        if part is None:
            part = self._parts[tp] = _Partition()
        floor = part.order[-1] + 1 if part.order else part.committable
        if (floor is not None and offsets[0] < floor) or not all(map(lt, offsets, islice(offsets, 1, None))):
            raise OffsetOrderError(f"{tp}: offsets {offsets[0]}..{offsets[-1]} not rising from {floor}")
        part.order.extend(offsets)
        part.outstanding.update(zip(offsets, repeat(1)))

    def expect(self, tp: TopicPartition, offset: int, outputs: int) -> None:
        """``offset``, just tracked, has ``outputs`` outputs rather than one; with none, it is done now.
        An offset no longer tracked (its partition rewound later in the same consumed group, so it was
        forgotten) is ignored: its outputs' acks count as stale, and it is read again."""
        part = self._parts.get(tp)
        current = part.outstanding.get(offset) if part is not None else None
        if part is None or current is None:
            return
        if outputs == 0:
            self.done(tp, offset)  # the one output ``track`` expected will never come
            return
        self._extra += outputs - current
        part.outstanding[offset] = outputs

    def done(self, tp: TopicPartition, offset: int) -> bool:
        """Record that one output of ``offset`` was acknowledged; acks may come in any order. The offset
        is done with its last output. Returns False (and counts a stale ack) when ``offset`` is not in
        flight for ``tp``."""
        part = self._parts.get(tp)
        left = part.outstanding.get(offset) if part is not None else None
        if part is None or left is None:
            self.stale_acks += 1
            return False
        if left > 1:
            part.outstanding[offset] = left - 1
            self._extra -= 1
            return True
        del part.outstanding[offset]
        order = part.order
        if offset == order[0]:
            while order and order[0] not in part.outstanding:
                part.committable = order.popleft() + 1
            self._moved.add(tp)
        return True

    def done_run(self, tp: TopicPartition, offsets: Sequence[int]) -> None:
        """``done`` for each of ``offsets`` of ``tp``, in one call (acks of one partition arriving
        together); the watermark moves once, after all of them."""
        part = self._parts.get(tp)
        if part is None:
            self.stale_acks += len(offsets)
            return
        outstanding = part.outstanding
        if self._extra:  # some message awaits several outputs: count them one by one
            for offset in offsets:
                self.done(tp, offset)
            return
        # One output per offset: each ack removes its entry (None: not in flight, a stale ack).
        self.stale_acks += list(map(outstanding.pop, offsets, repeat(None))).count(None)
        order = part.order
        if order and order[0] not in outstanding:
            while order and order[0] not in outstanding:
                part.committable = order.popleft() + 1
            self._moved.add(tp)

    def take_committable(self) -> dict[TopicPartition, int]:
        """The next offset to commit for every partition whose watermark moved since the last call."""
        moved = {tp: self._parts[tp].committable for tp in self._moved if tp in self._parts}
        self._moved.clear()
        return {tp: off for tp, off in moved.items() if off is not None}

    def in_flight(self, tp: TopicPartition | None = None) -> int:
        """How many outputs of consumed messages are not acknowledged yet (for ``tp``, or in all): the
        items in flight, so that back-pressure bounds memory even when messages fan out."""
        if tp is not None:
            part = self._parts.get(tp)
            return sum(part.outstanding.values()) if part else 0
        return sum(len(p.outstanding) for p in self._parts.values()) + self._extra

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        """Drop all state of partitions that are no longer ours (revoked or lost)."""
        for tp in tps:
            part = self._parts.pop(tp, None)
            if part is not None:
                self._extra -= sum(part.outstanding.values()) - len(part.outstanding)
            self._moved.discard(tp)
