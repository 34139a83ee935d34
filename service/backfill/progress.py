"""A backfill's progress, where a person or a machine can watch it: a progress bar on a terminal (events
read of the range, rate, ETA), one JSON ``backfill_progress`` log line every ``interval_s`` otherwise, and
two gauges in the metrics registry, so that a scrape shows it too.

"Read" counts offsets of the range the loop has consumed; the results follow within a batch or two, and
the final summary counts what was produced.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO, Any

import structlog
from prometheus_client import CollectorRegistry, Gauge

from service.backfill.ranges import Ranges
from service.observability.metrics import PREFIX

_log = structlog.get_logger("microbatch.backfill")


class Progress:
    """Called with the ranges after every consume; draws or logs at most every ``interval_s`` (a bar:
    every 0.2 s). :meth:`close` draws the end."""

    def __init__(
        self,
        total: int,
        registry: CollectorRegistry,
        *,
        interval_s: float = 5.0,
        stream: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._clock = clock
        self._started = clock()
        self._bar: Any = None
        if self._stream.isatty():
            from tqdm import tqdm

            # Redrawn when this says (every 0.2 s), not on tqdm's own clock.
            self._bar = tqdm(
                total=total, desc="backfill", unit="ev", unit_scale=True, file=self._stream, mininterval=0
            )
            interval_s = 0.2
        self._interval_s = interval_s
        self._next = self._started + interval_s
        self._total = Gauge(
            f"{PREFIX}_backfill_range_offsets", "Offsets in the backfill's range.", registry=registry
        )
        self._read = Gauge(
            f"{PREFIX}_backfill_read_offsets", "Offsets of the range read so far.", registry=registry
        )
        self._total.set(total)

    def __call__(self, ranges: Ranges) -> None:
        now = self._clock()
        if now < self._next:
            return
        self._next = now + self._interval_s
        self._show(ranges.read, ranges.total, now)

    def _show(self, read: int, total: int, now: float) -> None:
        self._read.set(read)
        if self._bar is not None:
            self._bar.update(read - self._bar.n)
            return
        elapsed = max(now - self._started, 1e-9)
        rate = read / elapsed
        _log.info(
            "backfill_progress",
            read=read,
            total=total,
            percent=round(100 * read / total, 1) if total else 100.0,
            events_per_s=round(rate),
            eta_s=round((total - read) / rate, 1) if rate > 0 else None,
        )

    def close(self, ranges: Ranges) -> None:
        self._show(ranges.read, ranges.total, self._clock())
        if self._bar is not None:
            self._bar.close()
