"""service/batcher.py: size and age triggers, the deadline of the OLDEST item, backlog cutting."""

from __future__ import annotations

import pytest

from service.batcher import Batcher

# Binary fractions, so clock arithmetic is exact and deadlines can be compared with ==.
WAIT = 0.5
STEP = 0.125


def make(clock, max_size: int = 4, max_wait_s: float = WAIT) -> Batcher[str]:
    return Batcher(max_size, max_wait_s, clock)


def test_empty_batcher_has_nothing_due(clock):
    batcher = make(clock)
    clock.advance(10 * WAIT)
    assert len(batcher) == 0
    assert batcher.time_until_due() is None
    assert not batcher.ready()
    assert batcher.take() == []
    assert list(batcher.drain()) == []


def test_flush_at_max_size_without_waiting(clock):
    batcher = make(clock, max_size=3)
    batcher.add("a")
    batcher.add("b")
    assert not batcher.ready()
    batcher.add("c")
    # Full: due now, although no time passed.
    assert batcher.ready()
    assert batcher.time_until_due() == 0.0
    assert batcher.take() == ["a", "b", "c"]
    assert len(batcher) == 0


def test_due_when_oldest_item_has_waited_max_wait(clock):
    batcher = make(clock, max_size=100)
    start = clock.now
    batcher.add("a")
    clock.advance(WAIT - STEP)
    assert not batcher.ready()
    clock.advance(STEP)
    assert clock.now == start + WAIT
    assert batcher.ready()
    assert batcher.take() == ["a"]


def test_time_until_due_counts_down_from_the_oldest_item(clock):
    batcher = make(clock, max_size=100)
    batcher.add("a")
    assert batcher.time_until_due() == WAIT
    clock.advance(STEP)
    batcher.add("b")
    # b's arrival does not restart the countdown.
    assert batcher.time_until_due() == WAIT - STEP
    clock.advance(STEP)
    assert batcher.time_until_due() == WAIT - 2 * STEP
    clock.advance(10 * WAIT)
    # Overdue is reported as 0, never negative.
    assert batcher.time_until_due() == 0.0


def test_steady_trickle_cannot_push_the_deadline_back(clock):
    batcher = make(clock, max_size=100)
    start = clock.now
    added = []
    # One item every STEP seconds, forever: the batch must still be cut at start + WAIT.
    while not batcher.ready():
        item = f"item-{len(added)}"
        batcher.add(item)
        added.append(item)
        clock.advance(STEP)
        assert clock.now <= start + WAIT, "the trickle postponed the deadline"
    assert clock.now == start + WAIT
    assert batcher.take() == added
    # Everything that arrived before the deadline went into that batch.
    assert len(added) == int(WAIT / STEP)


def test_explicit_arrival_time_is_the_start_of_the_wait(clock):
    batcher = make(clock, max_size=100)
    batcher.add("late", arrived=clock.now - WAIT)
    assert batcher.ready()
    batcher.take()
    batcher.add("recent", arrived=clock.now - STEP)
    assert batcher.time_until_due() == WAIT - STEP


def test_backlog_is_cut_into_full_batches_immediately(clock):
    batcher = make(clock, max_size=4)
    items = [f"m{i}" for i in range(10)]
    for item in items:
        batcher.add(item)
    batches = []
    while batcher.ready():
        batches.append(batcher.take())
    # Two full batches at once, no clock movement needed; the remainder waits for its deadline.
    assert batches == [items[0:4], items[4:8]]
    assert len(batcher) == 2
    assert not batcher.ready()
    assert batcher.time_until_due() == WAIT


def test_after_take_the_next_deadline_runs_from_its_own_oldest_item(clock):
    batcher = make(clock, max_size=2)
    start = clock.now
    batcher.add("a")
    clock.advance(STEP)
    batcher.add("b")
    clock.advance(STEP)
    batcher.add("c")  # arrives at start + 2*STEP
    clock.advance(STEP)  # now start + 3*STEP: the first batch is full
    assert batcher.take() == ["a", "b"]
    # c's deadline is c's arrival + WAIT: neither a's (already passed) nor "take time + WAIT".
    assert batcher.time_until_due() == (start + 2 * STEP + WAIT) - clock.now
    assert not batcher.ready()
    clock.advance(batcher.time_until_due())
    assert batcher.ready()
    assert batcher.take() == ["c"]


def test_take_returns_oldest_first_and_at_most_max_size(clock):
    batcher = make(clock, max_size=3)
    for i in range(5):
        batcher.add(i)
    assert batcher.take() == [0, 1, 2]
    assert batcher.take() == [3, 4]
    assert batcher.take() == []


def test_drain_yields_everything_in_batches_due_or_not(clock):
    batcher = make(clock, max_size=3)
    items = list(range(8))
    for item in items:
        batcher.add(item)
    batches = list(batcher.drain())
    assert all(1 <= len(b) <= 3 for b in batches)
    assert [x for b in batches for x in b] == items
    assert len(batcher) == 0
    assert batcher.time_until_due() is None


def test_discard_drops_items_and_keeps_order(clock):
    batcher = make(clock, max_size=100)
    for i in range(6):
        batcher.add(i)
        clock.advance(STEP)
    dropped = batcher.discard(lambda x: x % 2 == 1)
    assert dropped == 3
    assert len(batcher) == 3
    assert list(batcher.drain()) == [[1, 3, 5]]


def test_discard_of_the_oldest_moves_the_deadline_to_the_next_oldest(clock):
    batcher = make(clock, max_size=100)
    start = clock.now
    batcher.add("lost")
    clock.advance(2 * STEP)
    batcher.add("kept")
    assert batcher.discard(lambda x: x != "lost") == 1
    assert batcher.time_until_due() == (start + 2 * STEP + WAIT) - clock.now


def test_discard_nothing_returns_zero(clock):
    batcher = make(clock)
    batcher.add("a")
    assert batcher.discard(lambda _x: True) == 0
    assert len(batcher) == 1


@pytest.mark.parametrize(("max_size", "max_wait_s"), [(0, 1.0), (-1, 1.0), (1, 0.0), (1, -0.5)])
def test_invalid_arguments_are_refused(clock, max_size, max_wait_s):
    with pytest.raises(ValueError):
        Batcher(max_size, max_wait_s, clock)


def test_smallest_valid_batcher_flushes_every_item(clock):
    batcher = Batcher(1, 1e-9, clock)
    batcher.add("x")
    assert batcher.ready()
    assert batcher.take() == ["x"]
