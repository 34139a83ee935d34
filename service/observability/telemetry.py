"""The one thing the loop reports to: every event goes to the stats line, the Prometheus metrics and the
health probes from one call.

This class is responsible for: counting consumed messages, dead letters, batches, acknowledgements,
splits and commits, in both the periodic stats line and the metrics; telling the probes that the loop came
round and that a broker answered; setting the state gauges about once a second; and logging the stats line
every ``MICROBATCH_LOG__STATS_INTERVAL_S``. Each call is per consumed group, per batch, per commit or per
dead letter, never per healthy message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import structlog

from service.errors import Reason
from service.flow.fields import FIRST_EVENTS
from service.flow.records import Ack, LoopState
from service.observability.health import Health
from service.observability.metrics import Metrics
from service.observability.stats import Stats

_log = structlog.get_logger("microbatch.pipeline")

_STATE_INTERVAL_S = 1.0


class Telemetry:
    """The loop's ``TelemetryLike``. Not thread-safe: fed by the loop's thread (the probes and the scrapes
    read from their own)."""

    def __init__(
        self,
        metrics: Metrics,
        health: Health,
        stats_interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metrics = metrics
        self.health = health
        self.stats = Stats(clock)
        self._stats_interval_s = stats_interval_s
        self._clock = clock
        self._state_at = float("-inf")

    def loop(self) -> None:
        """The loop came round (liveness)."""
        self.health.tick()

    def consumed(self, count: int) -> None:
        """``count`` records arrived, so a broker is reachable."""
        self.stats.events_in += count
        self.metrics.consumed.inc(count)
        self.health.brokers(True)

    def rejected(self, reason: Reason) -> None:
        """One message went to the dead-letter topic."""
        self.stats.rejected(reason.value)
        self.metrics.dead_letters.labels(reason=reason.value).inc()

    def batch(
        self,
        size: int,
        queue_wait_s: float,
        run_s: float | None,
        latencies_ms: np.ndarray,
        padding: tuple[int, int] | None,
    ) -> None:
        """One finished batch of ``size`` items whose results (one latency each) were handed to the
        producer; see :meth:`Metrics.batch` for the rest."""
        self.stats.results_out += latencies_ms.size
        self.stats.batch(size, latencies_ms, padding)
        self.metrics.batch(size, queue_wait_s, run_s, latencies_ms, padding)

    def acknowledged(self, count: int) -> None:
        self.metrics.acknowledged.inc(count)

    def points(self, used: int, ignored: int, late: int, empty: int) -> None:
        """Per consumed group, when rows are assembled: what its data points did (``service.assemble``)."""
        points = self.metrics.points
        for outcome, count in (("used", used), ("ignored", ignored), ("late", late), ("empty", empty)):
            if count:
                points.labels(outcome=outcome).inc(count)

    def rows(self, complete: int, filled: int, incomplete: int) -> None:
        """Rows that closed: scored with every feature, scored with some filled, or incomplete."""
        self.stats.rows(complete + filled, incomplete)
        rows = self.metrics.rows
        for outcome, count in (("complete", complete), ("filled", filled), ("incomplete", incomplete)):
            if count:
                rows.labels(outcome=outcome).inc(count)

    def split(self) -> None:
        self.metrics.splits.inc()

    def field_never_seen(self, field: str, closest: list[str]) -> None:
        """A field the processor reads that none of the first events carried: every event lacking it is a
        dead letter, so say so loudly, once, with the names the events did carry."""
        self.metrics.fields_never_seen.labels(field=field).inc()
        _log.error(
            "field_never_seen",
            field=field,
            events=FIRST_EVENTS,
            closest=closest,
            hint="events without it are dead-lettered as invalid_event; check the field's setting",
        )

    def committed(self, ok: bool, seconds: float) -> None:
        """A synchronous commit (the auto-commits reach the metrics from the consumer itself)."""
        self.metrics.committed(ok, seconds)

    def transaction(self, committed: bool, seconds: float, fenced: bool = False) -> None:
        """Exactly-once: a transaction committed or aborted."""
        self.metrics.transaction(committed, seconds, fenced)

    def acquired(self, delivery_counts: Sequence[int | None]) -> None:
        """Share groups: records acquired, each with its delivery count."""
        self.metrics.share_acquired(delivery_counts)

    def answered(self, ack: Ack, count: int) -> None:
        """Share groups: records answered (accepted, released, rejected)."""
        self.metrics.share_answered(ack, count)

    def periodic(self, state: Callable[[], LoopState]) -> None:
        """The state gauges about once a second, the stats line when it is due; ``state`` is asked only
        then."""
        now = self._clock()
        stats_due = self.stats.due(self._stats_interval_s)
        if now - self._state_at < _STATE_INTERVAL_S and not stats_due:
            return
        current = state()
        if now - self._state_at >= _STATE_INTERVAL_S:
            self._state_at = now
            self.health.assigned = current.assigned
            self.metrics.state(
                current.target_size, current.in_flight, current.assigned, current.paused, current.lag
            )
            self.metrics.open_rows.set(current.open_rows)
        if stats_due:
            snapshot = self.stats.snapshot()
            if snapshot["padding_efficiency"] is not None:
                self.metrics.padding.set(snapshot["padding_efficiency"])
            _log.info(
                "stats",
                in_flight=current.in_flight,
                stale_acks=current.stale_acks,
                target_batch_size=current.target_size,
                **snapshot,
            )

    def stopping(self) -> None:
        """Shutting down: no longer ready."""
        self.health.stopping = True

    def stopped(self, in_flight: int) -> None:
        """The last line: the final window and the totals since start."""
        last = self.stats.snapshot()
        _log.info("stopped", in_flight=in_flight, **last, totals=self.stats.summary())
