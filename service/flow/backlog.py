"""The consumer lag, re-read as often as its cost allows: the backlog the batch size follows, and the lag
gauges."""

from __future__ import annotations

from collections.abc import Callable

from service.flow.ports import SourceLike
from service.flow.records import TopicPartition

_REFRESH_PER_PARTITION_S = 0.001
_MIN_REFRESH_S = 0.002


class Backlog:
    """A cached copy of ``source.lag()``. Reading the lag takes the client's partition locks (about 10 us
    per partition), so it is re-read only once its copy is older than 1 ms per assigned partition (at least
    2 ms): at most about 1% of the loop's time whatever the assignment, and fresh enough that the batch
    size, which is decided after every batch from it, follows the queue as it is (4 partitions: every
    4 ms; 100: every 100 ms). ``refresh_s`` fixes the interval instead."""

    def __init__(
        self, source: SourceLike, clock: Callable[[], float], refresh_s: float | None = None
    ) -> None:
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
        interval = self._refresh_s
        if interval is None:
            interval = max(_MIN_REFRESH_S, _REFRESH_PER_PARTITION_S * len(self._lag))
        if now - self._at >= interval:
            self._lag, self._at = self._source.lag(), now
            self._total = sum(self._lag.values())
