"""The checkpoint: the acknowledgement path of at-least-once delivery, in one place.

This class is responsible for: tracking every consumed offset until all of its outputs (one per item of
its message) are acknowledged; taking the sink's acknowledgements (the only code that does) and storing
each partition's watermark as they arrive (librdkafka's auto-commit sends what is stored); sending a
replacement for an output the broker refused for good; the flush-then-commit half of the commit contract
(:meth:`Checkpoint.commit`); and the bookkeeping of partitions assigned, revoked and lost.

It implements ``ports.Acknowledgements``, the contract an exactly-once (transactional) or share-group
(per-record) strategy implements too; the loop does not know which it drives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import groupby
from operator import attrgetter

import structlog

from service.errors import OffsetOrderError
from service.flow.encode import replace_refused
from service.flow.offsets import OffsetTracker
from service.flow.ports import SinkLike, SourceLike, TelemetryLike
from service.flow.records import InputRecord, TopicPartition

_log = structlog.get_logger("microbatch.checkpoint")

_TP = attrgetter("topic", "partition")  # a record's TopicPartition


class Checkpoint:
    """Not thread-safe: the loop's thread only (rebalance callbacks run on it too, inside ``consume``).

    A record the broker refused for good is replaced by a smaller one (its dead letter to ``dlq_topic``,
    see :func:`service.flow.encode.replace_refused`), which must be acknowledged before its offset can be
    committed."""

    def __init__(
        self,
        source: SourceLike,
        sink: SinkLike,
        dlq_topic: str,
        flush_timeout_s: float,
        telemetry: TelemetryLike,
        clock: Callable[[], float],
    ) -> None:
        self._source = source
        self._sink = sink
        self._dlq_topic = dlq_topic
        self._flush_timeout_s = flush_timeout_s
        self._telemetry = telemetry
        self._clock = clock
        self._tracker = OffsetTracker()
        self.assigned: set[TopicPartition] = set()

    def track(self, records: Sequence[InputRecord]) -> None:
        """Record that ``records`` were consumed. A partition rewound without a rebalance (offset reset,
        log truncation) starts its bookkeeping afresh: what is re-read is processed again (duplicates,
        never a loss)."""
        track_run = self._tracker.track_run
        # A consume returns each partition's messages in runs: one call per run, not per message.
        for tp, run in groupby(records, _TP):
            offsets = [record.offset for record in run]
            try:
                track_run(tp, offsets)
            except OffsetOrderError:
                self._track_rewound(tp, offsets)

    def _track_rewound(self, tp: TopicPartition, offsets: list[int]) -> None:
        """One by one, starting the partition afresh at each offset below the last tracked."""
        for offset in offsets:
            try:
                self._tracker.track(tp, offset)
            except OffsetOrderError:
                _log.warning("partition_rewound", partition=f"{tp[0]}[{tp[1]}]", offset=offset)
                self._tracker.forget([tp])
                self._tracker.track(tp, offset)

    def expect(self, counts: Sequence[tuple[InputRecord, int]]) -> None:
        """Messages just tracked that hold other than one item: each is done when that many outputs are
        acknowledged (none: at once, stored with the next acknowledgements)."""
        for record, outputs in counts:
            self._tracker.expect(record.tp, record.offset, outputs)

    def settle(self, records: Sequence[InputRecord]) -> None:
        """One output of each of ``records`` will never come, by design (a row closed incomplete): count it
        done, as if acknowledged."""
        done = self._tracker.done
        for record in records:
            done(record.tp, record.offset)

    def poll(self) -> None:
        """Take the deliveries the sink reports now (without waiting): :meth:`acknowledge` them."""
        self.acknowledge(self._sink.poll(0))

    def acknowledge(self, acked: Sequence[InputRecord]) -> int:
        """Fold acknowledged deliveries into the watermarks and store whatever moved; send replacements
        for outputs the broker refused for good. Returns how many replacements were sent."""
        done_run = self._tracker.done_run
        # Acks come in the order of the output's partitions: sorted (stable, in C) into input runs.
        for tp, run in groupby(sorted(acked, key=_TP), _TP):
            done_run(tp, [record.offset for record in run])
        if acked:
            self._telemetry.acknowledged(len(acked))
        offsets = self._tracker.take_committable()
        if offsets:
            self._source.store(offsets)
        return self._replace_refused()

    def _replace_refused(self) -> int:
        """Send a replacement for each record the broker refused for good since the last call; returns how
        many were sent. One with nothing smaller left to send is logged, and its input's offset stays
        uncommitted."""
        sent = 0
        for out, why in self._sink.take_refused():
            replacement = replace_refused(out, why, self._dlq_topic)
            if replacement is None:
                _log.error("dead_letter_undeliverable", offset=out.source.offset, error=why)
            else:
                self._sink.send(replacement)
                sent += 1
        return sent

    def commit(self) -> bool:
        """Steps 2 to 4 of the commit contract (``Pipeline.commit`` does step 1, processing everything
        consumed): flush the producer, so the broker acknowledged (or refused) every output; fold the
        acknowledgements into the watermarks and store them; commit the stored offsets synchronously.

        An output still unacknowledged when the flush times out holds its partition's watermark back, so
        the worst case is a duplicate after restart, never a loss. Returns whether the broker took the
        commit."""
        if self.acknowledge(self._sink.flush(self._flush_timeout_s)):
            self.acknowledge(self._sink.flush(self._flush_timeout_s))  # the replacements of refused records
        if self._sink.pending():
            _log.warning("flush_incomplete", outstanding=self._sink.pending())
        start = self._clock()
        ok = self._source.commit()
        self._telemetry.committed(ok, self._clock() - start)
        return ok

    def assign(self, tps: Sequence[TopicPartition]) -> None:
        """New partitions: their bookkeeping starts afresh."""
        self._tracker.forget(tps)
        self.assigned.update(tps)

    def revoke(self, tps: Sequence[TopicPartition]) -> None:
        """Partitions handed over (after the caller committed): forget them."""
        self._tracker.forget(tps)
        self.assigned.difference_update(tps)

    def lose(self, tps: Sequence[TopicPartition]) -> None:
        """Partitions the group took away without a handover: committing them is no longer allowed. The
        outputs already queued finish, but their acknowledgements store nothing."""
        acked = self._sink.flush(self._flush_timeout_s)
        self.revoke(tps)  # first, so their acks store nothing
        self.acknowledge(acked)

    def in_flight(self) -> int:
        """Outputs of consumed messages not acknowledged yet (one per item)."""
        return self._tracker.in_flight()

    def owned(self) -> int:
        """Partitions assigned to this consumer now."""
        return len(self.assigned)

    @property
    def stale_acks(self) -> int:
        return self._tracker.stale_acks
