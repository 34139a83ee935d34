"""The figures of one run, computed from what was recorded. Pure: lists in, numbers out; no I/O, no clock.

Conventions: Kafka timestamps are epoch milliseconds, process samples are epoch seconds, and every function
returns None (not 0, not NaN) when there is too little data to say anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

PERCENTILES = (50, 95, 99)


@dataclass(frozen=True, slots=True)
class Output:
    """What the benchmark keeps of one output record: its Kafka timestamp (CreateTime: when the system
    under test produced it), the bench producer's send time carried in a header, and the ``batch_size``
    field of the value (None for values without one, e.g. the passthrough's copies)."""

    timestamp_ms: int
    sent_us: int | None
    batch_size: int | None


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of the process under test: epoch seconds, CPU seconds used so far, resident bytes."""

    at_s: float
    cpu_s: float
    rss_bytes: int


def throughput(timestamps_ms: Sequence[int]) -> tuple[float, float] | None:
    """(events per second, window in seconds) of a backlog drain, from the first to the last timestamp.

    N records span N - 1 intervals, so the rate is (N - 1) / window: the first record opens the window and
    its own cost is not in it. None with fewer than two records or a zero-length window.
    """
    if len(timestamps_ms) < 2:
        return None
    window_s = (max(timestamps_ms) - min(timestamps_ms)) / 1000
    if window_s <= 0:
        return None
    return (len(timestamps_ms) - 1) / window_s, window_s


def latencies_ms(outputs: Iterable[Output]) -> np.ndarray:
    """End-to-end latency of every output that carries a send time: output timestamp minus send time.

    Both ends are floored to whole milliseconds of the same wall clock before subtracting, so a result can
    never come out below zero because of rounding; the resolution is therefore 1 ms.
    """
    values = [o.timestamp_ms - o.sent_us // 1000 for o in outputs if o.sent_us is not None]
    return np.asarray(values, dtype=np.float64)


def percentiles(values: Sequence[float] | np.ndarray, qs: Sequence[int] = PERCENTILES) -> dict[str, float]:
    """``{"p50_ms": ..., "p95_ms": ..., "p99_ms": ...}`` (linear interpolation); empty for no values."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        return {}
    return {f"p{q}_ms": round(float(v), 2) for q, v in zip(qs, np.percentile(array, qs), strict=True)}


def median_run(runs: Sequence[Mapping[str, Any]], key: str = "p99_ms") -> Mapping[str, Any] | None:
    """The run whose ``key`` is the median of those that have one (the lower middle of an even count);
    None when none has. Repeated latency runs on a shared machine differ mostly in their tails, so one
    run chosen this way is more telling than any single run."""
    ranked = sorted((run for run in runs if run.get(key) is not None), key=lambda run: run[key])
    return ranked[(len(ranked) - 1) // 2] if ranked else None


def mean_batch_size(outputs: Iterable[Output]) -> float | None:
    """Mean ``batch_size`` over the outputs that report one: the batch each event rode in, so this is the
    event-weighted mean (a batch of 16 counts 16 times, a batch of 1 once)."""
    sizes = [o.batch_size for o in outputs if o.batch_size is not None]
    return round(sum(sizes) / len(sizes), 2) if sizes else None


def cpu_percent(samples: Sequence[Sample], start_s: float, end_s: float) -> float | None:
    """CPU use of the sampled process over [start_s, end_s], in percent of one core (two busy cores: 200).

    Uses the last sample at or before ``start_s`` and the first at or after ``end_s`` (the nearest ones
    inside when the samples do not reach that far), so the measured span covers the window.
    """
    if len(samples) < 2 or end_s < start_s:
        return None
    ordered = sorted(samples, key=lambda s: s.at_s)
    before = [s for s in ordered if s.at_s <= start_s]
    after = [s for s in ordered if s.at_s >= end_s]
    first = before[-1] if before else ordered[0]
    last = after[0] if after else ordered[-1]
    span = last.at_s - first.at_s
    if span <= 0:
        return None
    return round(100 * (last.cpu_s - first.cpu_s) / span, 1)


def peak_rss_mib(samples: Sequence[Sample], high_water_bytes: int | None = None) -> float | None:
    """The largest resident set seen: the sampled maximum, or the kernel's high-water mark when known
    (it also catches peaks between two samples)."""
    peaks = [s.rss_bytes for s in samples]
    if high_water_bytes:
        peaks.append(high_water_bytes)
    return round(max(peaks) / 2**20, 1) if peaks else None


def padding_efficiency(log_lines: Iterable[dict]) -> float | None:
    """Real tokens / padded tokens as the service reports it in its ``stats`` and ``stopped`` log lines.

    Exact when the ``stopped`` line carries the run's ``totals`` (token counts over the whole run). Else the
    windows are weighted by their ``events_per_s`` when present (the stats windows are of equal length, so
    that is weighting by events). None when no line carries ``padding_efficiency`` (a model without padding,
    or a service version that does not report it).
    """
    lines = list(log_lines)
    for line in lines:
        totals = line.get("totals") if line.get("event") == "stopped" else None
        if isinstance(totals, dict) and totals.get("padding_efficiency") is not None:
            return round(float(totals["padding_efficiency"]), 4)
    pairs = []
    for line in lines:
        if line.get("event") not in {"stats", "stopped"}:
            continue
        value = line.get("padding_efficiency")
        if value is None:
            continue
        weight = line.get("events_per_s")
        pairs.append((float(value), float(weight) if weight else 1.0))
    total = sum(w for _, w in pairs)
    if not pairs or total <= 0:
        return None
    return round(sum(v * w for v, w in pairs) / total, 4)


def tensor_padding_efficiency(masks: Iterable[np.ndarray]) -> float | None:
    """Real tokens / padded tokens over attention masks (1 = real token), one mask per batch."""
    real = padded = 0
    for mask in masks:
        real += int(np.count_nonzero(mask))
        padded += int(mask.size)
    return round(real / padded, 4) if padded else None


def cpu_per_event_us(cpu_percent: float | None, events_per_s: float | None) -> float | None:
    """Microseconds of CPU per event: ``cpu_percent`` (100 = one core busy) at ``events_per_s``."""
    if cpu_percent is None or not events_per_s:
        return None
    return round(cpu_percent / 100 / events_per_s * 1_000_000, 1)


_SIZE_LINES = frozenset({"batch_sizes", "backfill_batch_size"})


def drain_ceiling(log_lines: Iterable[dict]) -> int | None:
    """The largest batch size the service chose at start-up: ``drain_max_size`` of its ``batch_sizes`` line
    (the drain ceiling), or of a backfill's ``backfill_batch_size`` line (the size it cuts every batch
    at); None when it logged neither."""
    for line in log_lines:
        if line.get("event") in _SIZE_LINES and isinstance(line.get("drain_max_size"), int):
            return line["drain_max_size"]
    return None


def summary(log_lines: Iterable[dict]) -> dict[str, Any] | None:
    """The one JSON line ``microbatch backfill`` prints on stdout at its end (``job``, ``events``,
    ``results``, ``batch_sizes``, ``events_per_s``, ...): the last line of its log that has a ``job`` and
    no ``event`` (the log lines all have one). None when it printed none."""
    found = None
    for line in log_lines:
        if "event" not in line and "job" in line:
            found = line
    return found


def most_common_size(batch_sizes: Mapping[str, int] | Mapping[int, int]) -> int | None:
    """The batch size that ran most often, from ``{size: batches}`` (sizes as JSON keys, so strings);
    the larger of a tie. None for no batches."""
    counts = [(int(count), int(size)) for size, count in batch_sizes.items()]
    return max(counts)[1] if counts else None
