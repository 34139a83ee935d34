"""The demo's latency figures, and the rule that says when the broker has warmed up. Pure: no client, no clock
of its own.

Two measures per result, both on this machine's wall clock:

- **service**: consumed → produced, from the result's own timestamps (``timestamps.consumed_ms``: when the
  service's consumer handed the input over; ``produced_ms``: when the result went to its producer). The
  service's own share: the wait for a batch, inference, encoding. No broker in it.
- **end to end**: produced by the demo → read back by the demo (the input's Kafka timestamp, set by the demo's
  producer, to the moment the demo's :class:`~service.tools.reader.Tail` read the result). The service's
  share plus two trips through the broker and both producers' batching (``linger.ms``).

A freshly started broker answers slowly for its first seconds of traffic (its JVM compiles, sizes its heap),
and that shows in end to end, not in the service's share; :class:`Settle` says when it is over.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import msgspec
import numpy as np


class _Timestamps(msgspec.Struct):
    event_ms: int | None
    consumed_ms: int
    produced_ms: int


class _Stamped(msgspec.Struct):
    timestamps: _Timestamps


_DECODER = msgspec.json.Decoder(_Stamped)


@dataclass(frozen=True, slots=True)
class Timing:
    """One result's times (ms since the epoch): its input produced, consumed; the result produced, read."""

    event_ms: int
    consumed_ms: int
    produced_ms: int
    read_ms: int

    @property
    def service_ms(self) -> int:
        return self.produced_ms - self.consumed_ms

    @property
    def end_to_end_ms(self) -> int:
        return self.read_ms - self.event_ms


def timing(value: bytes | None, read_ms: int) -> Timing | None:
    """The times of a result record's ``value`` read at ``read_ms``; None for a value that is no result or
    whose input had no timestamp."""
    try:
        stamps = _DECODER.decode(value or b"").timestamps
    except msgspec.DecodeError:
        return None
    if stamps.event_ms is None:
        return None
    return Timing(stamps.event_ms, stamps.consumed_ms, stamps.produced_ms, read_ms)


@dataclass(frozen=True, slots=True)
class Latency:
    """p50 and p99 (ms) of both measures over ``count`` results."""

    count: int
    service: tuple[float, float]
    end_to_end: tuple[float, float]


def latency(timings: Sequence[Timing], from_ms: int) -> Latency | None:
    """The figures of the results whose input was produced at or after ``from_ms`` (the timed traffic: the
    warm-ups' inputs came before it); None when there are none."""
    kept = [t for t in timings if t.event_ms >= from_ms]
    if not kept:
        return None
    s50, s99 = np.percentile([t.service_ms for t in kept], [50, 99])
    e50, e99 = np.percentile([t.end_to_end_ms for t in kept], [50, 99])
    return Latency(len(kept), (float(s50), float(s99)), (float(e50), float(e99)))


@dataclass
class Settle:
    """The broker has warmed up once the end-to-end p99 of each of the last ``quiet`` seconds lies within
    ``tolerance`` (relative) plus ``slack_ms`` of the lowest of them. A fresh broker's slow seconds come as
    spikes between fast ones, not as a slope: one fast second, or two alike, can sit between two slow ones,
    hence three. A second without results counts as slow."""

    quiet: int = 3
    tolerance: float = 0.5
    slack_ms: float = 5.0
    p99s: list[float] = field(default_factory=list)

    def add(self, end_to_end_ms: Sequence[float]) -> bool:
        """Take the end-to-end latencies of one second's results; True once the broker has settled."""
        self.p99s.append(float(np.percentile(end_to_end_ms, 99)) if len(end_to_end_ms) else math.inf)
        last = self.p99s[-self.quiet :]
        return len(last) == self.quiet and max(last) <= min(last) * (1 + self.tolerance) + self.slack_ms


@dataclass(frozen=True, slots=True)
class WarmUp:
    """How the broker's warm-up went: its length, whether it settled, each second's end-to-end p99 (ms)."""

    seconds: float
    settled: bool
    p99s: list[float]


def warm_up(
    sample: Callable[[], Sequence[float]],
    rule: Settle,
    max_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    abandon: Callable[[], bool] = lambda: False,
    interval_s: float = 1.0,
) -> WarmUp:
    """Every ``interval_s``, hand ``rule`` what ``sample()`` returns (the end-to-end latencies of the results
    read since the last call) until it says settled, ``max_s`` have passed or ``abandon()`` (the traffic
    failed). Blocks meanwhile; the traffic that warms the broker up is the caller's."""
    start = clock()
    due = start + interval_s
    while True:
        sleep(max(due - clock(), 0.0))
        settled = rule.add(sample())
        elapsed = clock() - start
        if settled or elapsed >= max_s or abandon():
            return WarmUp(elapsed, settled, list(rule.p99s))
        due += interval_s
