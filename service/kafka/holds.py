"""Failed deliveries held per output topic, and sent again in input order.

A delivery that fails for a reason that may pass (topic missing, broker away, write not authorised yet)
is sent again with back-off, forever. Sending each record again on its own schedule would let a later
result overtake an earlier one, so failures are held **per topic**: from a topic's first failure until a
round of resends to it is acknowledged whole, every new record for that topic joins the hold too, and the
hold goes out as one round, sorted by its inputs' (topic, partition, offset). One back-off per topic: a
round that fails again doubles it (up to a cap); one acknowledged whole sends what gathered meanwhile at
once, and the hold ends when nothing is left.

What stays unordered: a record already with librdkafka when an earlier one failed may be acknowledged
before the failed one is sent again. Commits never depend on that: the offset tracker holds them back.

This module decides what waits and what goes, on a clock it is given; the producer is the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 5.0


def backoff(attempt: int) -> float:
    """Seconds to wait before the round after ``attempt`` failed ones: 0.1, 0.2, 0.4, ... up to 5."""
    return min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2.0**attempt)


@dataclass(slots=True)
class _Hold(Generic[T]):
    records: list[T]
    due: float
    attempt: int = 0  # rounds failed in a row
    out: bool = False  # a round is with the producer
    failed_in_round: bool = False


class Holds(Generic[T]):
    """The held records of every topic. ``topic_of(record)`` names a record's topic; ``order(record)`` is
    the key rounds are sorted by (its input's topic, partition, offset); ``clock`` gives seconds."""

    def __init__(
        self,
        topic_of: Callable[[T], str],
        order: Callable[[T], tuple[str, int, int]],
        clock: Callable[[], float],
    ) -> None:
        self._topic_of = topic_of
        self._order = order
        self._clock = clock
        self._holds: dict[str, _Hold[T]] = {}

    def __bool__(self) -> bool:
        return bool(self._holds)

    def waiting(self) -> int:
        """Records held and not with the producer."""
        return sum(len(h.records) for h in self._holds.values())

    def admit(self, records: Sequence[T]) -> Sequence[T]:
        """Of ``records`` (new, in order), those that may be sent now; the rest join their topic's hold,
        behind what it holds already."""
        if not self._holds:
            return records
        free: list[T] = []
        for record in records:
            hold = self._holds.get(self._topic_of(record))
            if hold is None:
                free.append(record)
            else:
                hold.records.append(record)
        return free

    def failed(self, record: T) -> tuple[int, float]:
        """``record``'s delivery failed for a reason that may pass: hold it. Returns, for the log, its
        topic's attempt (1 for the first failure) and the back-off before the next round."""
        topic = self._topic_of(record)
        hold = self._holds.get(topic)
        if hold is None:
            hold = self._holds[topic] = _Hold([record], self._clock() + backoff(0))
        else:
            hold.records.append(record)
            hold.failed_in_round |= hold.out
        attempt = hold.attempt + hold.failed_in_round  # what round_done will count
        return attempt + 1, backoff(attempt)

    def due(self) -> list[tuple[str, list[T]]]:
        """The rounds to send now, one per topic whose back-off has passed, each sorted into input order.
        Each must end in :meth:`round_done`."""
        if not self._holds:
            return []
        now = self._clock()
        rounds = []
        for topic, hold in self._holds.items():
            if not hold.out and hold.records and hold.due <= now:
                hold.records.sort(key=self._order)
                rounds.append((topic, hold.records))
                hold.records, hold.out, hold.failed_in_round = [], True, False
        return rounds

    def round_done(self, topic: str) -> None:
        """Every record of ``topic``'s round was acknowledged, refused, or held again by :meth:`failed`."""
        hold = self._holds[topic]
        hold.out = False
        if hold.failed_in_round:
            hold.attempt += 1
            hold.due = self._clock() + backoff(hold.attempt)
        elif hold.records:  # the topic takes records again: what gathered meanwhile goes at once
            hold.attempt, hold.due = 0, self._clock()
        else:
            del self._holds[topic]

    def next_due(self) -> float | None:
        """When the next round is due (clock seconds); None if no round waits."""
        waiting = [h.due for h in self._holds.values() if h.records and not h.out]
        return min(waiting) if waiting else None
