"""The micro-batch window: pure logic with an injected monotonic clock.

A batch is due when it holds ``max_size`` items, or when its OLDEST item has waited ``max_wait_s``: the
deadline starts at the first item and is never pushed back by later ones, so a steady trickle cannot starve
it. A backlog larger than ``max_size`` is cut into full batches at once, with no waiting.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")

Clock = Callable[[], float]


class Batcher(Generic[T]):
    """Collects items into batches. Not thread-safe: one loop owns it."""

    def __init__(self, max_size: int, max_wait_s: float, clock: Clock = time.monotonic) -> None:
        if max_size < 1:
            raise ValueError("max_size must be >= 1")
        if max_wait_s <= 0:
            raise ValueError("max_wait_s must be > 0")
        self.max_size = max_size
        self.max_wait_s = max_wait_s
        self._clock = clock
        self._items: deque[tuple[float, T]] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: T, arrived: float | None = None) -> None:
        """Append ``item``; ``arrived`` (default: now) is when its wait started."""
        self._items.append((self._clock() if arrived is None else arrived, item))

    def time_until_due(self) -> float | None:
        """Seconds until the open batch is due (0 if it is due now); None when nothing is waiting."""
        if not self._items:
            return None
        if len(self._items) >= self.max_size:
            return 0.0
        return max(0.0, self._items[0][0] + self.max_wait_s - self._clock())

    def ready(self) -> bool:
        """True when a batch should be cut now."""
        due = self.time_until_due()
        return due is not None and due <= 0.0

    def take(self) -> list[T]:
        """Remove and return the oldest ``max_size`` items (fewer if fewer wait). Later items keep their
        own arrival times, so the next batch's deadline runs from ITS oldest item."""
        count = min(self.max_size, len(self._items))
        return [self._items.popleft()[1] for _ in range(count)]

    def drain(self) -> Iterable[list[T]]:
        """Yield every waiting item in batches of at most ``max_size``, due or not (for shutdown)."""
        while self._items:
            yield self.take()

    def discard(self, keep: Callable[[T], bool]) -> int:
        """Drop the items for which ``keep`` is false (e.g. of partitions just lost). Returns how many."""
        before = len(self._items)
        self._items = deque(entry for entry in self._items if keep(entry[1]))
        return before - len(self._items)
