"""The drain ceiling: how large a batch may grow while a backlog is late (the drain regime of
``service/flow/sizing.py``) or while cheap batches stretch past ``MAX_SIZE``, resolved once at start-up.

Contract:

- ``MICROBATCH_BATCH__DRAIN_MAX_SIZE``, when set, is the ceiling (still capped by memory, below).
- Otherwise it is the model's **throughput knee**, measured here: each size from ``MAX_SIZE`` doubling up to
  :data:`LIMIT` runs the processor's sample through the whole batch path (``prepare``, ``preprocess``,
  ``Engine.run``, ``postprocess``) once untimed (which also warms that size up, so the first drain batch
  is not slow) and twice timed; the faster of the two counts, as the machine's noise only ever slows a
  run down. The knee is :func:`service.engine.knee.find_knee` of those rates: beyond it, doubling the
  batch gains less than 10%. Without a knee up to :data:`LIMIT`, the ceiling is :data:`LIMIT`. For text
  the sample is one short line, so ``MAX_TOKENS`` (count x longest line) binds real batches first.
- Sizes are measured only while they are affordable: a size whose batch takes longer than the SLO's
  budget for one batch ends the measurement (the controller would halve it at once), and, for a
  processor with a cost (text), so does one whose sample batch would exceed ``MAX_TOKENS`` (the batcher
  never cuts it).
- **Memory**: the ceiling is capped so that the process's peak memory stays under 70% of what it may use,
  measured after each size: on CPU the peak resident set against the cgroup limit, else the RAM; on CUDA
  the device's memory through NVML when nvidia-ml-py is installed (else no memory cap, and the log says
  so).
- The ceiling is never below ``MAX_SIZE``; equal to it, there is no drain regime and no stretch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from service.config import BatchSettings
from service.engine import knee
from service.engine.knee import LIMIT
from service.engine.memory import DeviceMemory, MemoryLimit, host_limit, peak_rss
from service.flow.model import Model
from service.flow.ports import EngineLike
from service.flow.sizing import batch_budget_s


@dataclass(frozen=True, slots=True)
class DrainCeiling:
    """The ceiling, and how it was found (logged at start-up)."""

    size: int
    source: str  # "setting" | "knee" | "no_knee" | "memory" | "budget" | "tokens" | "max_size"
    measured: tuple[tuple[int, float], ...] = ()
    """(size, items/s) of each size measured."""
    memory: MemoryLimit | None = None
    """The limit the memory cap was held to; None when memory was not measured."""

    def describe(self) -> dict[str, object]:
        return {
            "drain_max_size": self.size,
            "from": self.source,
            "measured": {size: round(rate) for size, rate in self.measured},
            "memory_limit": None
            if self.memory is None
            else f"{self.memory.source} {self.memory.total / 2**30:.1f} GiB",
        }


def drain_ceiling(
    model: Model[EngineLike],
    batch: BatchSettings,
    clock: Callable[[], float] = time.perf_counter,
    memory: Callable[[], tuple[MemoryLimit, Callable[[], int]] | None] | None = None,
    *,
    budget_s: float | None = None,
) -> DrainCeiling:
    """The drain ceiling for ``model`` under ``batch``; see the module contract. ``memory`` gives the limit
    and a reading of the memory used against it (default: the device's on CUDA, else the host's);
    ``budget_s`` replaces the SLO's budget for one batch (a backfill, with no latency target, passes inf)."""
    if not batch.adaptive:
        return DrainCeiling(batch.max_size, "max_size")
    wanted = batch.drain_max_size
    top = wanted if wanted is not None else LIMIT
    sizes = [batch.max_size]
    while sizes[-1] * 2 <= top:
        sizes.append(sizes[-1] * 2)
    if wanted is not None and sizes[-1] != wanted:
        sizes.append(wanted)
    if budget_s is None:
        budget_s = batch_budget_s(batch.latency_slo_ms / 1000, batch.max_wait_ms / 1000)
    cost = model.caps.cost
    sample = model.processor.sample()
    reading = (memory or _memory_of(model))()
    points: list[knee.Point] = []
    stop = "knee"
    for size in sizes:
        items = model.caps.prepare([sample] * size)
        if (
            cost is not None
            and batch.max_tokens
            and size > batch.max_size
            and _tokens(cost, items) > batch.max_tokens
        ):
            stop = "tokens"
            break
        times = [_time_batch(model, items, clock) for _ in range(3)][1:]  # the first warms the size up
        used = reading[1]() if reading is not None else None
        points.append(knee.Point(size, size / max(min(times), 1e-9), 0.0, 0.0, used))
        if min(times) > budget_s:
            if len(points) > 1:
                points.pop()  # the controller would halve it at once
            stop = "budget"
            break
    measured = tuple((p.size, p.items_per_s) for p in points)
    limit = reading[0] if reading is not None else None
    if stop != "knee":  # the measurement stopped early: the largest size measured is the ceiling
        size, source = points[-1].size, stop
    elif wanted is not None:
        size, source = wanted, "setting"
    else:
        found = knee.find_knee(points)
        size, source = found.size, "knee" if found.found else "no_knee"
    if limit is not None:
        cap = knee.memory_cap(points, limit.total)
        if cap is not None and cap < size:
            size, source = max(cap, batch.max_size), "memory"
    return DrainCeiling(max(size, batch.max_size), source, measured, limit)


def _time_batch(model: Model[EngineLike], items: list[Any], clock: Callable[[], float]) -> float:
    start = clock()
    model.score(items)
    return clock() - start


def _tokens(cost: Callable[[Any], int], items: list[Any]) -> int:
    """A batch's padded cost: count x the costliest item (as the batcher counts it)."""
    return len(items) * max(cost(item) for item in items)


def _memory_of(model: Model[EngineLike]) -> Callable[[], tuple[MemoryLimit, Callable[[], int]] | None]:
    def reading() -> tuple[MemoryLimit, Callable[[], int]] | None:
        if model.ref.provider == "CUDAExecutionProvider":
            device = DeviceMemory.open(model.ref.provider)
            if device is None:
                return None
            return MemoryLimit(device.total, device.name), device.used
        return host_limit(), peak_rss

    return reading


def offline_size(model: Model[EngineLike], batch: BatchSettings, **measure: Any) -> DrainCeiling:
    """The batch size of an offline run (``microbatch backfill``): ``MAX_SIZE`` when it was set, else the
    knee measured from the streaming default up; either capped by memory as above, measured from the
    streaming default up (so a cap can fall below a ``MAX_SIZE`` that does not fit). No latency budget
    limits it: an offline range has no SLO. ``measure`` passes ``clock`` and ``memory`` on."""
    wanted = batch.max_size if "max_size" in batch.model_fields_set else None
    start = min(wanted or LIMIT, BatchSettings.model_fields["max_size"].default)
    probe = batch.model_copy(update={"adaptive": True, "max_size": start, "drain_max_size": wanted})
    return drain_ceiling(model, probe, budget_s=float("inf"), **measure)
