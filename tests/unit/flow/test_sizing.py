"""service/flow/sizing.py: AIMD on the target batch size, driven by backlog and service time. Pure."""

from __future__ import annotations

import pytest

from service.flow.sizing import (
    OUT_OF_MEMORY_HOLD_S,
    BatchPolicy,
    BatchSizeController,
    BusyShare,
    FixedBatchSize,
)

SLO, WAIT = 0.25, 0.05  # budget per batch = (0.25 - 0.05) / 2 = 0.1 s
FAST, SLOW = 0.01, 0.2


def make(min_size: int = 4, max_size: int = 16, start: int | None = None) -> BatchSizeController:
    return BatchSizeController(min_size, max_size, SLO, WAIT, start)


def test_budget_is_what_the_slo_leaves_for_one_batch_after_the_window_and_the_batch_ahead():
    assert make().budget_s == pytest.approx(0.1)


def test_starts_at_min_size_and_start_is_clamped():
    assert make().target == 4
    assert make(start=100).target == 16
    assert make(start=1).target == 4


def test_backlog_grows_the_target_one_step_per_full_batch_up_to_max():
    sizer = make()
    targets = []
    for _ in range(20):
        decision = sizer.observe(size=sizer.target, service_s=FAST, backlog=1000)
        targets.append(decision.target)
        assert decision.rule == "backlog"
    assert targets[:5] == [5, 6, 7, 8, 9]
    assert targets[-1] == 16
    assert max(targets) == 16


def test_a_batch_over_budget_halves_the_target_but_not_below_min():
    sizer = make(start=16)
    assert sizer.observe(16, SLOW, backlog=1000).target == 8
    assert sizer.observe(8, SLOW, backlog=1000).target == 4
    decision = sizer.observe(4, SLOW, backlog=1000)
    assert (decision.target, decision.rule) == (4, "over_budget")


def test_over_budget_wins_over_backlog():
    sizer = make(start=10)
    assert sizer.observe(10, SLOW, backlog=10_000).rule == "over_budget"


def test_no_backlog_shrinks_one_step_towards_min_for_lower_latency():
    sizer = make(start=8)
    targets = [sizer.observe(3, FAST, backlog=0).target for _ in range(6)]
    assert targets == [7, 6, 5, 4, 4, 4]


def test_some_backlog_but_less_than_a_batch_holds_the_target():
    sizer = make(start=8)
    decision = sizer.observe(8, FAST, backlog=3)
    assert (decision.target, decision.rule) == (8, "steady")


def test_a_partial_batch_with_backlog_does_not_grow():
    # A batch cut by its deadline before it filled says nothing about demand exceeding the size.
    sizer = make(start=8)
    assert sizer.observe(5, FAST, backlog=100).target == 8


def test_settles_where_batches_keep_up_with_a_steady_load():
    """A toy queue: 10 items arrive per step, one batch of `target` is served per step. The target grows
    while the queue builds, and then holds within one of the arrival rate."""
    sizer = make(min_size=1, max_size=64)
    queue = 0
    history = []
    for _ in range(200):
        queue += 10
        size = min(queue, sizer.target)
        queue -= size
        history.append(sizer.observe(size, FAST, backlog=queue).target)
    assert all(9 <= t <= 12 for t in history[-50:]), history[-50:]


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="min_size"):
        BatchSizeController(8, 4, SLO, WAIT)
    with pytest.raises(ValueError, match="SLO"):
        BatchSizeController(1, 4, WAIT, WAIT)


def test_fixed_size_never_moves():
    sizer = FixedBatchSize(16)
    for backlog, service in ((0, FAST), (10_000, FAST), (10_000, SLOW)):
        assert sizer.observe(3, service, backlog).target == 16


def test_a_busy_loop_grows_the_target_before_a_backlog_forms():
    sizer = make(start=4)
    decision = sizer.observe(size=3, service_s=FAST, backlog=0, busy=0.9)
    assert (decision.target, decision.rule) == (5, "busy")


