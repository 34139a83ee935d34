"""The consumer lag, read at most every 100 ms: the backlog the batch size follows, and the lag gauges."""

from __future__ import annotations

from collections.abc import Callable

from service.flow.ports import SourceLike
from service.flow.records import TopicPartition

_REFRESH_S = 0.1


class Backlog:
    """A cached copy of ``source.lag()``. Reading the lag takes the client's partition locks (about 10 us
    per partition), so not per batch: the copy is re-read when it is over ``refresh_s`` old."""

    def __init__(self, source: SourceLike, clock: Callable[[], float], refresh_s: float = _REFRESH_S) -> None:
        self._source = source
        self._clock = clock
        self._refresh_s = refresh_s
        self._lag: dict[TopicPartition, int] = {}
        self._total = 0
        self._at = float("-inf")

    def per_partition(self) -> dict[TopicPartition, int]:
        """Messages behind the end of each assigned partition."""
        self._refresh()
        return self._lag

    def total(self) -> int:
        """All of them together."""
        self._refresh()
        return self._total

    def _refresh(self) -> None:
        now = self._clock()
        if now - self._at >= self._refresh_s:
            self._lag, self._at = self._source.lag(), now
            self._total = sum(self._lag.values())
