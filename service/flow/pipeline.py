"""The service loop: consume -> decode (or assemble rows) -> batch -> infer -> produce -> acknowledge.

Each concern is a part built outside (``service/startup.py``) and passed in; the loop only calls them.
Everything with I/O sits behind a small Protocol (``ports``), so unit tests drive the loop with fakes and
a fake clock, and integration tests with the real clients.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog

from service.errors import TransactionAborted
from service.flow.inference import Finished
from service.flow.parts import Parts
from service.flow.ports import SourceLike
from service.flow.records import Decoded, InputRecord, LoopState, Rejection, TopicPartition

_log = structlog.get_logger("microbatch.pipeline")

_INFLIGHT_POLL_S = 0.001


class Pipeline:
    """Drives the source through the parts it is given.

    Not thread-safe: :meth:`run` and the rebalance callbacks (which librdkafka calls from inside
    ``consume``) all happen on the thread that called :meth:`run`; the inference thread only ever runs
    ``engine.run``. :meth:`stop` may be called from a signal handler: it only flips a flag.
    """

    def __init__(
        self,
        source: SourceLike,
        parts: Parts,
        *,
        topics: Sequence[str],
        idle_poll_s: float,
        linger_s: float = 0.0,
    ) -> None:
        self._source = source
        self._topics = list(topics)
        self._idle_s = idle_poll_s
        self._linger_s = linger_s
        self._decoder, self._held, self._batcher = parts.decoder, parts.held, parts.batcher
        self._inference, self._outputs, self._acks = parts.inference, parts.outputs, parts.acks
        self._backpressure, self._policy = parts.backpressure, parts.policy
        self._backlog, self._telemetry = parts.backlog, parts.telemetry
        self._running = True
        self._closing = False
        self.committed = False
        """Whether the last commit, the one on the way out of :meth:`run`, was taken by the broker."""

    def run(self) -> None:
        """Process until :meth:`stop`; then finish what was consumed, flush, commit and close.

        On an unexpected error the consumer is still closed (which commits only offsets already stored,
        i.e. delivered), so the group rebalances at once instead of after a session timeout; then the
        error propagates.
        """
        self._source.subscribe(self._topics, self)
        try:
            while self._running:
                self._telemetry.loop()
                drained = self._consume()
                self._release()
                self._dispatch(drained)
                self._finish(self._idle_s if self._inference.full() else 0.0)
                self._durable(self._acks.poll)
                self._backpressure.apply(self._acks.in_flight())
                self._telemetry.periodic(self._state)
        except BaseException:
            self._closing = True
            self._inference.shutdown(wait=False)
            self._source.close()
            raise
        _log.info("stopping")
        self._telemetry.stopping()
        self.committed = self.commit()
        self._inference.shutdown(wait=True)
        self._closing = True  # close() revokes once more: nothing is left to commit by then
        self._telemetry.stopped(self._acks.in_flight())
        self._source.close()

    def stop(self) -> None:
        """Ask the loop to finish. Safe from a signal handler: it only flips a flag (no logging, no
        locks), so it cannot deadlock with the thread it interrupted."""
        self._running = False

    @property
    def open_rows(self) -> int:
        """Items held back across rounds (assembled rows still open)."""
        return sum(len(held) for held in self._held)

    @property
    def in_flight(self) -> int:
        """Consumed messages whose outputs are not all done yet."""
        return self._acks.in_flight()

    def _consume(self) -> bool:
        """One round's consume calls. Returns whether the last came back short: everything fetched was
        taken, so when natural batching allows an early cut (:meth:`_idle`), waiting for the target or the
        window would buy nothing but latency. Under load the engine is rarely free and the fetched queue
        rarely empty."""
        batcher = self._batcher
        opening = not len(batcher)
        count, timeout_s = self._consume_plan()
        records = self._source.consume(count, timeout_s)
        drained = len(records) < count
        if opening and records and not len(self._inference) and self._idle(True):
            # A batch just opened and may be cut once nothing more is fetched (light load): take what else
            # comes within the linger, and accept it all at once. Each round costs the loop a wake-up and
            # a pass over every stage whatever the batch holds, so at light load a short linger buys
            # fewer, larger batches: less CPU per event for about that much latency.
            if (fill := self._policy.target - len(records)) > 0:
                more = self._source.consume(fill, self._linger_s)
                records += more
                drained = len(more) < fill
            opening = False
        if records:
            self._accept(records)
        if opening and len(batcher) and not batcher.ready() and not len(self._inference):
            # A batch just opened: fill it in this same round rather than the next one (which would
            # serve acks, back-pressure and telemetry for a batch still empty of results).
            drained = self._take(*self._consume_plan())
        if not drained and batcher.ready(self._idle(drained)) and batcher.room():
            drained = self._take(batcher.room(), 0)  # more to choose among
        return drained

    def _consume_plan(self) -> tuple[int, float]:
        """How many messages to ask for, and how long consume may block. librdkafka's consume(n, timeout)
        returns only when it has n messages or the timeout expires, so: with no batch open, ask for ONE
        (which opens the batch); with one open, ask for what fills it and block no longer than its
        deadline, at most a millisecond while a batch computes (to send its results soon after), and not
        at all when the open batch may be cut early (take what is fetched)."""
        cap = _INFLIGHT_POLL_S if len(self._inference) else float("inf")
        due = self._batcher.time_until_due()
        if due is None:
            return 1, min(self._idle_s, cap)
        fill = max(1, self._policy.target - len(self._batcher))
        return fill, 0.0 if self._idle(True) else min(due, cap)

    def _idle(self, drained: bool) -> bool:
        """The open batch may be cut now: nothing more is fetched (``drained``) and the batch-size policy
        allows an early cut with what computes now (natural batching, ``BatchPolicy.may_cut_early``)."""
        return drained and self._policy.may_cut_early(computing=bool(len(self._inference)))

    def _take(self, count: int, timeout_s: float) -> bool:
        """Consume up to ``count`` records and accept them. Returns whether it came back short: nothing more
        is fetched."""
        records = self._source.consume(count, timeout_s)
        if records:
            self._accept(records)
        return len(records) < count

    def _accept(self, records: list[InputRecord]) -> None:
        """Track and decode consumed records; bad messages and items go to the dead-letter topic at once."""
        self._acks.track(records)
        self._telemetry.consumed(len(records))
        decoded, rejected, counts = self._decoder.decode(records)
        if counts:
            self._acks.expect(counts)
        self._queue(decoded, rejected)

    def _release(self) -> None:
        """Held items now due (rows that closed) go to the batcher, their dead letters out; the messages
        of a row that closed incomplete are settled."""
        for held in self._held:
            items, rejected, settled = held.due()
            if settled:
                self._acks.settle(settled)
            self._queue(items, rejected)

    def _queue(self, items: list[Decoded], rejected: list[Rejection]) -> None:
        """Items to the batcher; rejections to the dead-letter topic at once."""
        for rejection in rejected:
            self._outputs.reject(rejection)
        if items:
            self._batcher.add_all(items, [item.record.received for item in items])

    def _dispatch(self, drained: bool) -> None:
        """Cut every due batch and hand it to inference, while it has room; the open one too while the
        loop is idle (asked again after each hand-off: a batch computing ends the idle moment)."""
        while not self._inference.full() and self._batcher.ready(self._idle(drained)):
            self._inference.submit(*self._batcher.take_padded())

    def _finish(self, timeout_s: float | None) -> None:
        """Produce the outputs of the batches that are done (waiting up to ``timeout_s`` for the oldest;
        None: for all of them)."""
        for done in self._inference.finished(timeout_s):
            self._emit(done)

    def _emit(self, done: Finished) -> None:
        """One output per item; the batch told to the batch-size policy."""
        self._outputs.batch(done)
        backlog = self._backlog.total() + len(self._batcher)
        self._policy.observe(len(done.batch), done.service_s, backlog)

    def _state(self) -> LoopState:
        assigned = self._acks.owned()
        return LoopState(
            target_size=self._policy.target,
            in_flight=self._acks.in_flight(),
            stale_acks=self._acks.stale_acks,
            assigned=assigned,
            paused=assigned if self._backpressure.paused else 0,
            lag=self._backlog.per_partition(),
            open_rows=self.open_rows,
        )

    def commit(self) -> bool:
        """The one place that commits; returns whether the broker took the commit. The order is the
        at-least-once contract:

        1. every consumed message is processed (batches in flight finish, the open batch is cut early and
           run here) and its output queued; assembled rows still open are not answered early, so their
           messages stay uncommitted and are read again by whoever reads the partition next;
        2. the producer is flushed, so the broker acknowledged (or refused) every output;
        3. acknowledgements advance the per-partition watermarks (acked 34 35 36 40 -> commit 37; see
           ``offsets``), and those are stored;
        4. the stored offsets are committed synchronously.

        Steps 2-4 are the acknowledgement path's (``Checkpoint.commit``). An output still unacknowledged
        when the flush times out holds its partition's watermark back, so the worst case is a duplicate
        after restart, never a loss. With exactly-once (``Transactions.commit``), steps 3 and 4 put the
        watermarks in the open transaction and commit it; an abort rewinds instead (False).
        """
        self._finish(None)
        while len(self._batcher):
            self._emit(self._inference.run_now(*self._batcher.take_padded()))
        return self._durable(self._acks.commit)

    def _durable(self, step: Callable[[], bool | None]) -> bool:
        """Run an acknowledgement step (poll, commit, lose); returns False when it says it failed. When it
        aborted the open transaction (exactly-once), the partitions were rewound: drop everything consumed
        from them, the open batch, the batches computing and the rows held, to be read again; False."""
        try:
            return step() is not False
        except TransactionAborted as aborted:
            dropped = self._batcher.discard(lambda _d: False)
            dropped += sum(len(done.batch) for done in self._inference.finished(None))
            self._discard(list(aborted.partitions))
            _log.warning("rewound", dropped=dropped, partitions=_names(sorted(aborted.partitions)))
            return False

    def on_assigned(self, tps: list[TopicPartition]) -> None:
        """Start the new partitions' bookkeeping; resume them unless back-pressure holds them."""
        self._acks.assign(tps)
        self._backpressure.assigned(tps)
        _log.info("partitions_assigned", partitions=_names(tps))

    def on_revoked(self, tps: list[TopicPartition]) -> None:
        """Commit exactly what was delivered before handing the partitions over."""
        if not self._closing:
            self.commit()
        self._acks.revoke(tps)
        self._discard(tps)
        _log.info("partitions_revoked", partitions=_names(tps))

    def on_lost(self, tps: list[TopicPartition]) -> None:
        """The group moved on without us: committing is no longer allowed. Drop the waiting items of those
        partitions (their new owner re-reads them) and let outputs already queued finish."""
        lost = set(tps)
        # An assembled row stays while any message that fed it is still ours: those must be answered.
        dropped = self._batcher.discard(
            lambda d: (
                d.record.tp not in lost
                if d.row is None
                else any(record.tp not in lost for record in d.row.sources)
            )
        )
        self._finish(None)  # batches in flight finish; their outputs are duplicates at worst
        self._durable(lambda: self._acks.lose(tps))
        self._discard(tps)
        _log.warning("partitions_lost", partitions=_names(tps), dropped=dropped)

    def _discard(self, tps: list[TopicPartition]) -> None:
        for held in self._held:
            held.discard(tps)


def _names(tps: list[TopicPartition]) -> list[str]:
    return [f"{t}[{p}]" for t, p in tps]