def test_idle_shrinking_waits_until_the_loop_is_mostly_idle():
    sizer = make(start=8)
    assert sizer.observe(3, FAST, backlog=0, busy=0.6).rule == "steady"  # between the thresholds: hold
    assert sizer.observe(3, FAST, backlog=0, busy=0.2).target == 7


def test_with_natural_batching_idle_holds_the_target_and_backlog_still_grows_it():
    # An idle loop cuts what was fetched anyway; a smaller target would only split a fetch in two.
    sizer = BatchSizeController(4, 16, SLO, WAIT, start=8, natural=True)
    for _ in range(5):
        decision = sizer.observe(3, FAST, backlog=0, busy=0.0)
        assert (decision.rule, decision.target) == ("idle", 8)
    assert sizer.observe(8, FAST, backlog=100).target == 9
    assert sizer.observe(9, SLOW, backlog=100).target == 4  # over budget still halves


def test_sizing_says_when_the_target_is_past_max_size():
    clock = [0.0]
    controller = BatchSizeController(4, 16, SLO, WAIT, start=16, drain_max=64)
    sizing = BatchPolicy(controller, lambda: clock[0])
    assert not sizing.stretched
    sizing.observe(16, 0.001, backlog=100)  # cheap and another batch waiting: the stretch
    assert controller.target > 16 and sizing.stretched
    assert not BatchPolicy(FixedBatchSize(16), lambda: clock[0]).stretched


def test_busy_share_is_service_time_over_wall_time():
    share = BusyShare(weight=1.0)  # no smoothing: each reading is the last batch's share
    assert share.observe(0.01, now=100.0) == 0.0  # nothing to compare with yet
    assert share.observe(0.01, now=100.04) == pytest.approx(0.25)
    assert share.observe(0.05, now=100.08) == 1.0  # back to back, or overlapping: fully busy


def test_busy_share_is_smoothed():
    share = BusyShare(weight=0.5)
    share.observe(0.0, now=0.0)
    readings = [share.observe(0.01, now=0.02 * k) for k in range(1, 6)]
    assert readings[0] == pytest.approx(0.25)
    assert readings == sorted(readings)
    assert readings[-1] == pytest.approx(0.5, abs=0.02)


# -- the drain regime ------------------------------------------------------------------------------------


def draining(drain_max: int = 256, start: int = 16) -> BatchSizeController:
    return BatchSizeController(4, 16, SLO, WAIT, start, drain_max=drain_max)


def test_a_late_backlog_doubles_the_target_past_max_size_up_to_the_drain_ceiling():
    sizer = draining()
    # 10,000 items/s clear 2,500 within the 0.25 s SLO; 100,000 waiting are late.
    targets = [sizer.observe(sizer.target, FAST, backlog=100_000, rate=10_000).target for _ in range(6)]
    assert targets == [32, 64, 128, 256, 256, 256]
    assert sizer.draining


def test_a_backlog_the_slo_can_absorb_grows_one_step_below_max_size():
    sizer = draining(start=8)
    decision = sizer.observe(8, FAST, backlog=2_000, rate=10_000)  # 2,000 < 10,000 x 0.25: not late
    assert (decision.rule, decision.target) == ("backlog", 9)
    assert not sizer.draining


def test_full_batches_of_max_size_that_are_not_late_stay_at_max_size():
    """Live traffic that MAX_SIZE barely keeps up with is no drain: for a compute-bound model larger
    batches would only add latency. Only a late backlog is."""
    sizer = draining()
    decision = sizer.observe(16, FAST, backlog=500, rate=10_000)  # 500 < 10,000 x 0.25
    assert (decision.rule, decision.target) == ("backlog", 16)
    assert not sizer.draining


def test_no_late_drain_before_the_rate_is_known_or_without_a_ceiling_above_max_size():
    assert draining(start=8).observe(8, FAST, backlog=100_000, rate=0.0).rule == "backlog"
    assert draining(drain_max=16).observe(16, FAST, backlog=100_000, rate=10_000).target == 16


