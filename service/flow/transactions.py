"""Exactly-once: the outputs of one or more batches, and the input offsets they complete, in one transaction.

The commit rule is at-least-once's, with "acknowledged" read as "written in this transaction or an earlier
one": an offset goes into a transaction only when every output of every item up to it was delivered
inside it or before it (``flow.offsets``), so a transaction's offsets never run ahead of its outputs.
Assembled rows keep their rule: offsets stop at the first message of a row still open.

A transaction opens with the first output sent after the last commit. It is committed so that it is
visible about ``interval_s`` after the oldest input it answers was consumed (that is, once that input
waited ``interval_s`` less the time recent commits took, but not before half an interval after it
opened), or sooner once it holds ``max_records``
records, or when the loop commits (a revoke, the stop). Batches keep computing meanwhile: a commit waits
only for the deliveries of what was sent.

An aborted transaction (a delivery failed in it, the group moved on, a commit that could not complete)
leaves nothing behind for ``read_committed`` readers: every owned partition is rewound to where its last
committed transaction left it (or to where it was first read since it was assigned), and
:class:`service.errors.TransactionAborted` tells the loop to drop what it holds and read again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog

from service.errors import TransactionAborted
from service.flow.ports import SourceLike, TelemetryLike, TransactionalSinkLike
from service.flow.records import InputRecord, TopicPartition
from service.flow.tracking import Tracked

_log = structlog.get_logger("microbatch.transactions")

_SMOOTHING = 0.2  # of the commit time: the weight of the latest commit


class Transactions(Tracked):
    """The exactly-once ``ports.Acknowledgements``. Not thread-safe: the loop's thread only."""

    def __init__(
        self,
        source: SourceLike,
        sink: TransactionalSinkLike,
        interval_s: float,
        max_records: int,
        flush_timeout_s: float,
        telemetry: TelemetryLike,
        clock: Callable[[], float],
    ) -> None:
        super().__init__()
        self._source = source
        self._sink = sink
        self._interval_s = interval_s
        self._max_records = max_records
        self._flush_timeout_s = flush_timeout_s
        self._telemetry = telemetry
        self._clock = clock
        self._ready: dict[TopicPartition, int] = {}  # watermarks moved since the last commit
        self._ready_since: float | None = None  # when the first of them moved
        self._base: dict[TopicPartition, int] = {}  # where a rewind reads each owned partition from
        self._commit_s = 0.0  # how long commits take, smoothed: a transaction is committed that early

    def _tracked(self, tp: TopicPartition, first: int) -> None:
        if tp not in self._base:  # first read since it was assigned: nothing of ours committed yet
            self._base[tp] = first

    def poll(self) -> None:
        """Take the deliveries reported now; commit the open transaction once it is due (old enough, or
        big enough), abort it at once once it cannot commit. Raises TransactionAborted."""
        self._fold(self._sink.poll(0))
        if self._sink.failing() is not None or self._due():
            self.commit()

    def _due(self) -> bool:
        opened = self._sink.opened()
        if opened is None:
            since = self._ready_since
        else:
            # Its oldest input's wait; but an input that waited long before its output was sent (an
            # assembled row's first message) must not make every transaction due as it opens.
            since = max(self._sink.oldest(), opened - self._interval_s / 2)
        if since is None:
            return False
        lead = min(self._commit_s, self._interval_s / 2)
        return self._clock() - since >= self._interval_s - lead or self._sink.records() >= self._max_records

    def _fold(self, acked: Sequence[InputRecord]) -> None:
        moved = self._done(acked)
        if acked:
            self._telemetry.acknowledged(len(acked))
        if moved:
            if self._ready_since is None:
                self._ready_since = self._clock()
            self._ready.update(moved)

    def commit(self) -> bool:
        """Wait for the open transaction's deliveries, put the offsets they complete in it, and commit it.
        Returns True (nothing open and nothing to commit is success too). Raises TransactionAborted after
        rewinding, when it had to be aborted instead."""
        self._fold(self._sink.flush(self._flush_timeout_s))
        if self._sink.opened() is None and not self._ready:
            return True
        offsets = dict(self._ready)  # a partition handed over left it at its revoke
        start = self._clock()
        try:
            self._sink.commit(offsets)
        except TransactionAborted as exc:
            self._telemetry.transaction(False, self._clock() - start, exc.fenced)
            raise self._rewound(str(exc), exc.fenced) from None
        took = self._clock() - start
        self._telemetry.transaction(True, took)
        self._commit_s += _SMOOTHING * (took - self._commit_s)
        self._base.update(offsets)
        self._ready.clear()
        self._ready_since = None
        return True

    def lose(self, tps: Sequence[TopicPartition]) -> None:
        """Partitions the group took away without a handover: the open transaction may not commit their
        offsets, nor let their outputs be seen. Abort it, and rewind the partitions still owned."""
        self.revoke(tps)
        if self._sink.opened() is None and not self._ready:
            return  # nothing was sent since the last commit
        self._sink.abort()
        self._telemetry.transaction(False, 0.0, True)
        raise self._rewound("partitions lost", True)

    def revoke(self, tps: Sequence[TopicPartition]) -> None:
        super().revoke(tps)
        for tp in tps:
            self._base.pop(tp, None)
            self._ready.pop(tp, None)

    def _rewound(self, why: str, fenced: bool) -> TransactionAborted:
        """Every owned partition back to where its last committed transaction left it; everything tracked
        forgotten. Returns the error that tells the loop."""
        rewind = dict(self._base)  # every partition read since it was assigned
        owned = frozenset(self.assigned | rewind.keys())
        self._tracker.forget(list(owned))
        self._ready.clear()
        self._ready_since = None
        if rewind:
            self._source.rewind(rewind)
        rewound = {f"{t}[{p}]": offset for (t, p), offset in rewind.items()}
        _log.warning("transaction_aborted", reason=why, fenced=fenced, rewound=rewound)
        return TransactionAborted(why, owned, fenced=fenced)
