"""Pure analysis of a batch-size sweep: the knee of the throughput curve, the caps, and the stop rules.

No I/O, no clock and no ONNX Runtime: ``microbatch sweep`` measures, this module decides, so every rule is
tested with hand-made numbers.

Contract:

- A sweep is a non-empty sequence of :class:`Point`, in strictly increasing ``size`` order, each with a
  positive throughput (functions raise ValueError otherwise).
- **Knee** (:func:`find_knee`): the smallest measured size ``s`` that no larger measured size ``t`` beats by
  ``gain`` per doubling: ``items_per_s(t) < items_per_s(s) * (1 + gain) ** log2(t / s)`` for every
  ``t > s``. With sizes that double (1, 2, 4, ...) that reads "doubling the batch beyond ``s`` gains less
  than ``gain``"; other spacings are judged per doubling, compounded. Every larger size is compared, not only
  the next one, so one noisy flat step does not hide a real rise further on. The largest size qualifies
  trivially, so there is always a knee; ``found`` is False when it is only that fallback, i.e. throughput
  was still rising at the largest size measured (or a single size was measured).
- **SLO cap** (:func:`slo_cap`): the largest size whose p99, and that of every smaller size, is at most
  ``slo_ms``; 0 when the smallest size misses it; None when there is no SLO.
- **Memory cap** (:func:`memory_cap`): the same rule with device memory used at most ``fraction`` of the
  device's total; None when memory was not measured.
- **Recommendation** (:func:`recommend`): the knee, capped by the caps that apply; None when a cap is 0 (no
  size qualifies).
- **Stop rules**: stop after a point whose p99 exceeds the SLO (:func:`stop_reason`; that point is kept, it
  was measured); stop before a size whose run fails with an out-of-memory error
  (:func:`service.errors.is_out_of_memory`; the sizes before it are kept).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

LIMIT = 512
"""The largest size the knee is looked for at (the sweep's largest default size), by the drain ceiling at
warm-up (``engine/drain.py``), and the largest batch TensorRT's profile covers by default."""
DEFAULT_GAIN = 0.10
"""A doubling must add at least this share of throughput to be worth its latency."""
DEFAULT_MEMORY_FRACTION = 0.70
"""Recommended sizes keep device memory under this share, leaving room for fragmentation and neighbours."""


@dataclass(frozen=True, slots=True)
class Point:
    """One measured batch size. ``memory_used_bytes`` is None where device memory is not measured."""

    size: int
    items_per_s: float
    p50_ms: float
    p99_ms: float
    memory_used_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Knee:
    size: int
    found: bool
    """False: no flattening was seen, ``size`` is just the largest size measured."""


@dataclass(frozen=True, slots=True)
class Recommendation:
    """What ``MICROBATCH_BATCH__MAX_SIZE`` to use, and why. Caps follow the module contract."""

    size: int | None
    knee: Knee
    slo_cap: int | None
    memory_cap: int | None
    reason: str


def find_knee(points: Sequence[Point], gain: float = DEFAULT_GAIN) -> Knee:
    """The knee of the throughput curve; see the module contract."""
    _check(points)
    if gain <= 0:
        raise ValueError(f"gain must be positive, got {gain}")
    for i, base in enumerate(points):
        later = points[i + 1 :]
        if all(p.items_per_s < base.items_per_s * (1 + gain) ** math.log2(p.size / base.size) for p in later):
            return Knee(base.size, found=bool(later))
    raise AssertionError("unreachable: the last point always qualifies")


def slo_cap(points: Sequence[Point], slo_ms: float | None) -> int | None:
    """Largest size of the unbroken run of sizes, from the smallest, whose p99 <= ``slo_ms``."""
    _check(points)
    if slo_ms is None:
        return None
    return _prefix_cap(points, lambda p: p.p99_ms <= slo_ms)


def memory_cap(
    points: Sequence[Point], total_bytes: int | None, fraction: float = DEFAULT_MEMORY_FRACTION
) -> int | None:
    """Largest size of the unbroken run of sizes, from the smallest, using <= ``fraction`` of the device.
    None when the total or any point's figure is unknown (no GPU, no NVML)."""
    _check(points)
    if total_bytes is None or any(p.memory_used_bytes is None for p in points):
        return None
    limit = fraction * total_bytes
    return _prefix_cap(points, lambda p: p.memory_used_bytes is not None and p.memory_used_bytes <= limit)


def recommend(
    points: Sequence[Point],
    *,
    gain: float = DEFAULT_GAIN,
    slo_ms: float | None = None,
    memory_total_bytes: int | None = None,
    memory_fraction: float = DEFAULT_MEMORY_FRACTION,
    throughput: Sequence[Point] | None = None,
) -> Recommendation:
    """The knee, capped by the SLO and by device memory; see the module contract. The knee is read from
    ``throughput`` when given (the whole service's rates, which can level off long before the engine's),
    the caps always from ``points``."""
    knee = find_knee(throughput or points, gain)
    by_slo = slo_cap(points, slo_ms)
    by_memory = memory_cap(points, memory_total_bytes, memory_fraction)
    if by_slo == 0:
        return Recommendation(None, knee, by_slo, by_memory, f"no size meets the SLO (p99 <= {slo_ms:g} ms)")
    if by_memory == 0:
        why = f"no size stays under {memory_fraction:.0%} of device memory"
        return Recommendation(None, knee, by_slo, by_memory, why)
    curve = "the whole service's" if throughput else "the"
    size, reason = knee.size, f"{curve} knee" if knee.found else "no knee yet: the largest size measured"
    if by_slo is not None and by_slo < size:
        size, reason = by_slo, f"the largest size meeting the SLO (p99 <= {slo_ms:g} ms)"
    if by_memory is not None and by_memory < size:
        size, reason = by_memory, f"the largest size under {memory_fraction:.0%} of device memory"
    return Recommendation(size, knee, by_slo, by_memory, reason)


def stop_reason(point: Point, slo_ms: float | None) -> str | None:
    """Why the sweep must not try sizes beyond ``point``, or None to go on."""
    if slo_ms is not None and point.p99_ms > slo_ms:
        return f"p99 {point.p99_ms:.3g} ms exceeds the SLO of {slo_ms:g} ms at size {point.size}"
    return None


def _prefix_cap(points: Sequence[Point], ok: Callable[[Point], bool]) -> int:
    cap = 0
    for point in points:
        if not ok(point):
            break
        cap = point.size
    return cap


def _check(points: Sequence[Point]) -> None:
    if not points:
        raise ValueError("no points")
    sizes = [p.size for p in points]
    if sizes[0] < 1 or any(b <= a for a, b in pairwise(sizes)):
        raise ValueError(f"sizes must be positive and strictly increasing, got {sizes}")
    if any(not p.items_per_s > 0 for p in points):
        raise ValueError("throughput must be positive")
