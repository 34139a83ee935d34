"""Running counters for the periodic stats line. Pure: the clock is injected, nothing is logged here."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Stats:
    """Counts since the last :meth:`snapshot`; latencies are end-to-end milliseconds (event timestamp to
    result produced), recorded per batch so the hot path does no per-message work here."""

    clock: Callable[[], float] = time.monotonic
    events_in: int = 0
    results_out: int = 0
    dead_letters: int = 0
    batches: int = 0
    batched_items: int = 0
    dlq_reasons: Counter[str] = field(default_factory=Counter)
    real_cost: int = 0
    padded_cost: int = 0
    rows_scored: int = 0
    rows_incomplete: int = 0
    assembling: bool = False
    """Rows have closed: the stats line reports rows from then on."""
    sizes: Counter[int] = field(default_factory=Counter)
    """Batches of each size since start."""
    totals: Counter[str] = field(default_factory=Counter)
    """Everything counted since start (the ``stopped`` line reports it)."""
    _latencies: list[np.ndarray] = field(default_factory=list)
    _since: float = 0.0

    def __post_init__(self) -> None:
        self._since = self.clock()

    def batch(self, size: int, latencies_ms: np.ndarray, padding: tuple[int, int] | None = None) -> None:
        """One finished batch: its size, its results' latencies and, for items with a cost, its
        (real, padded) cost."""
        self.batches += 1
        self.batched_items += size
        self.sizes[size] += 1
        self._latencies.append(latencies_ms)
        if padding is not None:
            self.real_cost += padding[0]
            self.padded_cost += padding[1]

    def rows(self, scored: int, incomplete: int) -> None:
        """Assembled rows that closed."""
        self.assembling = True
        self.rows_scored += scored
        self.rows_incomplete += incomplete

    def rejected(self, reason: str) -> None:
        self.dead_letters += 1
        self.dlq_reasons[reason] += 1

    def due(self, interval_s: float) -> bool:
        return self.clock() - self._since >= interval_s

    def snapshot(self) -> dict[str, Any]:
        """Rates and percentiles since the last snapshot; resets the window."""
        now = self.clock()
        elapsed = max(now - self._since, 1e-9)
        lat = np.concatenate(self._latencies) if self._latencies else np.empty(0)
        p50, p99 = (np.percentile(lat, [50, 99]).round(1).tolist()) if lat.size else (None, None)
        snap = {
            "events_per_s": round(self.events_in / elapsed, 1),
            "results_per_s": round(self.results_out / elapsed, 1),
            "batches_per_s": round(self.batches / elapsed, 2),
            "mean_batch_size": _ratio(self.batched_items, self.batches, 2),
            "latency_p50_ms": p50,
            "latency_p99_ms": p99,
            "padding_efficiency": _ratio(self.real_cost, self.padded_cost, 3),
            "dlq": self.dead_letters,
            "dlq_reasons": dict(self.dlq_reasons),
        }
        if self.assembling:
            snap["rows"] = self.rows_scored
            snap["rows_incomplete"] = self.rows_incomplete
        self.totals.update(
            events_in=self.events_in,
            results_out=self.results_out,
            dead_letters=self.dead_letters,
            batches=self.batches,
            batched_items=self.batched_items,
            real_cost=self.real_cost,
            padded_cost=self.padded_cost,
            rows_scored=self.rows_scored,
            rows_incomplete=self.rows_incomplete,
        )
        self.events_in = self.results_out = self.dead_letters = self.batches = self.batched_items = 0
        self.real_cost = self.padded_cost = self.rows_scored = self.rows_incomplete = 0
        self.dlq_reasons.clear()
        self._latencies.clear()
        self._since = now
        return snap

    def summary(self) -> dict[str, Any]:
        """Totals since start (call after the last :meth:`snapshot`), for the ``stopped`` line."""
        t = self.totals
        return {
            "events_in": t["events_in"],
            "results_out": t["results_out"],
            "dead_letters": t["dead_letters"],
            "batches": t["batches"],
            "mean_batch_size": _ratio(t["batched_items"], t["batches"], 2),
            "batch_sizes": dict(sorted(self.sizes.items())),
            "padding_efficiency": _ratio(t["real_cost"], t["padded_cost"], 3),
            **(
                {"rows": t["rows_scored"], "rows_incomplete": t["rows_incomplete"]} if self.assembling else {}
            ),
        }


def _ratio(num: float, den: float, digits: int) -> float | None:
    return round(num / den, digits) if den else None