def test_a_late_backlog_doubles_from_any_target():
    sizer = draining(start=4)
    assert [sizer.observe(sizer.target, FAST, backlog=100_000, rate=10_000).target for _ in range(3)] == [
        16,
        32,
        64,
    ]


def test_the_drain_ends_at_the_first_batch_with_less_than_a_target_waiting():
    sizer = draining()
    for _ in range(4):
        sizer.observe(sizer.target, FAST, backlog=100_000, rate=10_000)
    assert sizer.target == 256
    # Still a batch's worth waiting, even though it is below what the SLO absorbs: keep draining.
    assert sizer.observe(256, FAST, backlog=300, rate=50_000).rule == "drain"
    decision = sizer.observe(256, FAST, backlog=100, rate=50_000)
    assert (decision.rule, decision.target) == ("drained", 16)
    assert not sizer.draining
    # Back in the streaming regime: the usual rules go on from max_size.
    assert sizer.observe(5, FAST, backlog=0, busy=0.1).target == 15


def test_a_drain_batch_over_budget_halves_and_caps_the_drain_until_it_ends():
    sizer = draining()
    for _ in range(4):
        sizer.observe(sizer.target, FAST, backlog=100_000, rate=10_000)
    assert sizer.observe(256, SLOW, backlog=100_000, rate=10_000).target == 128
    assert [sizer.observe(128, FAST, backlog=100_000, rate=10_000).target for _ in range(3)] == [128] * 3
    sizer.observe(128, FAST, backlog=0, rate=10_000)  # drained: the cap goes with it
    targets = [sizer.observe(sizer.target, FAST, backlog=100_000, rate=10_000).target for _ in range(5)]
    assert targets[-1] == 256


# -- the stretch: past max_size while batches are cheap -----------------------------------------------

CHEAP = 0.0005  # a batch of a transport-bound model; the window's tenth is 5 ms


def test_cheap_full_batches_with_more_waiting_stretch_past_max_size_by_an_eighth_per_batch():
    sizer = draining()
    decisions = [sizer.observe(sizer.target, CHEAP, backlog=500, rate=10_000) for _ in range(4)]
    assert [(d.rule, d.target) for d in decisions] == [("stretch", t) for t in (18, 20, 22, 24)]
    assert not sizer.draining  # 500 < 10,000 x 0.25: live traffic, not late


def test_a_batch_costlier_than_a_tenth_of_the_window_does_not_stretch():
    sizer = draining()
    assert sizer.cheap_s == pytest.approx(WAIT / 10)
    decision = sizer.observe(16, WAIT / 10 + 0.001, backlog=500, rate=10_000)
    assert (decision.rule, decision.target) == ("backlog", 16)


def test_the_stretch_stops_at_the_drain_ceiling_and_needs_one():
    sizer = draining(drain_max=20)
    targets = [sizer.observe(sizer.target, CHEAP, backlog=500, rate=10_000).target for _ in range(8)]
    assert targets[-1] == 20
    no_ceiling = make(start=16)  # drain_max defaults to max_size
    assert no_ceiling.observe(16, CHEAP, backlog=500).target == 16


def test_the_stretch_needs_a_full_batch_and_another_waiting():
    assert draining().observe(10, CHEAP, backlog=500, rate=10_000).target == 16  # a partial batch
    assert draining().observe(16, CHEAP, backlog=8, rate=10_000).rule == "steady"  # less than a batch


def test_a_stretched_target_drops_to_max_size_at_the_first_batch_the_window_cut():
    """When the load goes, the last batches are cut by the window before they fill; a target left
    stretched would make the next light traffic wait the whole window, batch after batch."""
    sizer = draining(start=16)
    for _ in range(5):
        sizer.observe(sizer.target, CHEAP, backlog=500, rate=10_000)
    assert sizer.target == 27
    decision = sizer.observe(9, CHEAP, backlog=0, busy=0.1)
    assert (decision.rule, decision.target) == ("unstretch", 16)
    assert [sizer.observe(5, CHEAP, backlog=0, busy=0.1).target for _ in range(3)] == [15, 14, 13]


