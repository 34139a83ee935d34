"""The adaptive batch size: AIMD within [min_size, max_size], driven by backlog and batch service time.

Pure (no clock, no I/O): the pipeline reports every finished batch and reads back the target. The rules,
applied per batch, in order:

1. **Over budget -> multiplicative decrease.** A batch whose service time (pre-process + inference +
   post-process) exceeded the budget halves the target. The budget is what the latency SLO leaves for
   one batch: a result waits at most ``max_wait`` to be batched, then for the batch ahead of it and its
   own, so ``budget = (slo - max_wait) / 2``.
2. **Backlog -> additive increase.** A full batch while at least another full batch is waiting (consumer
   lag, counted by the caller) means demand exceeds what batches of this size serve: grow by one.
3. **No backlog -> additive decrease.** With nothing waiting, a smaller target cuts batches sooner, which
   is lower latency at no throughput cost: shrink by one.

Under steady load the target settles where batches just keep up (it oscillates by one around that size,
as AIMD does); a burst grows it one step per batch, up to ``max_size``; a slow batch halves it at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Decision:
    """What one observation did: the new target and the rule that set it (for logs and tests)."""

    target: int
    rule: str  # "over_budget" | "backlog" | "idle" | "steady"


class BatchSizeController:
    """AIMD on the target batch size. Not thread-safe: the pipeline loop owns it."""

    def __init__(
        self, min_size: int, max_size: int, slo_s: float, max_wait_s: float, start: int | None = None
    ) -> None:
        if not 1 <= min_size <= max_size:
            raise ValueError(f"need 1 <= min_size ({min_size}) <= max_size ({max_size})")
        if slo_s <= max_wait_s:
            raise ValueError(f"the latency SLO ({slo_s}s) must exceed the batch window ({max_wait_s}s)")
        self.min_size = min_size
        self.max_size = max_size
        self.budget_s = (slo_s - max_wait_s) / 2
        self.target = min(max(start if start is not None else min_size, min_size), max_size)

    def observe(self, size: int, service_s: float, backlog: int) -> Decision:
        """Fold in one finished batch of ``size`` items that took ``service_s`` seconds, with ``backlog``
        messages waiting behind it; return the new target."""
        if service_s > self.budget_s:
            self.target = max(self.min_size, math.floor(self.target / 2))
            return Decision(self.target, "over_budget")
        if size >= self.target and backlog >= self.target:
            if self.target < self.max_size:
                self.target += 1
            return Decision(self.target, "backlog")
        if backlog == 0:
            if self.target > self.min_size:
                self.target -= 1
            return Decision(self.target, "idle")
        return Decision(self.target, "steady")


class FixedBatchSize:
    """The controller's stand-in when adaptive batching is off: the target is always ``max_size``."""

    def __init__(self, max_size: int) -> None:
        self.target = max_size

    def observe(self, size: int, service_s: float, backlog: int) -> Decision:
        return Decision(self.target, "fixed")
