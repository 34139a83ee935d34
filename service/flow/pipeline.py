"""The service loop: consume -> decode (or assemble rows) -> batch -> infer -> produce -> store offsets.

The loop is this file; each concern is a part built outside (``service/app.py``) and passed in: the
decoder (or the row assembly), the batcher, inference, the outputs, the checkpoint, back-pressure, the
batch size and telemetry.
Everything with I/O sits behind a small Protocol (``ports``), so unit tests drive the loop with fakes and a
fake clock, and integration tests with the real clients.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from service.flow.assembly import Assembly
from service.flow.backlog import Backlog
from service.flow.backpressure import BackPressure
from service.flow.batcher import Batcher
from service.flow.checkpoint import Checkpoint
from service.flow.decode import Decoder
from service.flow.inference import Finished, Inference
from service.flow.outputs import Outputs
from service.flow.ports import SinkLike, SourceLike, TelemetryLike
from service.flow.records import Decoded, InputRecord, LoopState, Rejection, TopicPartition
from service.flow.sizing import Sizing

_log = structlog.get_logger("microbatch.pipeline")

_INFLIGHT_POLL_S = 0.001


class Pipeline:
    """Drives the source and the sink through the parts it is given.

    Not thread-safe: :meth:`run` and the rebalance callbacks (which librdkafka calls from inside
    ``consume``) all happen on the thread that called :meth:`run`; the inference thread only ever runs
    ``engine.run``. :meth:`stop` may be called from a signal handler: it only flips a flag.
    """

    def __init__(
        self,
        source: SourceLike,
        sink: SinkLike,
        *,
        topics: Sequence[str],
        idle_poll_s: float,
        natural: bool = False,
        decoder: Decoder | Assembly,
        batcher: Batcher[Decoded],
        inference: Inference,
        outputs: Outputs,
        checkpoint: Checkpoint,
        backpressure: BackPressure,
        sizing: Sizing,
        backlog: Backlog,
        telemetry: TelemetryLike,
    ) -> None:
        self._source, self._sink = source, sink
        self._topics = list(topics)
        self._idle_s = idle_poll_s
        self._natural = natural
        self._decoder, self._batcher, self._inference = decoder, batcher, inference
        self._outputs, self._checkpoint, self._backpressure = outputs, checkpoint, backpressure
        self._sizing, self._backlog, self._telemetry = sizing, backlog, telemetry
        self._running = True
        self._closing = False
        self._drained = False  # the last consume came back short: nothing more is fetched
        self.committed = False
        """Whether the last commit, the one on the way out of :meth:`run`, was taken by the broker."""

    # -- the loop -------------------------------------------------------------------------------------

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
                self._consume()
                self._rows()
                self._dispatch()
                self._finish(self._idle_s if self._inference.full() else 0.0)
                self._checkpoint.acknowledge(self._sink.poll(0))
                self._backpressure.apply(self._checkpoint.in_flight())
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
        self._telemetry.stopped(self._checkpoint.in_flight())
        self._source.close()

    def stop(self) -> None:
        """Ask the loop to finish. Safe from a signal handler: it only flips a flag (no logging, no
        locks), so it cannot deadlock with the thread it interrupted."""
        self._running = False

    @property
    def open_rows(self) -> int:
        """Assembled rows still open (0 when items are not assembled)."""
        return len(self._decoder) if isinstance(self._decoder, Assembly) else 0

    @property
    def in_flight(self) -> int:
        """Consumed messages whose outputs are not all acknowledged yet."""
        return self._checkpoint.in_flight()

    def _consume(self) -> None:
        """One round's consume calls (see :meth:`_consume_plan`)."""
        batcher = self._batcher
        opening = not len(batcher)
        self._accept(self._take(*self._consume_plan()))
        if opening and len(batcher) and not batcher.ready() and not len(self._inference):
            # A batch just opened: fill it in this same round rather than the next one (which would
            # serve acks, back-pressure and telemetry for a batch still empty of results).
            self._accept(self._take(*self._consume_plan()))
        if batcher.ready(self._idle()) and batcher.room():
            self._accept(self._take(batcher.room(), 0))  # more to choose among

    def _consume_plan(self) -> tuple[int, float]:
        """How many messages to ask for, and how long consume may block.

        librdkafka's consume(n, timeout) returns only when it has n messages or the timeout expires, so:
        with no batch open, ask for ONE message (it returns as soon as one arrives, which opens the
        batch); with a batch open, ask for exactly what fills it and block no longer than its deadline.
        While a batch is computing, block at most a millisecond, to send its results soon after it ends.
        With natural batching and nothing computing, do not block for an open batch at all: take what is
        fetched, and the batch is cut (:meth:`_idle`).
        """
        cap = _INFLIGHT_POLL_S if len(self._inference) else float("inf")
        due = self._batcher.time_until_due()
        if due is None:
            return 1, min(self._idle_s, cap)
        fill = max(1, self._batcher.max_size - len(self._batcher))
        return fill, 0.0 if self._may_cut_early() else min(due, cap)

    def _take(self, count: int, timeout_s: float) -> list[InputRecord]:
        """``source.consume``, noting whether it came back short (nothing more is fetched)."""
        records = self._source.consume(count, timeout_s)
        self._drained = len(records) < count
        return records

    def _may_cut_early(self) -> bool:
        """Natural batching is on, nothing is computing, and the load does not need batches past
        ``MAX_SIZE`` (a stretched or draining target: an early cut there would only add batches)."""
        return self._natural and not len(self._inference) and not self._sizing.stretched

    def _idle(self) -> bool:
        """Natural batching: the open batch may be cut early (:meth:`_may_cut_early`) and the last consume
        took everything fetched, so waiting for the target or the window would buy nothing but latency.
        Under load the engine is rarely free and the fetched queue rarely empty, and batches fill to the
        target as before."""
        return self._drained and self._may_cut_early()

    def _accept(self, records: list[InputRecord]) -> None:
        """Track and decode consumed records; bad messages and items go to the dead-letter topic at once."""
        if not records:
            return
        self._checkpoint.track(records)
        self._telemetry.consumed(len(records))
        decoded, rejected, counts = self._decoder.decode(records)
        if counts:
            self._checkpoint.expect(counts)
        self._queue(decoded, rejected)

    def _rows(self) -> None:
        """Assembled rows that close now go to the batcher; the messages of a row that closed incomplete
        are settled, and a row's dead letters go out."""
        items, rejected, settled = self._decoder.due()
        if settled:
            self._checkpoint.settle(settled)
        self._queue(items, rejected)

    def _queue(self, items: list[Decoded], rejected: list[Rejection]) -> None:
        """Items to the batcher; rejections to the dead-letter topic at once."""
        for rejection in rejected:
            self._outputs.reject(rejection)
        if items:
            self._batcher.add_all(items, [item.record.received for item in items])

    def _dispatch(self) -> None:
        """Cut every due batch and hand it to inference, while it has room."""
        while not self._inference.full() and self._batcher.ready(self._idle()):
            self._inference.submit(*self._batcher.take_padded())

    def _finish(self, timeout_s: float | None) -> None:
        """Produce the outputs of the batches that are done (waiting up to ``timeout_s`` for the oldest;
        None: for all of them)."""
        for done in self._inference.finished(timeout_s):
            self._emit(done)

    def _emit(self, done: Finished) -> None:
        """One output per item, then the next target batch size."""
        self._outputs.batch(done)
        backlog = self._backlog.total() + len(self._batcher)
        self._batcher.max_size = self._sizing.observe(len(done.batch), done.service_s, backlog)

    def _state(self) -> LoopState:
        assigned = len(self._checkpoint.assigned)
        return LoopState(
            target_size=self._batcher.max_size,
            in_flight=self._checkpoint.in_flight(),
            stale_acks=self._checkpoint.stale_acks,
            assigned=assigned,
            paused=assigned if self._backpressure.paused else 0,
            lag=self._backlog.per_partition(),
            open_rows=self.open_rows,
        )

    # -- commits ------------------------------------------------------------------------------------

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

        Steps 2-4 are :meth:`Checkpoint.commit`. An output still unacknowledged when the flush times out
        holds its partition's watermark back, so the worst case is a duplicate after restart, never a loss.
        """
        self._finish(None)
        while len(self._batcher):
            self._emit(self._inference.run_now(*self._batcher.take_padded()))
        return self._checkpoint.commit()

    # -- rebalance callbacks (run inside consume) -----------------------------------------------------

    def on_assigned(self, tps: list[TopicPartition]) -> None:
        """Start the new partitions' bookkeeping; resume them unless back-pressure holds them."""
        self._checkpoint.assign(tps)
        self._backpressure.assigned(tps)
        _log.info("partitions_assigned", partitions=_names(tps))

    def on_revoked(self, tps: list[TopicPartition]) -> None:
        """Commit exactly what was delivered before handing the partitions over."""
        if not self._closing:
            self.commit()
        self._checkpoint.revoke(tps)
        self._decoder.discard(tps)
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
        self._checkpoint.lose(tps)
        self._decoder.discard(tps)
        _log.warning("partitions_lost", partitions=_names(tps), dropped=dropped)


def _names(tps: list[TopicPartition]) -> list[str]:
    return [f"{t}[{p}]" for t, p in tps]
