"""The micro-batch window: pure logic with an injected monotonic clock.

A batch is due when it is full, or when its OLDEST item has waited ``max_wait_s``: the deadline starts at
the first item and is never pushed back by later ones, so a steady trickle cannot starve it. A backlog is
cut into full batches at once, with no waiting.

"Full" means ``max_size`` items (the target, read from the batch-size policy, which may move it between
batches: ``service/flow/sizing.py``), or,
when items have a cost, a padded cost of ``max_cost``: a text batch is padded to its longest item, so it
costs ``count x longest``, and one long line must not make the whole batch huge.

With a cost and a ``window``, a batch is chosen among the oldest ``window`` waiting items (at least
:data:`POOL_BATCHES` batches' worth, so a large batch still has lengths to choose among) rather than taken
in arrival order: the oldest item (whose deadline is due first) and those closest to it in cost. Similar
lengths pad less. Every batch holds the oldest waiting item, so no item is passed over for longer than
it takes the items ahead of it to be served.

An idle loop may cut a batch before either (``ready(idle=True)``): natural batching, decided by the loop,
which knows whether anything is computing and whether anything more is fetched.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")

Clock = Callable[[], float]

POOL_BATCHES = 8
"""With a cost, each batch is chosen among at least this many batches' worth of waiting items: a large
batch needs lines of similar length to choose among, or it pads (docs/BENCHMARKS.md, ``POOL_BATCHES``)."""


class SizeTarget(Protocol):
    """Where the batcher reads its target size: ``flow.sizing.BatchPolicy``, or a fixed size."""

    @property
    def target(self) -> int: ...


class FixedSize:
    """A target size that never moves."""

    __slots__ = ("target",)

    def __init__(self, target: int) -> None:
        self.target = target


class Batcher(Generic[T]):
    """Collects items into batches. Not thread-safe: one loop owns it.

    ``size`` is the target size (an int: fixed), which the batcher only reads. ``cost(item)`` (optional)
    is an item's size in the unit ``max_cost`` caps (0: no cap), e.g. tokens.
    """

    def __init__(
        self,
        size: int | SizeTarget,
        max_wait_s: float,
        clock: Clock = time.monotonic,
        *,
        cost: Callable[[T], int] | None = None,
        max_cost: int = 0,
        window: int = 0,
    ) -> None:
        target = FixedSize(size) if isinstance(size, int) else size
        if target.target < 1:
            raise ValueError("max_size must be >= 1")
        if max_wait_s <= 0:
            raise ValueError("max_wait_s must be > 0")
        self._target = target
        self.max_wait_s = max_wait_s
        self._clock = clock
        self._cost = cost
        self._max_cost = max_cost if cost is not None else 0
        self._window = window if cost is not None else 0
        self._items: deque[tuple[float, int, T]] = deque()  # (arrived, cost, item), oldest first

    def __len__(self) -> int:
        return len(self._items)

    @property
    def max_size(self) -> int:
        """The target size now."""
        return self._target.target

    def add(self, item: T, arrived: float | None = None) -> None:
        """Append ``item``; ``arrived`` (default: now) is when its wait started."""
        cost = self._cost(item) if self._cost is not None else 1
        self._items.append((self._clock() if arrived is None else arrived, cost, item))

    def add_all(self, items: Sequence[T], arrived: Sequence[float]) -> None:
        """:meth:`add` for each of ``items``, in order; ``arrived[i]`` is when ``items[i]``'s wait started."""
        if len(arrived) != len(items):
            raise ValueError(f"{len(items)} items, {len(arrived)} arrival times")
        if self._cost is None:
            self._items.extend(zip(arrived, repeat(1), items))
        else:
            cost = self._cost
            self._items.extend((at, cost(item), item) for at, item in zip(arrived, items, strict=True))

    def room(self) -> int:
        """How many more items the batcher would like to choose among before cutting (bucketing); 0 when
        it chooses in arrival order."""
        return max(0, self._pool() - len(self._items))

    def _pool(self) -> int:
        """How many waiting items a batch is chosen among: the window, or :data:`POOL_BATCHES` batches
        when larger."""
        return max(self._window, POOL_BATCHES * self.max_size) if self._window else 0

    def time_until_due(self) -> float | None:
        """Seconds until the open batch is due (0 if it is due now); None when nothing is waiting."""
        if not self._items:
            return None
        if self._full():
            return 0.0
        return max(0.0, self._items[0][0] + self.max_wait_s - self._clock())

    def ready(self, idle: bool = False) -> bool:
        """True when a batch should be cut now: it is full or its oldest item is due, or the caller says
        that waiting buys nothing (``idle``: natural batching, see ``service/flow/pipeline.py``)."""
        due = self.time_until_due()
        return due is not None and (due <= 0.0 or idle)

    def take(self) -> list[T]:
        """Remove and return the next batch (in arrival order): at most ``max_size`` items and, with a
        cost cap, at most ``max_cost`` padded; always at least the oldest item. Items left keep their own
        arrival times, so the next batch's deadline runs from ITS oldest item."""
        return [entry[2] for entry in self._cut()]

    def take_padded(self) -> tuple[list[T], tuple[int, int] | None]:
        """:meth:`take`, plus the batch's (real, padded) cost when items have a cost: the sum of their
        costs, and count x the costliest (what padding to the longest item makes of it); else None."""
        entries = self._cut()
        items = [entry[2] for entry in entries]
        if self._cost is None or not entries:
            return items, None
        costs = [entry[1] for entry in entries]
        return items, (sum(costs), len(costs) * max(costs))

    def discard(self, keep: Callable[[T], bool]) -> int:
        """Drop the items for which ``keep`` is false (e.g. of partitions just lost). Returns how many."""
        before = len(self._items)
        self._items = deque(entry for entry in self._items if keep(entry[2]))
        return before - len(self._items)

    def _over(self, count: int, longest: int) -> bool:
        return bool(self._max_cost) and count * longest > self._max_cost

    def _full(self) -> bool:
        if len(self._items) >= self.max_size:
            return True
        if not self._max_cost:
            return False
        # Full when no further item fits: even one no longer than the longest waiting would go over.
        longest = max(entry[1] for entry in self._items)
        return self._over(len(self._items) + 1, longest)

    def _cut(self) -> list[tuple[float, int, T]]:
        """Remove the next batch's entries (see :meth:`take`)."""
        if not self._items:
            return []
        if self._window > 1:
            return self._take_bucket()
        popleft, size = self._items.popleft, self.max_size
        if not self._max_cost:  # no cost cap: the oldest max_size, without looking at each
            return [popleft() for _ in range(min(len(self._items), size))]
        count, longest = 0, 0
        for _arrived, cost, _item in self._items:
            longest = max(longest, cost)
            if count >= size or (count and self._over(count + 1, longest)):
                break
            count += 1
        return [popleft() for _ in range(count)]

    def _take_bucket(self) -> list[tuple[float, int, T]]:
        """The oldest item plus the waiting items nearest to it in cost, within the window and the caps."""
        pool = [self._items.popleft() for _ in range(min(len(self._items), self._pool()))]
        anchor = pool[0][1]
        nearest = sorted(range(len(pool)), key=lambda i: (abs(pool[i][1] - anchor), i))
        chosen: set[int] = set()
        longest, size = 0, self.max_size
        for i in nearest:
            if len(chosen) >= size:
                break
            cost = pool[i][1]
            if chosen and self._over(len(chosen) + 1, max(longest, cost)):
                continue  # a shorter one further down may still fit
            chosen.add(i)
            longest = max(longest, cost)
        # The rest go back to the front, in their order: they are the oldest still waiting.
        self._items.extendleft(reversed([entry for i, entry in enumerate(pool) if i not in chosen]))
        return [entry for i, entry in enumerate(pool) if i in chosen]
