"""The batch size, decided in one place: :class:`BatchPolicy`, which the loop asks for the target the
batcher cuts at and whether an idle loop may cut a batch early, and tells of every finished batch and of a
batch that ran out of memory. Inside it, the adaptive controller: AIMD within [min_size, max_size], driven
by service time, load and backlog, and a drain regime up to ``drain_max`` while a backlog is late.

Pure (no I/O; :class:`BatchPolicy` takes an injected clock). The controller's rules, applied per batch, in
order:

1. **Over budget -> multiplicative decrease.** A batch whose service time (pre-process + inference +
   post-process) exceeded the budget halves the target. The budget is what the latency SLO leaves for
   one batch: a result waits at most ``max_wait`` to be batched, then for the batch ahead of it and its
   own, so ``budget = (slo - max_wait) / 2``.
2. **Backlog or busy -> additive increase.** Grow by one after a full batch while at least another full
   batch is waiting (consumer lag, counted by the caller): demand exceeds what batches of this size
   serve. Grow too while the loop is busy more than ``busy_high`` of the time, before a backlog forms:
   every batch has a fixed cost, so small batches at a high load are what makes a queue.
   **Past** ``max_size`` **while a batch is cheap** (the stretch): a full batch that found another
   waiting and took at most ``cheap_s`` (a tenth of the window) grows the target past ``max_size`` too,
   by an eighth (at least one), up to ``drain_max``. Such a batch adds next to nothing to anyone's
   latency, and what the loop pays per batch (Kafka calls, the model call, telemetry) is then most of its
   cost, so a larger batch is what lets it keep up: a transport-bound model (``metrics-anomaly``) settles
   at the size that keeps up, where ``max_size`` would fall behind until the backlog is late. A batch
   that costs more than ``cheap_s`` (``log-classifier``) stays within ``max_size``, where larger batches
   only add latency. A stretched target shrinks by the same eighth at
   every full batch that finds less than a full batch waiting, so under steady load it hovers around the
   smallest size that keeps up, and it drops back to ``max_size`` at the first batch the window cut
   before it was full: the load is gone, and a stretched target would make light traffic wait the whole
   window.
3. **Idle -> additive decrease.** With nothing waiting and the loop busy less than ``busy_low`` of the
   time, shrink by one: a smaller target cuts batches sooner, which is lower latency at no throughput cost.
   Not with natural batching (``natural``): an idle loop cuts batches as soon as nothing more is fetched
   (``service/flow/batcher.py``), so a smaller target would only split what one fetch brought and leave
   its tail waiting for the next; the target then only bounds a batch.

"Busy" is the share of wall time spent serving batches (a moving average the caller measures). Under
steady load the target settles where batches keep up with room to spare (it oscillates by one around
that size, as AIMD does); a burst grows it one step per batch, up to ``max_size``; a slow batch halves it.

**The drain regime** (between rules 1 and 2). A backlog larger than what the loop clears within the
latency SLO at its current rate (``backlog > rate x slo``, ``rate`` the items per second it served lately)
means its events are late already: latency is lost, and only throughput can win it back. That is the
offline regime, so the target grows past ``max_size``, doubling per batch, up to ``drain_max`` (the
model's throughput knee, capped by memory: see ``service/engine/drain.py``). It stays there while at
least a batch is waiting, and drops back to ``max_size`` (from which rules 2 and 3 go on) at the first
batch that finds less than one target's worth waiting. Only a late backlog enters it: traffic that
``max_size`` batches only just keep up with stays in the stream regime, because for a model whose batch
time grows with its size larger batches there add latency and little throughput. A drain batch over budget
halves the target and lowers the drain's ceiling to the halved size until the drain ends, so the drain
never re-grows into sizes the SLO cannot afford.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from service.config import BatchSettings


@dataclass(frozen=True, slots=True)
class Decision:
    """What one observation did: the new target and the rule that set it (for logs and tests)."""

    target: int
    rule: str
    """``over_budget``, ``drain``, ``drained``, ``backlog``, ``stretch``, ``unstretch``, ``busy``, ``idle``,
    ``steady`` or ``fixed``."""


def batch_budget_s(slo_s: float, max_wait_s: float) -> float:
    """What the latency SLO leaves for one batch: a result waits at most ``max_wait_s`` to be batched,
    then for the batch ahead of it and its own."""
    return (slo_s - max_wait_s) / 2


class BatchSizeController:
    """AIMD on the target batch size. Not thread-safe: the pipeline loop owns it."""

    def __init__(
        self,
        min_size: int,
        max_size: int,
        slo_s: float,
        max_wait_s: float,
        start: int | None = None,
        busy_low: float = 0.5,
        busy_high: float = 0.7,
        drain_max: int | None = None,
        natural: bool = False,
    ) -> None:
        if not 1 <= min_size <= max_size:
            raise ValueError(f"need 1 <= min_size ({min_size}) <= max_size ({max_size})")
        if slo_s <= max_wait_s:
            raise ValueError(f"the latency SLO ({slo_s}s) must exceed the batch window ({max_wait_s}s)")
        if drain_max is not None and drain_max < max_size:
            raise ValueError(f"need drain_max ({drain_max}) >= max_size ({max_size})")
        self.min_size = min_size
        self.max_size = max_size
        self.drain_max = drain_max or max_size
        self.slo_s = slo_s
        self.budget_s = batch_budget_s(slo_s, max_wait_s)
        self.cheap_s = max_wait_s / 10  # a batch this fast may stretch past max_size (rule 2)
        self.target = min(max(start if start is not None else min_size, min_size), max_size)
        self.busy_low, self.busy_high = busy_low, busy_high
        self.natural = natural  # natural batching: idle does not shrink the target (rule 3)
        self.draining = False
        self._ceiling = self.drain_max  # lowered by a drain batch over budget, until the drain ends

    def observe(
        self, size: int, service_s: float, backlog: int, busy: float = 0.0, rate: float = 0.0
    ) -> Decision:
        """Fold in one finished batch of ``size`` items that took ``service_s`` seconds, with ``backlog``
        messages waiting behind it, the loop ``busy`` (0..1) of the time and serving ``rate`` items per
        second lately (0: not known yet); return the new target."""
        if service_s > self.budget_s:
            self.target = max(self.min_size, math.floor(self.target / 2))
            if self.draining:
                self._ceiling = self.target
            return Decision(self.target, "over_budget")
        if self.draining:
            if backlog < self.target:
                return self._drained()
            return self._drain()
        if self.drain_max > self.max_size and rate > 0 and backlog > rate * self.slo_s:
            self.draining = True
            return self._drain()
        if self.target > self.max_size and size < self.target:
            # Cut by the window before it filled: the load no longer needs the stretch. (With batches
            # handed to an inference thread, one cut before the target grew looks the same; it only
            # costs a regrowth.)
            self.target = self.max_size
            return Decision(self.target, "unstretch")
        if size >= self.target and backlog >= self.target:
            if self.target >= self.max_size and service_s <= self.cheap_s:
                return self._grow("stretch", self.drain_max, self._eighth())
            return self._grow("backlog")
        if self.target > self.max_size and backlog < self.target:
            self.target = max(self.max_size, self.target - self._eighth())
            return Decision(self.target, "unstretch")
        if busy > self.busy_high:
            return self._grow("busy")
        if backlog == 0 and busy < self.busy_low:
            if self.target > self.min_size and not self.natural:
                self.target -= 1
            return Decision(self.target, "idle")
        return Decision(self.target, "steady")

    @property
    def stretched(self) -> bool:
        """The target is past ``max_size`` (the stretch or the drain regime)."""
        return self.target > self.max_size

    def limit(self, cap: int) -> None:
        """Go on from ``cap`` (a batch size that fit in memory): once the cap is lifted, the target grows
        back step by step instead of jumping back to the size that did not fit."""
        self.target = min(self.target, cap)

    def _drain(self) -> Decision:
        self.target = min(self._ceiling, max(self.target * 2, self.max_size))
        return Decision(self.target, "drain")

    def _drained(self) -> Decision:
        self.draining = False
        self._ceiling = self.drain_max
        self.target = min(self.target, self.max_size)
        return Decision(self.target, "drained")

    def _eighth(self) -> int:
        """The stretch's step either way: an eighth of the target, at least one."""
        return max(1, self.target // 8)

    def _grow(self, rule: str, top: int | None = None, step: int = 1) -> Decision:
        self.target = max(self.target, min(self.target + step, top or self.max_size))
        return Decision(self.target, rule)


class FixedBatchSize:
    """The controller's stand-in when adaptive batching is off: the target is always ``max_size``."""

    stretched = False

    def __init__(self, max_size: int) -> None:
        self.target = max_size

    def observe(
        self, size: int, service_s: float, backlog: int, busy: float = 0.0, rate: float = 0.0
    ) -> Decision:
        return Decision(self.target, "fixed")

    def limit(self, cap: int) -> None:
        """A fixed size does not move: the policy applies a cap itself while it lasts."""


class BusyShare:
    """How busy the loop is and how fast it serves, from the batches it finishes: the share of wall time
    spent serving them (a moving average of each batch's service time over the time since the previous
    batch finished, capped at 1) and the items per second served (a moving average too; 0 until two
    batches finished). Pure: the caller passes the clock reading."""

    def __init__(self, weight: float = 0.2) -> None:
        self.share = 0.0
        self.rate = 0.0
        self._last: float | None = None
        self._weight = weight

    def observe(self, service_s: float, now: float, size: int = 0) -> float:
        """Fold in a batch of ``size`` items that finished at ``now`` after ``service_s`` seconds of work;
        return the share."""
        if self._last is not None:
            interval = now - self._last
            sample = 1.0 if interval <= service_s else service_s / interval
            self.share += self._weight * (sample - self.share)
            # Batches finished in the same loop round are apart by nothing: their own service time bounds
            # the rate instead, so one such pair cannot claim an unbounded rate.
            served = size / max(interval, service_s, 1e-4)
            self.rate = served if not self.rate else self.rate + self._weight * (served - self.rate)
        self._last = now
        return self.share


OUT_OF_MEMORY_HOLD_S = 60.0
"""How long a batch that ran out of memory holds the batch size at half its size."""


class BatchPolicy:
    """The one owner of the batch size. The loop asks it for :attr:`target` (the size the batcher cuts
    at: the controller's, held under a cap for a while after a batch ran out of memory) and whether an
    idle loop may cut a batch early (:meth:`may_cut_early`); it tells it of every finished batch
    (:meth:`observe`: service time, backlog, and how busy the loop is and how fast it serves, measured
    here on ``clock`` with :class:`BusyShare`) and of a batch that ran out of memory
    (:meth:`out_of_memory`). ``natural``: natural batching (``MICROBATCH_BATCH__NATURAL``)."""

    def __init__(
        self,
        controller: BatchSizeController | FixedBatchSize,
        clock: Callable[[], float],
        *,
        natural: bool = False,
    ) -> None:
        self._controller = controller
        self._busy = BusyShare()
        self._clock = clock
        self._natural = natural
        self._cap = 0
        self._cap_until = float("-inf")  # no hold
        self._target = controller.target

    @classmethod
    def of(cls, batch: BatchSettings, drain_max: int | None, clock: Callable[[], float]) -> BatchPolicy:
        """The policy ``MICROBATCH_BATCH__*`` asks for: adaptive (the controller, up to ``drain_max``, the
        drain ceiling measured at start-up; None: no drain regime) or fixed at ``MAX_SIZE``; natural
        batching as set."""
        controller: BatchSizeController | FixedBatchSize = (
            BatchSizeController(
                batch.min_size,
                batch.max_size,
                batch.latency_slo_ms / 1000,
                batch.max_wait_ms / 1000,
                drain_max=drain_max,
                natural=batch.natural,
            )
            if batch.adaptive
            else FixedBatchSize(batch.max_size)
        )
        return cls(controller, clock, natural=batch.natural)

    @property
    def target(self) -> int:
        """The size the next batch is cut at."""
        return self._target

    def observe(self, size: int, service_s: float, backlog: int) -> int:
        """Fold in a batch of ``size`` items that took ``service_s`` seconds with ``backlog`` messages
        waiting; return the new target."""
        busy = self._busy.observe(service_s, self._clock(), size)
        target = self._controller.observe(size, service_s, backlog, busy, self._busy.rate).target
        cap = self.cap
        if cap is not None and target > cap:
            self._controller.limit(cap)
            target = cap
        self._target = target
        return target

    def out_of_memory(self, size: int) -> None:
        """A batch of ``size`` items ran out of memory (it was split, nothing lost): no batch above half
        of it for ``OUT_OF_MEMORY_HOLD_S``, whatever the load or the drain regime ask; a smaller one that
        fails too lowers the cap further. The memory may come back (another process freed it), so the cap
        is lifted after the hold, and the controller grows from it again by its own rules."""
        half, held = max(1, size // 2), self.cap
        self._cap = half if held is None else min(held, half)
        self._cap_until = self._clock() + OUT_OF_MEMORY_HOLD_S

    def may_cut_early(self, computing: bool) -> bool:
        """Natural batching: whether an idle moment may cut the open batch before it is full or due. Only
        with nothing ``computing``, and not while the target is past ``max_size`` (the stretch or the
        drain regime): the load needs large batches then, and an early cut would only add batches."""
        return self._natural and not computing and not self._controller.stretched

    @property
    def stretched(self) -> bool:
        """The target is past ``max_size`` (the stretch or the drain regime)."""
        return self._controller.stretched

    @property
    def cap(self) -> int | None:
        """The batch size held since a batch ran out of memory; None when no hold is on."""
        return self._cap if self._clock() < self._cap_until else None
