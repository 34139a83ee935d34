"""The acknowledgement path of a share group: each record ACCEPTed once everything it owes is delivered.

A share group has no offsets: a record is answered on its own, by the member that acquired it. The rule
is the one offsets follow in a consumer group, per record: a record is done when every output of it (its
result, each result of a request that fans out, or its dead letter) is acknowledged by the broker; it is
then ACCEPTed. What is still unanswered when the loop stops is RELEASEd by the source as it closes, so
the group hands it to another member at once. A record held close to the end of its lock
(``share.record.lock.duration.ms``) is warned about: past it, the group delivers it again (a duplicate).

It implements ``ports.Acknowledgements``, as ``flow.checkpoint.Checkpoint`` and
``flow.transactions.Transactions`` do; the loop does not know which it drives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog

from service.flow.checkpoint import flushed_commit
from service.flow.encode import resend_refused
from service.flow.ports import ShareSourceLike, SinkLike, TelemetryLike
from service.flow.records import Ack, InputRecord, TopicPartition

_log = structlog.get_logger("microbatch.checkpoint")

LOCK_WARNING = 0.8
"""The share of the record lock after which a record still unanswered is warned about."""
_CHECK_EVERY_S = 1.0

Key = tuple[str, int, int]


def _key(record: InputRecord) -> Key:
    return (record.topic, record.partition, record.offset)


class Acceptances:
    """Not thread-safe: the loop's thread only. ``members``: the share group members the source runs
    (what ``owned`` reports, in place of partitions); ``lock_s``: the group's record lock."""

    def __init__(
        self,
        source: ShareSourceLike,
        sink: SinkLike,
        dlq_topic: str,
        flush_timeout_s: float,
        members: int,
        lock_s: float,
        telemetry: TelemetryLike,
        clock: Callable[[], float],
    ) -> None:
        self._source = source
        self._sink = sink
        self._dlq_topic = dlq_topic
        self._flush_timeout_s = flush_timeout_s
        self._members = members
        self._lock_s = lock_s
        self._telemetry = telemetry
        self._clock = clock
        self._waiting: dict[Key, int] = {}  # outputs each unanswered record still awaits, oldest first
        self._received: dict[Key, float] = {}  # when each was acquired, oldest first
        self._outstanding = 0  # the sum of ``_waiting``: asked every loop round
        self._checked = 0.0
        self._stale = 0

    def track(self, records: Sequence[InputRecord]) -> None:
        """Each of ``records`` awaits one output. A record delivered again while still waiting (its lock
        ran out) is tracked afresh: its earlier outputs count for the new delivery too."""
        waiting, received = self._waiting, self._received
        for record in records:
            key = _key(record)
            self._outstanding += 1 - waiting.get(key, 0)
            waiting[key] = 1
            received.pop(key, None)
            received[key] = record.received
        if records:
            self._telemetry.acquired([record.delivery_count for record in records])

    def expect(self, counts: Sequence[tuple[InputRecord, int]]) -> None:
        """Records just tracked that hold other than one item: each awaits that many outputs (none: done
        now, accepted with the next acknowledgements)."""
        done = []
        for record, outputs in counts:
            key = _key(record)
            if key not in self._waiting:
                continue
            if outputs:
                self._outstanding += outputs - self._waiting[key]
                self._waiting[key] = outputs
            else:
                done.append(record)
                self._forget(key)
        if done:
            self._accept(done)

    def settle(self, records: Sequence[InputRecord]) -> None:
        """One output of each of ``records`` will never come, by design: count it done."""
        self._fold(records)

    def poll(self) -> None:
        """Take the deliveries the sink reports now (without waiting) and accept the records done."""
        self._acknowledged(self._sink.poll(0))
        now = self._clock()
        if self._waiting and now - self._checked >= _CHECK_EVERY_S:
            self._checked = now
            self._check_locks(now)

    def _acknowledged(self, acked: Sequence[InputRecord]) -> int:
        if acked:
            self._telemetry.acknowledged(len(acked))
            self._fold(acked)
        return resend_refused(self._sink, self._dlq_topic)

    def _fold(self, acked: Sequence[InputRecord]) -> None:
        waiting = self._waiting
        done = []
        for record in acked:
            key = _key(record)
            left = waiting.get(key)
            if left is None:
                self._stale += 1
            elif left > 1:
                waiting[key] = left - 1
                self._outstanding -= 1
            else:
                done.append(record)
                self._forget(key)
        if done:
            self._accept(done)

    def _accept(self, done: list[InputRecord]) -> None:
        self._telemetry.answered(Ack.ACCEPT, self._source.acknowledge(done, Ack.ACCEPT))

    def _forget(self, key: Key) -> None:
        self._outstanding -= self._waiting.pop(key)
        del self._received[key]

    def _check_locks(self, now: float) -> None:
        """Warn when the oldest record still unanswered nears the end of its lock."""
        oldest = next(iter(self._received.values()))
        held_s = now - oldest
        if held_s >= LOCK_WARNING * self._lock_s:
            _log.warning(
                "share_lock_expiring",
                held_s=round(held_s, 1),
                lock_s=self._lock_s,
                unanswered=len(self._waiting),
                hint="fewer records per member (KAFKA__SHARE_MAX_RECORDS) or a longer "
                "share.record.lock.duration.ms on the group: past the lock, the group delivers it again",
            )

    def commit(self) -> bool:
        """Wait for every output sent, accept the records done, and send every member's acknowledgements.
        Returns whether the brokers took them."""
        return flushed_commit(
            self._sink, self._acknowledged, self._source, self._flush_timeout_s, self._telemetry, self._clock
        )

    def assign(self, tps: Sequence[TopicPartition]) -> None:
        """A share group assigns no partitions of this replica's own: never called."""

    def revoke(self, tps: Sequence[TopicPartition]) -> None:
        """Never called (see :meth:`assign`)."""

    def lose(self, tps: Sequence[TopicPartition]) -> None:
        """Never called (see :meth:`assign`)."""

    def in_flight(self) -> int:
        """Outputs of acquired records not acknowledged yet."""
        return self._outstanding

    def owned(self) -> int:
        """The members reading (a share group has no partitions of this replica's own)."""
        return self._members

    @property
    def stale_acks(self) -> int:
        """Acknowledgements of records no longer waiting (delivered again and answered meanwhile)."""
        return self._stale
