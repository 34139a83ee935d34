"""Cumulative counters -> rates per second, per series. Pure.

Telegraf and the hostmetrics receiver send totals (bytes received since boot); a model wants bytes per
second. The rate of a sample is Δvalue / Δtime against the series' previous sample. There is none for
the first sample of a series this process sees, after a counter reset (the value went down, or an OTLP
``start`` changed), or for a sample not newer than the last: those give no value.

The state is this process's alone: a series whose samples are spread over several replicas (random message
keys) gets rates only from the pairs one replica happens to see. Hence the rule in docs/FORMATS.md: key
the agents' messages by host.
"""

from __future__ import annotations

from collections.abc import Hashable


class Rates:
    """The last sample of each series, at most ``max_series`` of them (the least recently updated are
    forgotten first: a host gone away)."""

    def __init__(self, max_series: int = 1_000_000) -> None:
        self._last: dict[Hashable, tuple[float, float, float | None]] = {}
        self._max = max_series

    def rate(self, series: Hashable, time: float, value: float, start: float | None = None) -> float | None:
        """The rate of this sample of a cumulative counter, and remember it; None when there is none."""
        last = self._last.get(series)
        if last is not None:
            then, before, started = last
            if time <= then:
                return None  # a re-read or a straggler: the newer sample stays the reference
            del self._last[series]  # re-inserted below: insertion order is recency
        self._last[series] = (time, value, start)
        if len(self._last) > self._max:
            del self._last[next(iter(self._last))]
        if last is None or value < before or start != started:
            return None
        return (value - before) / (time - then)

    def __len__(self) -> int:
        return len(self._last)
