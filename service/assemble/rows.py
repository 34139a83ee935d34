"""Points -> rows: one row per key (host) and interval, within a bounded wait. Pure; clock injected.

Agents send one measurement per message (collectd, Telegraf) or one scrape per request (OTLP); a model of
a host wants one vector per host per interval. The assembler keeps an open row per (key, interval), fed by
every point whose metric one of the row's features reads (``rules``), and closes it:

- when it is **complete** (every feature has a series), ``grace_s`` later: the rest of the agent's burst
  (the second interface, the other CPUs) still joins it;
- else when its first point is ``max_wait_s`` old: scored if it has every required feature (the optional
  ones filled by the fill policy), else closed **incomplete**.

A point belongs to the interval nearest its time (agents stamp a whole burst within milliseconds of one
tick). A point for a row already closed is **late**: it feeds nothing. A point no feature reads is
**ignored**; one without a value (a counter's first sample, collectd's null) is **empty**. Each closed row
lists the messages that fed it: the caller answers them when the row's result is delivered. Messages
of partitions handed over are taken out of the open rows (:meth:`Assembler.discard`), never answered
early: their next owner reads them again and assembles whole rows.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from service.assemble.rates import Rates
from service.assemble.rules import Attributes, Rule, Source
from service.formats import MISSING, Fields, lookup

M = TypeVar("M")
Fill = Literal["last", "typical", "zero"]
RowKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Closed(Generic[M]):
    """A row that closed: scored (``missing`` empty) or incomplete.

    ``time`` is the interval's nominal time (seconds since the epoch); ``values`` has every feature the row
    could give, in the model's order, ``filled`` naming those the fill policy supplied; ``missing`` the
    features it could not have; ``sources`` the messages that fed it, each once, in arrival order."""

    key: str
    time: float
    interval_s: float
    values: dict[str, float]
    filled: tuple[str, ...]
    missing: tuple[str, ...]
    sources: tuple[M, ...]

    @property
    def scored(self) -> bool:
        return not self.missing


@dataclass(slots=True)
class Fed:
    """What one message's points did: the rows they fed, how many points each way, and the points that
    could not be keyed (index, why)."""

    rows: int = 0
    used: int = 0
    ignored: int = 0
    late: int = 0
    empty: int = 0
    unkeyed: list[tuple[int, str]] = field(default_factory=list)


class _Row(Generic[M]):
    __slots__ = ("deadline", "opened", "series", "sources", "unseen")

    def __init__(self, opened: float, deadline: float, features: int) -> None:
        self.opened = opened
        self.deadline = deadline
        self.series: dict[tuple[str, Attributes], tuple[float, M]] = {}  # -> (value, the message it came in)
        self.sources: list[M] = []
        self.unseen = [True] * features  # features without a series yet


class Assembler(Generic[M]):
    """Not thread-safe. ``M`` is whatever identifies a message to the caller (the service: its record)."""

    def __init__(
        self,
        rules: Sequence[Rule],
        required: Sequence[str],
        *,
        key: tuple[str, ...],
        interval_s: float,
        max_wait_s: float,
        grace_s: float,
        fill: Fill,
        typical: Mapping[str, float],
        clock: Callable[[], float],
        max_keys: int = 100_000,
    ) -> None:
        features = [r.feature for r in rules]
        unknown = sorted(set(required) - set(features))
        if unknown:
            raise ValueError(f"required features the model does not have: {unknown}")
        self.features = features
        self._rules = list(rules)
        self._required = [f in set(required) for f in features]
        self._key = key
        self._interval = interval_s
        self._max_wait, self._grace = max_wait_s, grace_s
        self._fill, self._typical = fill, dict(typical)
        self._clock = clock
        self._max_keys = max_keys
        # metric -> the (feature index, source) pairs that read it: a point's one dict lookup.
        self._index: dict[str, list[tuple[int, Source]]] = {}
        for i, rule in enumerate(self._rules):
            for source in rule.sources:
                self._index.setdefault(source.metric, []).append((i, source))
        self._rows: dict[RowKey, _Row[M]] = {}
        self._deadlines: list[tuple[float, RowKey]] = []  # a heap; entries of moved deadlines are stale
        self._closed_upto: dict[str, int] = {}  # key -> latest interval closed
        self._last: dict[str, list[float | None]] = {}  # key -> its latest values, for fill=last
        self._rates = Rates()

    def __len__(self) -> int:
        """Open rows."""
        return len(self._rows)

    def add(self, message: M, points: Sequence[Fields], fallback_key: str | None = None) -> Fed:
        """Feed one message's points (``service.formats.points``) into their rows. A point's key is its
        ``key`` field, else ``fallback_key`` (the message's Kafka key); a point with neither is returned in
        ``unkeyed``. Never raises for a bad point: one without a usable time or metric is ignored."""
        fed = Fed()
        now = self._clock()
        mine: set[RowKey] = set()
        for position, point in enumerate(points):
            readers = self._index.get(point.get("metric"))  # type: ignore[arg-type]
            if readers is None:
                fed.ignored += 1
                continue
            attributes = point.get("attributes") or {}
            reading = [(i, s) for i, s in readers if s.matches(attributes)]
            time = point.get("time")
            if not reading or not isinstance(time, int | float) or not math.isfinite(time):
                fed.ignored += 1
                continue
            key = lookup(point, self._key)
            if key is MISSING or key is None or key == "":
                if fallback_key is None:
                    fed.unkeyed.append((position, f"no key: the point has no {'.'.join(self._key)!r}"))
                    continue
                key = fallback_key
            key = str(key)
            attrs: Attributes = tuple(sorted(attributes.items()))  # the series, with key and metric
            value = _number(point.get("value"))
            metric: str = point["metric"]
            if value is not None and point.get("kind") == "counter":
                value = self._rates.rate((key, metric, attrs), float(time), value, point.get("start"))
            if value is None:
                fed.empty += 1
                continue
            bucket = round(time / self._interval)
            row = self._rows.get((key, bucket))
            if row is None:
                if bucket <= self._closed_upto.get(key, -math.inf):
                    fed.late += 1
                    continue
                row = self._rows[(key, bucket)] = _Row(now, now + self._max_wait, len(self._rules))
                heapq.heappush(self._deadlines, (row.deadline, (key, bucket)))
            row.series[(metric, attrs)] = (value, message)
            if (key, bucket) not in mine:
                mine.add((key, bucket))
                row.sources.append(message)
            fed.used += 1
            unseen = row.unseen
            was_open = any(unseen)
            for i, source in reading:
                if unseen[i] and source.counts(attributes):
                    unseen[i] = False
            if was_open and not any(unseen) and now + self._grace < row.deadline:
                row.deadline = now + self._grace
                heapq.heappush(self._deadlines, (row.deadline, (key, bucket)))
        fed.rows = len(mine)
        return fed

    def due(self) -> list[Closed[M]]:
        """Close the rows whose time has come, oldest deadline first."""
        now = self._clock()
        closed: list[Closed[M]] = []
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            deadline, row_key = heapq.heappop(heap)
            row = self._rows.get(row_key)
            if row is not None and row.deadline == deadline:
                closed.append(self._close(row_key))
        return closed

    def discard(self, drop: Callable[[M], bool]) -> int:
        """Take the messages ``drop`` names, and their points, out of the open rows (their partitions were
        handed over: the new owner reads them again). A row left without messages is gone. Returns how
        many messages were taken out."""
        taken = 0
        for row_key in list(self._rows):
            row = self._rows[row_key]
            kept = [m for m in row.sources if not drop(m)]
            taken += len(row.sources) - len(kept)
            if not kept:
                del self._rows[row_key]
                continue
            if len(kept) == len(row.sources):
                continue
            row.sources = kept
            row.series = {k: (v, m) for k, (v, m) in row.series.items() if not drop(m)}
            row.unseen = [True] * len(self._rules)
            for metric, attrs in row.series:
                attributes = dict(attrs)
                for i, source in self._index[metric]:
                    if source.matches(attributes) and source.counts(attributes):
                        row.unseen[i] = False
            if any(row.unseen) and row.deadline < row.opened + self._max_wait:  # no longer complete
                row.deadline = row.opened + self._max_wait
                heapq.heappush(self._deadlines, (row.deadline, row_key))
        return taken

    def _close(self, row_key: RowKey) -> Closed[M]:
        key, bucket = row_key
        row = self._rows.pop(row_key)
        self._remember(self._closed_upto, key, max(bucket, self._closed_upto.get(key, bucket)))
        values: dict[str, float] = {}
        real: list[float | None] = []
        filled: list[str] = []
        missing: list[str] = []
        last = self._last.get(key)
        for i, rule in enumerate(self._rules):
            value = _read(rule, row.series)
            real.append(value)
            if value is None and not self._required[i]:
                value = self._filler(rule.feature, None if last is None else last[i])
                if value is not None:
                    filled.append(rule.feature)
            if value is None:
                missing.append(rule.feature)
            else:
                values[rule.feature] = value
        if not missing:
            merged = (
                real
                if last is None
                else [r if r is not None else old for r, old in zip(real, last, strict=True)]
            )
            self._remember(self._last, key, merged)
        return Closed(
            key,
            bucket * self._interval,
            self._interval,
            values,
            tuple(filled),
            tuple(missing),
            tuple(row.sources),
        )

    def _filler(self, feature: str, last: float | None) -> float | None:
        if self._fill == "zero":
            return 0.0
        if self._fill == "last" and last is not None:
            return last
        return self._typical.get(feature)

    def _remember(self, table: dict[str, Any], key: str, value: Any) -> None:
        """Set ``table[key]``, most recent last, forgetting the stalest key beyond ``max_keys``."""
        table.pop(key, None)
        table[key] = value
        if len(table) > self._max_keys:
            del table[next(iter(table))]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _read(rule: Rule, series: Mapping[tuple[str, Attributes], tuple[float, Any]]) -> float | None:
    """The feature from a row's series: its first source that has any."""
    for source in rule.sources:
        found = [
            (attrs, v)
            for (metric, attrs), (v, _message) in series.items()
            if metric == source.metric and source.matches(dict(attrs))
        ]
        if found:
            value = source.value(found)
            if value is not None:
                return value
    return None
