"""The service loop: consume -> decode -> batch -> infer -> produce -> store offsets.

Everything with I/O is injected behind a small Protocol, so this file is plain control flow that unit
tests drive with fakes and a fake clock, and integration tests drive with the real clients.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import wait
from functools import partial
from typing import Any

import numpy as np
import structlog

from service.adaptive import BatchSizeController, BusyShare, FixedBatchSize
from service.batcher import Batcher
from service.config import Settings
from service.decode import decode, prepare_all
from service.errors import BatchMismatchError, EngineFailedError, InvalidMessage, OffsetOrderError, Reason
from service.health import Health
from service.inflight import InFlight, Inline, OffloadPolicy, executor_for, timed_run
from service.metrics import Metrics
from service.offsets import OffsetTracker
from service.outputs import ModelRef, dead_letter, replace_refused, result_record
from service.ports import EngineLike, ExecutorLike, SinkLike, SourceLike
from service.processors import Processor, ResultOrError, Tensors, prepare
from service.records import Decoded, InputRecord, Rejection, TopicPartition
from service.stats import Stats

_log = structlog.get_logger("microbatch.pipeline")

_INFLIGHT_POLL_S = 0.001
_LAG_REFRESH_S = 0.1
_STATE_INTERVAL_S = 1.0  # how often the state gauges (lag per partition, partitions, ...) are set


class Pipeline:
    """Owns the batcher, the size controller, the offset tracker and the stats; drives the source, the
    engine (through the executor) and the sink.

    Not thread-safe: :meth:`run` and the rebalance callbacks (which librdkafka calls from inside
    ``consume``) all happen on the thread that called :meth:`run`; the executor's thread only ever runs
    ``engine.run``. :meth:`stop` may be called from a signal handler: it only flips a flag.
    """

    def __init__(
        self,
        settings: Settings,
        source: SourceLike,
        sink: SinkLike,
        engine: EngineLike,
        processor: Processor,
        model: ModelRef,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        executor: ExecutorLike | None = None,
        metrics: Metrics | None = None,
        health: Health | None = None,
    ) -> None:
        self._settings = settings
        self._source = source
        self._sink = sink
        self._engine = engine
        self._processor = processor
        self._model = model
        self._clock = clock
        self._wall_ms = wall_ms
        batch = settings.batch
        self._sizer: BatchSizeController | FixedBatchSize = (
            BatchSizeController(
                batch.min_size, batch.max_size, batch.latency_slo_ms / 1000, batch.max_wait_ms / 1000
            )
            if batch.adaptive
            else FixedBatchSize(batch.max_size)
        )
        cost: Callable[[Any], int] | None = getattr(processor, "cost", None)
        self._has_prepare = hasattr(processor, "prepare")
        self._batcher: Batcher[Decoded] = Batcher(
            self._sizer.target,
            batch.max_wait_ms / 1000,
            clock,
            cost=(lambda d: cost(d.item)) if cost else None,
            max_cost=batch.max_tokens,
            window=batch.bucket_window,
        )
        self._executor = executor or executor_for(batch.pipeline_depth)
        self._inline = Inline()
        self._offload = OffloadPolicy()
        self._depth = max(1, batch.pipeline_depth)
        self._inflight: deque[InFlight] = deque()
        self._lag: dict[TopicPartition, int] = {}
        self._lag_total, self._lag_at = 0, float("-inf")
        self._state_at = float("-inf")
        self._assigned: set[TopicPartition] = set()
        self.metrics = metrics or Metrics()
        self.health = health or Health(
            settings.metrics.liveness_timeout_s, settings.metrics.broker_timeout_s, clock
        )
        self._busy = BusyShare()
        self._tracker = OffsetTracker()
        self.stats = Stats(clock)
        self._running = True
        self._paused = False
        self._closing = False

    # -- the loop -------------------------------------------------------------------------------------

    def run(self) -> None:
        """Process until :meth:`stop`; then finish what was consumed, flush, commit and close.

        On an unexpected error the consumer is still closed (which commits only offsets already stored,
        i.e. delivered), so the group rebalances at once instead of after a session timeout; then the
        error propagates.
        """
        self._source.subscribe(self._settings.input.topics, self)
        try:
            while self._running:
                self.health.tick()
                self._accept(self._source.consume(*self._consume_plan()))
                if self._batcher.ready() and self._batcher.room():
                    self._accept(self._source.consume(self._batcher.room(), 0))  # more to choose among
                self._dispatch()
                self._complete(self._idle_s() if len(self._inflight) >= self._depth else 0.0)
                self._acknowledge(self._sink.poll(0))
                self._apply_backpressure()
                self._publish_state()
                self._log_stats()
        except BaseException:
            self._closing = True
            self._executor.shutdown(wait=False)
            self._source.close()
            raise
        _log.info("stopping")
        self.health.stopping = True
        self._shutdown()

    def stop(self) -> None:
        """Ask the loop to finish. Safe from a signal handler: it only flips a flag (no logging, no
        locks), so it cannot deadlock with the thread it interrupted."""
        self._running = False

    def _consume_plan(self) -> tuple[int, float]:
        """How many messages to ask for, and how long consume may block.

        librdkafka's consume(n, timeout) returns only when it has n messages or the timeout expires, so:
        with no batch open, ask for ONE message (it returns as soon as one arrives, which opens the
        batch); with a batch open, ask for exactly what fills it and block no longer than its deadline.
        While a batch is computing, block at most a millisecond, to send its results soon after it ends.
        """
        cap = _INFLIGHT_POLL_S if self._inflight else float("inf")
        due = self._batcher.time_until_due()
        if due is None:
            return 1, min(self._idle_s(), cap)
        return max(1, self._batcher.max_size - len(self._batcher)), min(due, cap)

    def _idle_s(self) -> float:
        return self._settings.input.idle_poll_ms / 1000

    def _accept(self, records: list[InputRecord]) -> None:
        """Track, decode and prepare consumed records; bad ones go to the dead-letter topic at once."""
        if not records:
            return
        decoded = []
        parse, limit, track = self._processor.parse, self._settings.input.max_value_bytes, self._tracker.track
        for record in records:  # per message: keep it lean
            try:
                track((record.topic, record.partition), record.offset)
            except OffsetOrderError:
                self._rewound(record)
            outcome = decode(record, parse, limit)
            if isinstance(outcome, Rejection):
                self._reject(outcome)
            else:
                decoded.append(outcome)
        self.stats.events_in += len(records)
        self.metrics.consumed.inc(len(records))
        self.health.brokers(True)  # records just arrived from one
        if self._has_prepare:
            decoded, rejected = prepare_all(decoded, partial(prepare, self._processor))
            for rejection in rejected:
                self._reject(rejection)
        for item in decoded:
            self._batcher.add(item, item.record.received)

    def _rewound(self, record: InputRecord) -> None:
        """The partition was rewound without a rebalance (offset reset, log truncation): start its
        bookkeeping afresh; whatever is re-read is processed again (duplicates, never a loss)."""
        _log.warning(
            "partition_rewound", partition=f"{record.topic}[{record.partition}]", offset=record.offset
        )
        self._tracker.forget([record.tp])
        self._tracker.track(record.tp, record.offset)

    # -- inference ------------------------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Cut every due batch, pre-process it here and hand it to the engine, while fewer than
        MICROBATCH_BATCH__PIPELINE_DEPTH batches are in flight: to the inference thread, or inline when
        the model is so fast that a hand-off would cost more than the overlap saves (OffloadPolicy)."""
        while len(self._inflight) < self._depth and self._batcher.ready():
            batch, padding = self._batcher.take_padded()
            start = self._clock()
            try:
                feeds = self._processor.preprocess([d.item for d in batch])
            except Exception:
                self._complete(None)  # keep results in batch order
                self._emit(batch, list(self._infer(batch)), self._clock() - start, padding, start)
                continue
            prep_s = self._clock() - start
            executor = self._executor if self._offload.offload else self._inline
            future = executor.submit(timed_run, self._engine, feeds, self._clock)
            self._inflight.append(InFlight(batch, future, prep_s, padding, start))

    def _complete(self, timeout_s: float | None) -> None:
        """Finish in-flight batches in hand-off order: post-process, produce, adapt the batch size. Waits
        up to ``timeout_s`` (None: for ever) for the oldest, then takes only those already done."""
        while self._inflight:
            head = self._inflight[0]
            if not head.future.done():
                if timeout_s is not None and timeout_s <= 0:
                    return
                wait([head.future], timeout_s)
                if not head.future.done():
                    return
            self._inflight.popleft()
            start = self._clock()
            run_s: float | None = None
            try:
                outputs, run_s = head.future.result()
                self._offload.observe(run_s)
                items = [d.item for d in head.batch]
                answers = list(zip(head.batch, self._postprocess(outputs, items), strict=True))
            except Exception as exc:
                answers = list(self._split(head.batch, exc))
            service_s = head.prep_s + (run_s or 0.0) + self._clock() - start
            self._emit(head.batch, answers, service_s, head.padding, head.started, run_s)
            timeout_s = 0.0

    def _emit(
        self,
        batch: list[Decoded],
        answers: list[tuple[Decoded, ResultOrError]],
        service_s: float,
        padding: tuple[int, int] | None,
        started: float,
        run_s: float | None = None,
    ) -> None:
        """Queue one output per input, in input order; then let the batch size adapt. ``started``: when
        the batch was cut; ``run_s``: its model time, when it ran whole."""
        produced_ms = self._wall_ms()
        now = self._clock()
        topic, model, size, send = self._settings.output.topic, self._model, len(batch), self._sink.send
        event_ms = []
        for item, result in answers:  # per message: keep it lean
            record = item.record
            if isinstance(result, InvalidMessage):
                self._reject(Rejection(record, result.reason, result.detail))
                continue
            consumed_ms = produced_ms - int((now - record.received) * 1000)
            try:
                send(result_record(record, topic, model, result, size, consumed_ms, produced_ms))
            except (TypeError, ValueError) as exc:  # a processor returned something JSON cannot hold
                self._reject(Rejection(record, Reason.INVALID_OUTPUT, f"result not encodable: {exc}"))
                continue
            event_ms.append(record.timestamp_ms or consumed_ms)
        self.stats.results_out += len(event_ms)
        latencies_ms = produced_ms - np.asarray(event_ms, dtype=np.float64)
        self.stats.batch(len(batch), latencies_ms, padding)
        # The batcher hands batches over in arrival order, its oldest waiting item first.
        self.metrics.batch(
            len(batch), started - batch[0].record.received, run_s, latencies_ms / 1000, padding
        )
        busy = self._busy.observe(service_s, now)
        self._batcher.max_size = self._sizer.observe(len(batch), service_s, self._backlog(), busy).target

    def _backlog(self) -> int:
        """Messages waiting: consumed but not batched, plus the consumer lag."""
        self._refresh_lag()
        return self._lag_total + len(self._batcher)

    def _refresh_lag(self) -> None:
        """Re-read the lag per partition when the copy is over 100 ms old (the read takes the client's
        partition locks: not per batch)."""
        now = self._clock()
        if now - self._lag_at >= _LAG_REFRESH_S:
            self._lag, self._lag_at = self._source.lag(), now
            self._lag_total = sum(self._lag.values())

    def _infer(self, batch: Sequence[Decoded]) -> Iterator[tuple[Decoded, ResultOrError]]:
        """Yield (item, result) for every item, running the batch here (not on the engine thread)."""
        try:
            results = self._run([d.item for d in batch])
        except Exception as exc:
            yield from self._split(batch, exc)
            return
        yield from zip(batch, results, strict=True)

    def _split(self, batch: Sequence[Decoded], exc: Exception) -> Iterator[tuple[Decoded, ResultOrError]]:
        """A batch failed with ``exc``: split it in halves and retry, so a failure (a bad item, or running
        out of GPU memory on a big batch) costs only the items that fail when run alone; those get
        ``inference_error``. Raises EngineFailedError when the model fails on the processor's known-good
        sample as well: then the runtime is broken, not the item."""
        if len(batch) == 1:
            self._check_engine(exc)
            yield batch[0], InvalidMessage(Reason.INFERENCE_ERROR, f"{type(exc).__name__}: {exc}"[:500])
            return
        _log.warning("batch_failed_splitting", size=len(batch), error=f"{type(exc).__name__}: {exc}"[:300])
        self.metrics.splits.inc()
        half = len(batch) // 2
        yield from self._infer(batch[:half])
        yield from self._infer(batch[half:])

    def _run(self, items: list) -> list[ResultOrError]:
        return self._postprocess(self._engine.run(self._processor.preprocess(items)), items)

    def _postprocess(self, outputs: Tensors, items: list[Any]) -> list[ResultOrError]:
        results = self._processor.postprocess(outputs, items)
        if len(results) != len(items):
            raise BatchMismatchError(f"{len(results)} results for {len(items)} inputs")
        return results

    def _check_engine(self, item_error: Exception) -> None:
        try:
            self._run(prepare(self._processor, [self._processor.sample()]))
        except Exception as exc:
            raise EngineFailedError(f"the model fails on a known-good sample too: {exc}") from item_error

    def _reject(self, rejection: Rejection) -> None:
        self.stats.rejected(rejection.reason.value)
        self.metrics.dead_letters.labels(reason=rejection.reason.value).inc()
        self._sink.send(dead_letter(rejection, self._settings.dlq.topic))

    def _acknowledge(self, acked: list[InputRecord]) -> int:
        """Fold acknowledged deliveries into the watermarks and store whatever moved; send replacements
        for outputs the broker refused for good. Returns how many replacements were sent."""
        done = self._tracker.done
        for record in acked:
            done((record.topic, record.partition), record.offset)
        if acked:
            self.metrics.acknowledged.inc(len(acked))
        offsets = self._tracker.take_committable()
        if offsets:
            self._source.store(offsets)
        sent = 0
        for out, why in self._sink.take_refused():
            replacement = replace_refused(out, why, self._settings.dlq.topic)
            if replacement is None:
                _log.error("dead_letter_undeliverable", offset=out.source.offset, error=why)
            else:
                self._sink.send(replacement)
                sent += 1
        return sent

    def _apply_backpressure(self) -> None:
        """Pause every partition while too much is unacknowledged (output slow or down), resume at half.

        Paused, the loop still calls consume (so the group keeps us: no max.poll.interval.ms eviction)
        and polls the producer. Memory stays bounded by MICROBATCH_INPUT__MAX_IN_FLIGHT messages.
        """
        in_flight = self._tracker.in_flight()
        limit = self._settings.input.max_in_flight
        if self._paused and in_flight <= limit // 2:
            self._source.resume()
            self._paused = False
            _log.info("consumer_resumed", in_flight=in_flight)
        elif self._paused or in_flight >= limit:
            # Re-applied every iteration while paused: partitions assigned meanwhile start unpaused.
            self._source.pause()
            if not self._paused:
                self._paused = True
                _log.warning("consumer_paused", in_flight=in_flight, limit=limit)

    def _publish_state(self) -> None:
        """Set the state gauges about once a second."""
        now = self._clock()
        if now - self._state_at < _STATE_INTERVAL_S:
            return
        self._state_at = now
        self._refresh_lag()
        assigned = len(self._assigned)
        self.health.assigned = assigned
        self.metrics.state(
            self._batcher.max_size,
            self._tracker.in_flight(),
            assigned,
            assigned if self._paused else 0,
            self._lag,
        )

    def _log_stats(self) -> None:
        if self.stats.due(self._settings.log.stats_interval_s):
            tracker = self._tracker
            snapshot = self.stats.snapshot()
            if snapshot["padding_efficiency"] is not None:
                self.metrics.padding.set(snapshot["padding_efficiency"])
            _log.info(
                "stats",
                in_flight=tracker.in_flight(),
                stale_acks=tracker.stale_acks,
                target_batch_size=self._batcher.max_size,
                **snapshot,
            )

    # -- commits ------------------------------------------------------------------------------------

    def commit(self) -> None:
        """The one place that commits. The order is the at-least-once contract:

        1. every consumed message is processed (batches in flight finish, the open batch is cut early and
           run here) and its output queued;
        2. the producer is flushed, so the broker acknowledged (or refused) every output;
        3. acknowledgements advance the per-partition watermarks (see ``offsets``), and those are stored;
        4. the stored offsets are committed synchronously.

        An output still unacknowledged when the flush times out holds its partition's watermark back, so
        the worst case is a duplicate after restart, never a loss.
        """
        self._complete(None)
        while len(self._batcher):
            batch, padding = self._batcher.take_padded()
            start = self._clock()
            self._emit(batch, list(self._infer(batch)), self._clock() - start, padding, start)
        timeout = self._settings.output.flush_timeout_s
        if self._acknowledge(self._sink.flush(timeout)):
            self._acknowledge(self._sink.flush(timeout))  # the replacements of refused records
        if self._sink.pending():
            _log.warning("flush_incomplete", outstanding=self._sink.pending())
        start = self._clock()
        if self._source.commit():
            self.metrics.commit_time.observe(self._clock() - start)
        else:
            self.metrics.commit_failures.inc()

    def _shutdown(self) -> None:
        self.commit()
        self._executor.shutdown(wait=True)
        self._closing = True  # close() revokes once more: nothing is left to commit by then
        last = self.stats.snapshot()
        _log.info("stopped", in_flight=self._tracker.in_flight(), **last, totals=self.stats.summary())
        self._source.close()

    # -- rebalance callbacks (run inside consume) -----------------------------------------------------

    def on_assigned(self, tps: list[TopicPartition]) -> None:
        """Start the new partitions' bookkeeping. Unless back-pressure is on (then the loop pauses them),
        resume them explicitly: a partition paused before a rebalance would otherwise stay paused."""
        self._tracker.forget(tps)
        self._assigned.update(tps)
        if not self._paused:
            self._source.resume(tps)
        _log.info("partitions_assigned", partitions=_names(tps))

    def on_revoked(self, tps: list[TopicPartition]) -> None:
        """Commit exactly what was delivered before handing the partitions over."""
        if not self._closing:
            self.commit()
        self._tracker.forget(tps)
        self._assigned.difference_update(tps)
        _log.info("partitions_revoked", partitions=_names(tps))

    def on_lost(self, tps: list[TopicPartition]) -> None:
        """The group moved on without us: committing is no longer allowed. Drop the waiting items of those
        partitions (their new owner re-reads them) and let outputs already queued finish."""
        lost = set(tps)
        dropped = self._batcher.discard(lambda d: d.record.tp not in lost)
        self._complete(None)  # batches in flight finish; their outputs are duplicates at worst
        acked = self._sink.flush(self._settings.output.flush_timeout_s)
        self._tracker.forget(tps)  # first, so their acks store nothing
        self._assigned.difference_update(tps)
        self._acknowledge(acked)
        _log.warning("partitions_lost", partitions=_names(tps), dropped=dropped)


def _names(tps: list[TopicPartition]) -> list[str]:
    return [f"{t}[{p}]" for t, p in tps]
