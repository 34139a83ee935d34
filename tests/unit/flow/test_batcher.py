"""service/flow/batcher.py: size and age triggers, the deadline of the OLDEST item, backlog cutting."""

from __future__ import annotations

import pytest

from service.flow.batcher import POOL_BATCHES, Batcher

# Binary fractions, so clock arithmetic is exact and deadlines can be compared with ==.
WAIT = 0.5
STEP = 0.125


def drain(batcher: Batcher) -> list[list]:
    """Every waiting item, in the batches the batcher cuts, due or not (as the service does at shutdown)."""
    batches = []
    while len(batcher):
        batches.append(batcher.take())
    return batches


def make(clock, max_size: int = 4, max_wait_s: float = WAIT) -> Batcher[str]:
    return Batcher(max_size, max_wait_s, clock)


def test_empty_batcher_has_nothing_due(clock):
    batcher = make(clock)
    clock.advance(10 * WAIT)
    assert len(batcher) == 0
    assert batcher.time_until_due() is None
    assert not batcher.ready()
    assert batcher.take() == []
    assert drain(batcher) == []


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
    batches = drain(batcher)
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
    assert drain(batcher) == [[1, 3, 5]]


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


# -- cost caps and length bucketing -------------------------------------------------------------------------


def costed(clock, *, max_size: int = 4, max_cost: int = 0, window: int = 0) -> Batcher[str]:
    """Items are strings; their cost is their length (like tokens)."""
    return Batcher(max_size, WAIT, clock, cost=len, max_cost=max_cost, window=window)


def test_cost_cap_cuts_a_batch_before_it_is_full_in_count(clock):
    batcher = costed(clock, max_size=10, max_cost=12)
    for item in ["aaa", "bb", "cccc"]:  # padded: 3 x 4 = 12, at the cap
        batcher.add(item)
    assert batcher.ready()
    batcher.add("d")
    assert batcher.take() == ["aaa", "bb", "cccc"]  # a 4th would make 4 x 4 = 16 > 12
    assert batcher.take() == ["d"]


def test_one_item_over_the_cost_cap_still_runs_alone(clock):
    batcher = costed(clock, max_size=10, max_cost=5)
    batcher.add("x" * 50)
    batcher.add("y")
    assert batcher.ready()
    assert batcher.take() == ["x" * 50]
    assert batcher.take() == ["y"]


def test_without_a_cost_function_the_cap_and_window_are_ignored(clock):
    batcher = Batcher(2, WAIT, clock, max_cost=1, window=8)
    for item in ["aaaa", "b", "cccc"]:
        batcher.add(item)
    assert batcher.room() == 0
    assert batcher.take() == ["aaaa", "b"]


def test_bucketing_takes_the_oldest_and_the_nearest_in_cost(clock):
    batcher = costed(clock, max_size=3, window=8)
    for item in ["aaaa", "b", "cc", "dddd", "e", "ffff", "gg", "hhhhh"]:
        batcher.add(item)
    # The oldest is "aaaa" (4): with it go the two others of length 4, in arrival order.
    assert batcher.take() == ["aaaa", "dddd", "ffff"]
    # Now the oldest is "b" (1): "e" (1), then the nearest is a 2, the older of the two.
    assert batcher.take() == ["b", "cc", "e"]
    assert batcher.take() == ["gg", "hhhhh"]


def test_bucketing_pads_less_than_arrival_order(clock):
    lengths = [3, 40, 5, 38, 4, 41, 6, 39] * 4

    def padded(batches: list[list[str]]) -> int:
        return sum(len(b) * max(map(len, b)) for b in batches)

    fifo, bucketed = costed(clock, window=0), costed(clock, window=16)
    for n in lengths:
        fifo.add("x" * n)
        bucketed.add("x" * n)
    fifo_batches, bucket_batches = drain(fifo), drain(bucketed)
    assert sorted(len(item) for batch in bucket_batches for item in batch) == sorted(lengths)  # all, once
    assert padded(bucket_batches) < 0.6 * padded(fifo_batches)


def test_bucketing_never_passes_over_the_oldest_item(clock):
    batcher = costed(clock, max_size=2, window=6)
    batcher.add("x" * 30)  # an outlier: nobody is near it
    for _ in range(5):
        batcher.add("y")
    assert batcher.take()[0] == "x" * 30


def test_bucketing_respects_the_cost_cap_by_skipping_items_too_long(clock):
    batcher = costed(clock, max_size=3, max_cost=9, window=8)
    for item in ["aaa", "aaaaaaa", "aa", "a"]:
        batcher.add(item)
    # Nearest to 3: 2, 1 (the 7 would pad the batch to 3 x 7 = 21 > 9).
    assert batcher.take() == ["aaa", "aa", "a"]
    assert batcher.take() == ["aaaaaaa"]


def test_an_idle_loop_may_cut_any_open_batch_but_never_an_empty_one(clock):
    batcher = make(clock, 8)
    assert not batcher.ready(idle=True)
    batcher.add("a")
    assert not batcher.ready() and batcher.ready(idle=True)
    assert batcher.take() == ["a"]


def test_room_asks_for_enough_to_choose_among(clock):
    batcher = costed(clock, max_size=4, window=64)
    assert batcher.room() == 64
    for _ in range(5):
        batcher.add("a")
    assert batcher.room() == 59


def test_items_left_by_a_bucket_keep_their_deadlines(clock):
    batcher = costed(clock, max_size=2, window=4)
    batcher.add("aaaa")
    clock.advance(STEP)
    batcher.add("b")
    batcher.add("cccc")
    assert batcher.take() == ["aaaa", "cccc"]
    clock.advance(STEP)
    # "b" is now the oldest: its deadline runs from its own arrival, one STEP ago.
    assert batcher.time_until_due() == WAIT - STEP


def test_a_large_batch_is_chosen_among_pool_batches_worth_even_past_the_window():
    clock = [0.0]
    batcher = Batcher(8, 0.05, lambda: clock[0], cost=lambda c: c, window=4)
    pool = POOL_BATCHES * 8
    assert batcher.room() == pool  # more than the window
    for cost in [1] + [9] * (pool - 8) + [1] * 7:  # the short ones: the oldest, and the last seven
        batcher.add(cost)
    assert sorted(batcher.take()) == [1] * 8  # similar lengths found among the whole pool
    for cost in [9] * 8 + [1]:  # the short one is one past the pool: not chosen among
        batcher.add(cost)
    assert batcher.take() == [9] * 8


@pytest.mark.parametrize("with_cost", [False, True], ids=["plain", "costed"])
def test_add_all_is_add_for_each_in_order(clock, with_cost):
    one, many = (costed(clock, max_size=3, max_cost=12) if with_cost else make(clock, 3) for _ in range(2))
    items = ["aaa", "b", "cc", "dddd", "e"]
    arrived = [clock() - (len(items) - i) * STEP for i in range(len(items))]  # oldest first
    for item, at in zip(items, arrived, strict=True):
        one.add(item, at)
    many.add_all(items, arrived)
    assert many.time_until_due() == one.time_until_due()
    assert drain(many) == drain(one)


def test_add_all_refuses_arrival_times_that_do_not_match_the_items(clock):
    with pytest.raises(ValueError, match="2 items, 1 arrival"):
        make(clock).add_all(["a", "b"], [clock()])