def test_a_stretched_target_hovers_at_the_size_that_keeps_up():
    """Past max_size, a batch that finds less than a full batch waiting shrinks the target by an eighth
    (within max_size the same backlog holds it): a step either way around the smallest size that keeps
    up."""
    sizer = draining(start=16)
    for _ in range(2):
        sizer.observe(sizer.target, CHEAP, backlog=500, rate=10_000)
    assert sizer.target == 20
    assert (sizer.observe(20, CHEAP, backlog=19, rate=10_000).rule, sizer.target) == ("unstretch", 18)
    assert sizer.observe(18, CHEAP, backlog=18, rate=10_000).target == 20  # a full batch waits again
    sizer.target = 16
    assert sizer.observe(16, CHEAP, backlog=12, rate=10_000).rule == "steady"


def test_a_fixed_size_never_drains():
    assert FixedBatchSize(16).observe(16, FAST, backlog=100_000, rate=10_000).target == 16


def test_drain_ceiling_below_max_size_is_refused():
    with pytest.raises(ValueError, match="drain_max"):
        BatchSizeController(4, 16, SLO, WAIT, drain_max=8)


def test_busy_share_measures_the_rate_served():
    share = BusyShare(weight=1.0)
    share.observe(0.001, now=10.0, size=16)
    assert share.rate == 0.0  # one batch: no interval yet
    share.observe(0.001, now=10.01, size=16)
    assert share.rate == pytest.approx(1_600)
    share.observe(0.002, now=10.01, size=16)  # finished in the same round: its service time bounds it
    assert share.rate == pytest.approx(8_000)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_sizing_enters_and_leaves_the_drain_on_a_fake_clock():
    """Both transitions through the part the loop uses: a backlog of 50,000 served at 16 per millisecond
    (16,000/s clears 4,000 within the SLO) grows the target to the ceiling once the rate is known; once it
    is gone, the target is back within the streaming sizes at once. (Batches of 6 ms: too dear to stretch
    past MAX_SIZE, so the streaming sizes stay within it.)"""
    clock = FakeClock()
    sizing = BatchPolicy(draining(drain_max=128, start=4), clock)
    backlog, targets = 50_000, []
    target = 4
    while backlog > 0:
        size = min(target, backlog)
        backlog -= size
        clock.now += 0.001 * size / 16
        target = sizing.observe(size, 0.006, backlog)
        targets.append(target)
    assert max(targets) == 128
    assert targets[:5] == [5, 16, 32, 64, 128]  # one step before a rate is known, then doubling
    assert targets[-1] <= 16


def test_running_out_of_memory_holds_the_target_at_half_for_a_while_then_it_grows_back():
    """A drain at 128 runs out of memory: the next batches are at most 64 whatever the backlog asks, a
    smaller failure lowers the hold further, and once the hold ends the target grows from it again by
    the controller's own rules (doubling in the drain) rather than jumping back."""
    clock = FakeClock()
    sizing = BatchPolicy(draining(drain_max=128, start=4), clock)
    target = 4
    for _ in range(6):  # into the drain, up to its ceiling
        clock.now += 0.001
        target = sizing.observe(target, 0.001, 50_000)
    assert target == 128
    sizing.out_of_memory(128)
    assert sizing.cap == 64
    clock.now += 0.001
    assert sizing.observe(128, 0.001, 50_000) == 64
    sizing.out_of_memory(64)  # still too big
    for _ in range(10):
        clock.now += 1.0
        assert sizing.observe(32, 0.001, 50_000) == 32
    clock.now += OUT_OF_MEMORY_HOLD_S
    assert sizing.cap is None
    assert sizing.observe(32, 0.001, 50_000) == 64  # doubling from the hold, not back to 128 at once


def test_a_pinned_size_is_held_too_and_comes_back_after_the_hold():
    clock = FakeClock()
    sizing = BatchPolicy(FixedBatchSize(64), clock)
    sizing.out_of_memory(64)
    assert sizing.observe(64, 0.001, 0) == 32
    clock.now += OUT_OF_MEMORY_HOLD_S
    assert sizing.observe(32, 0.001, 0) == 64
