"""The service loop: consume -> decode -> batch -> infer -> produce -> store offsets.

Everything with I/O is injected behind a small Protocol, so this file is plain control flow that unit
tests drive with fakes and a fake clock, and integration tests drive with the real clients.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import structlog

from service.batcher import Batcher
from service.config import Settings
from service.decode import decode
from service.errors import BatchMismatchError, EngineFailedError, InvalidMessage, OffsetOrderError, Reason
from service.offsets import OffsetTracker
from service.outputs import ModelRef, dead_letter, replace_refused, result_record
from service.ports import EngineLike, SinkLike, SourceLike
from service.processors import Processor, ResultOrError
from service.records import Decoded, InputRecord, Rejection, TopicPartition
from service.stats import Stats

_log = structlog.get_logger("microbatch.pipeline")


class Pipeline:
    """Owns the batcher, the offset tracker and the stats; drives the source, engine and sink.

    Not thread-safe: :meth:`run` and the rebalance callbacks (which librdkafka calls from inside
    ``consume``) all happen on the thread that called :meth:`run`. :meth:`stop` may be called from a
    signal handler: it only flips a flag.
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
        self._batcher: Batcher[Decoded] = Batcher(batch.max_size, batch.max_wait_ms / 1000, clock)
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
                for record in self._source.consume(*self._consume_plan()):
                    self._accept(record)
                while self._batcher.ready():
                    self._process(self._batcher.take())
                self._acknowledge(self._sink.poll(0))
                self._apply_backpressure()
                self._log_stats()
        except BaseException:
            self._closing = True
            self._source.close()
            raise
        _log.info("stopping")
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
        """
        due = self._batcher.time_until_due()
        if due is None:
            return 1, self._settings.input.idle_poll_ms / 1000
        return self._batcher.max_size - len(self._batcher), due

    def _accept(self, record: InputRecord) -> None:
        try:
            self._tracker.track(record.tp, record.offset)
        except OffsetOrderError:
            # The partition was rewound without a rebalance (offset reset, log truncation): start its
            # bookkeeping afresh; whatever is re-read is processed again (duplicates, never a loss).
            _log.warning(
                "partition_rewound", partition=f"{record.topic}[{record.partition}]", offset=record.offset
            )
            self._tracker.forget([record.tp])
            self._tracker.track(record.tp, record.offset)
        self.stats.events_in += 1
        outcome = decode(record, self._processor.parse, self._settings.input.max_value_bytes)
        if isinstance(outcome, Rejection):
            self._reject(outcome)
        else:
            self._batcher.add(outcome, record.received)

    def _process(self, batch: list[Decoded]) -> None:
        """Infer one batch and queue one output per input, in input order."""
        answers = list(self._infer(batch))
        produced_ms = self._wall_ms()
        now = self._clock()
        topic = self._settings.output.topic
        event_ms = []
        for item, result in answers:
            record = item.record
            if isinstance(result, InvalidMessage):
                self._reject(Rejection(record, result.reason, result.detail))
                continue
            consumed_ms = produced_ms - int((now - record.received) * 1000)
            try:
                out = result_record(record, topic, self._model, result, len(batch), consumed_ms, produced_ms)
            except (TypeError, ValueError) as exc:  # a processor returned something JSON cannot hold
                self._reject(Rejection(record, Reason.INVALID_OUTPUT, f"result not encodable: {exc}"))
                continue
            self._sink.send(out)
            event_ms.append(record.timestamp_ms or consumed_ms)
        self.stats.results_out += len(event_ms)
        self.stats.batch(len(batch), produced_ms - np.asarray(event_ms, dtype=np.float64))

    def _infer(self, batch: Sequence[Decoded]) -> Iterator[tuple[Decoded, ResultOrError]]:
        """Yield (item, result) for every item. A batch that fails is split in halves and retried, so a
        failure (a bad item, or running out of GPU memory on a big batch) costs only the items that fail
        when run alone; those get ``inference_error``. Raises EngineFailedError when the model fails on
        the processor's known-good sample as well: then the runtime is broken, not the item."""
        try:
            results = self._run([d.item for d in batch])
        except Exception as exc:
            if len(batch) == 1:
                self._check_engine(exc)
                failure = InvalidMessage(Reason.INFERENCE_ERROR, f"{type(exc).__name__}: {exc}"[:500])
                yield batch[0], failure
                return
            _log.warning(
                "batch_failed_splitting", size=len(batch), error=f"{type(exc).__name__}: {exc}"[:300]
            )
            half = len(batch) // 2
            yield from self._infer(batch[:half])
            yield from self._infer(batch[half:])
            return
        yield from zip(batch, results, strict=True)

    def _run(self, items: list) -> list[ResultOrError]:
        results = self._processor.postprocess(self._engine.run(self._processor.preprocess(items)), len(items))
        if len(results) != len(items):
            raise BatchMismatchError(f"{len(results)} results for {len(items)} inputs")
        return results

    def _check_engine(self, item_error: Exception) -> None:
        try:
            self._run([self._processor.sample()])
        except Exception as exc:
            raise EngineFailedError(f"the model fails on a known-good sample too: {exc}") from item_error

    def _reject(self, rejection: Rejection) -> None:
        self.stats.rejected(rejection.reason.value)
        self._sink.send(dead_letter(rejection, self._settings.dlq.topic))

    def _acknowledge(self, acked: list[InputRecord]) -> int:
        """Fold acknowledged deliveries into the watermarks and store whatever moved; send replacements
        for outputs the broker refused for good. Returns how many replacements were sent."""
        for record in acked:
            self._tracker.done(record.tp, record.offset)
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

    def _log_stats(self) -> None:
        if self.stats.due(self._settings.log.stats_interval_s):
            tracker = self._tracker
            _log.info(
                "stats", in_flight=tracker.in_flight(), stale_acks=tracker.stale_acks, **self.stats.snapshot()
            )

    # -- commits ------------------------------------------------------------------------------------

    def commit(self) -> None:
        """The one place that commits. The order is the at-least-once contract:

        1. every consumed message is processed (the open batch is cut early) and its output queued;
        2. the producer is flushed, so the broker acknowledged (or refused) every output;
        3. acknowledgements advance the per-partition watermarks (see ``offsets``), and those are stored;
        4. the stored offsets are committed synchronously.

        An output still unacknowledged when the flush times out holds its partition's watermark back, so
        the worst case is a duplicate after restart, never a loss.
        """
        for batch in self._batcher.drain():
            self._process(batch)
        timeout = self._settings.output.flush_timeout_s
        if self._acknowledge(self._sink.flush(timeout)):
            self._acknowledge(self._sink.flush(timeout))  # the replacements of refused records
        if self._sink.pending():
            _log.warning("flush_incomplete", outstanding=self._sink.pending())
        self._source.commit()

    def _shutdown(self) -> None:
        self.commit()
        self._closing = True  # close() revokes once more: nothing is left to commit by then
        _log.info("stopped", in_flight=self._tracker.in_flight(), **self.stats.snapshot())
        self._source.close()

    # -- rebalance callbacks (run inside consume) -----------------------------------------------------

    def on_assigned(self, tps: list[TopicPartition]) -> None:
        """Start the new partitions' bookkeeping. Unless back-pressure is on (then the loop pauses them),
        resume them explicitly: a partition paused before a rebalance would otherwise stay paused."""
        self._tracker.forget(tps)
        if not self._paused:
            self._source.resume(tps)
        _log.info("partitions_assigned", partitions=_names(tps))

    def on_revoked(self, tps: list[TopicPartition]) -> None:
        """Commit exactly what was delivered before handing the partitions over."""
        if not self._closing:
            self.commit()
        self._tracker.forget(tps)
        _log.info("partitions_revoked", partitions=_names(tps))

    def on_lost(self, tps: list[TopicPartition]) -> None:
        """The group moved on without us: committing is no longer allowed. Drop the waiting items of those
        partitions (their new owner re-reads them) and let outputs already queued finish."""
        lost = set(tps)
        dropped = self._batcher.discard(lambda d: d.record.tp not in lost)
        acked = self._sink.flush(self._settings.output.flush_timeout_s)
        self._tracker.forget(tps)  # first, so their acks store nothing
        self._acknowledge(acked)
        _log.warning("partitions_lost", partitions=_names(tps), dropped=dropped)


def _names(tps: list[TopicPartition]) -> list[str]:
    return [f"{t}[{p}]" for t, p in tps]
