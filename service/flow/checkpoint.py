"""The checkpoint: the acknowledgement path of at-least-once delivery, in one place.

This class is responsible for: tracking every consumed offset until all of its outputs (one per item of
its message) are acknowledged; taking the sink's acknowledgements (the only code that does) and storing
each partition's watermark as they arrive (librdkafka's auto-commit sends what is stored); sending a
replacement for an output the broker refused for good; the flush-then-commit half of the commit contract
(:meth:`Checkpoint.commit`); and the bookkeeping of partitions assigned, revoked and lost.

It implements ``ports.Acknowledgements``, as the exactly-once strategy (``flow.transactions``) does too;
the loop does not know which it drives. The tracking both share is ``flow.tracking.Tracked``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog

from service.flow.encode import resend_refused
from service.flow.ports import SinkLike, SourceLike, TelemetryLike
from service.flow.records import InputRecord, TopicPartition
from service.flow.tracking import Tracked

_log = structlog.get_logger("microbatch.checkpoint")


class Checkpoint(Tracked):
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
        super().__init__()

    def poll(self) -> None:
        """Take the deliveries the sink reports now (without waiting): :meth:`acknowledge` them."""
        self.acknowledge(self._sink.poll(0))

    def acknowledge(self, acked: Sequence[InputRecord]) -> int:
        """Fold acknowledged deliveries into the watermarks and store whatever moved; send replacements
        for outputs the broker refused for good. Returns how many replacements were sent."""
        offsets = self._done(acked)
        if acked:
            self._telemetry.acknowledged(len(acked))
        if offsets:
            self._source.store(offsets)
        return resend_refused(self._sink, self._dlq_topic)

    def commit(self) -> bool:
        """Steps 2 to 4 of the commit contract (``Pipeline.commit`` does step 1, processing everything
        consumed): flush the producer, so the broker acknowledged (or refused) every output; fold the
        acknowledgements into the watermarks and store them; commit the stored offsets synchronously.

        An output still unacknowledged when the flush times out holds its partition's watermark back, so
        the worst case is a duplicate after restart, never a loss. Returns whether the broker took the
        commit."""
        return flushed_commit(
            self._sink, self.acknowledge, self._source, self._flush_timeout_s, self._telemetry, self._clock
        )

    def lose(self, tps: Sequence[TopicPartition]) -> None:
        """Partitions the group took away without a handover: committing them is no longer allowed. The
        outputs already queued finish, but their acknowledgements store nothing."""
        acked = self._sink.flush(self._flush_timeout_s)
        self.revoke(tps)  # first, so their acks store nothing
        self.acknowledge(acked)


def flushed_commit(
    sink: SinkLike,
    acknowledge: Callable[[Sequence[InputRecord]], int],
    source: SourceLike,
    flush_timeout_s: float,
    telemetry: TelemetryLike,
    clock: Callable[[], float],
) -> bool:
    """Flush ``sink`` and ``acknowledge`` what it reports (which returns how many replacements of refused
    records it sent: those are flushed too), then ``source.commit()``, timed. Returns whether the broker
    took the commit. Shared by the strategies whose durable step is the consumer's own commit."""
    if acknowledge(sink.flush(flush_timeout_s)):
        acknowledge(sink.flush(flush_timeout_s))  # the replacements of refused records
    if sink.pending():
        _log.warning("flush_incomplete", outstanding=sink.pending())
    start = clock()
    ok = source.commit()
    telemetry.committed(ok, clock() - start)
    return ok
