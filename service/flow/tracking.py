"""What every acknowledgement strategy keeps: each consumed offset, until all of its outputs are done.

:class:`Tracked` is the common half of ``ports.Acknowledgements``: tracking consumed records (a
partition rewound without a rebalance starts afresh), the outputs each awaits, outputs settled by design,
and the partitions owned. What makes progress durable is each strategy's own: storing offsets for the
consumer's commits (``flow.checkpoint.Checkpoint``), or sending them inside a transaction
(``flow.transactions.Transactions``).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from operator import attrgetter

import structlog

from service.errors import OffsetOrderError
from service.flow.offsets import OffsetTracker
from service.flow.records import InputRecord, TopicPartition

_log = structlog.get_logger("microbatch.checkpoint")

TP = attrgetter("topic", "partition")  # a record's TopicPartition


class Tracked:
    """Not thread-safe: the loop's thread only (rebalance callbacks run on it too, inside ``consume``)."""

    def __init__(self) -> None:
        self._tracker = OffsetTracker()
        self.assigned: set[TopicPartition] = set()

    def track(self, records: Sequence[InputRecord]) -> None:
        """Record that ``records`` were consumed. A partition rewound without a rebalance (offset reset,
        log truncation) starts its bookkeeping afresh: what is re-read is processed again (duplicates,
        never a loss)."""
        track_run = self._tracker.track_run
        # A consume returns each partition's messages in runs: one call per run, not per message.
        for tp, run in groupby(records, TP):
            offsets = [record.offset for record in run]
            try:
                track_run(tp, offsets)
            except OffsetOrderError:
                self._track_rewound(tp, offsets)
            self._tracked(tp, offsets[0])

    def _tracked(self, tp: TopicPartition, first: int) -> None:
        """``tp`` was consumed from ``first`` on (a hook for a strategy that needs to know)."""

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
        acknowledged (none: at once, made durable with the next acknowledgements)."""
        for record, outputs in counts:
            self._tracker.expect(record.tp, record.offset, outputs)

    def settle(self, records: Sequence[InputRecord]) -> None:
        """One output of each of ``records`` will never come, by design (a row closed incomplete): count it
        done, as if acknowledged."""
        done = self._tracker.done
        for record in records:
            done(record.tp, record.offset)

    def _done(self, acked: Sequence[InputRecord]) -> dict[TopicPartition, int]:
        """Fold acknowledged outputs into the watermarks; returns those that moved."""
        done_run = self._tracker.done_run
        # Acks come in the order of the output's partitions: sorted (stable, in C) into input runs.
        for tp, run in groupby(sorted(acked, key=TP), TP):
            done_run(tp, [record.offset for record in run])
        return self._tracker.take_committable()

    def assign(self, tps: Sequence[TopicPartition]) -> None:
        """New partitions: their bookkeeping starts afresh."""
        self._tracker.forget(tps)
        self.assigned.update(tps)

    def revoke(self, tps: Sequence[TopicPartition]) -> None:
        """Partitions handed over (after the caller committed): forget them."""
        self._tracker.forget(tps)
        self.assigned.difference_update(tps)

    def in_flight(self) -> int:
        """Outputs of consumed messages not done yet (one per item)."""
        return self._tracker.in_flight()

    def owned(self) -> int:
        """Partitions assigned to this consumer now."""
        return len(self.assigned)

    @property
    def stale_acks(self) -> int:
        return self._tracker.stale_acks
