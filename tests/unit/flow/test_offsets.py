"""service/flow/offsets.py: the commit watermark is the first consumed offset that is not yet done."""

from __future__ import annotations

import random

import pytest

from service.errors import OffsetOrderError
from service.flow.offsets import OffsetTracker

TP = ("logs", 0)
OTHER = ("logs", 1)


def tracker_with(tp, offsets) -> OffsetTracker:
    tracker = OffsetTracker()
    for offset in offsets:
        tracker.track(tp, offset)
    return tracker


def ack(tracker: OffsetTracker, tp, offsets) -> None:
    for offset in offsets:
        tracker.done(tp, offset)


def test_worked_example_from_the_module_docstring():
    tracker = tracker_with(TP, range(34, 41))
    ack(tracker, TP, [34, 35, 36, 40])
    assert tracker.take_committable() == {TP: 37}
    ack(tracker, TP, [37, 38, 39])
    assert tracker.take_committable() == {TP: 41}


def test_nothing_committable_until_the_first_offset_is_done():
    tracker = tracker_with(TP, range(10, 15))
    ack(tracker, TP, [11, 12, 13, 14])
    assert tracker.take_committable() == {}
    tracker.done(TP, 10)
    assert tracker.take_committable() == {TP: 15}


def test_gaps_in_consumed_offsets_do_not_stall_the_watermark():
    tracker = tracker_with(TP, [5, 9, 12])
    ack(tracker, TP, [12, 9])
    assert tracker.take_committable() == {}
    tracker.done(TP, 5)
    assert tracker.take_committable() == {TP: 13}
    assert tracker.in_flight(TP) == 0


def test_gap_watermark_never_passes_an_offset_in_flight():
    tracker = tracker_with(TP, [5, 9, 12])
    ack(tracker, TP, [5, 12])
    (committed,) = tracker.take_committable().values()
    # Committing this must re-deliver 9 after a restart: 9 is not done.
    assert 5 < committed <= 9


def test_partitions_are_independent():
    tracker = OffsetTracker()
    for offset in range(3):
        tracker.track(TP, offset)
        tracker.track(OTHER, 100 + offset)
    ack(tracker, OTHER, [100, 101])
    tracker.done(TP, 1)
    assert tracker.take_committable() == {OTHER: 102}
    tracker.done(TP, 0)
    assert tracker.take_committable() == {TP: 2}
    assert tracker.in_flight(TP) == 1
    assert tracker.in_flight(OTHER) == 1


def test_take_committable_returns_only_partitions_that_moved():
    tracker = OffsetTracker()
    tracker.track(TP, 0)
    tracker.track(TP, 1)
    tracker.track(OTHER, 0)
    tracker.done(TP, 0)
    tracker.done(OTHER, 0)
    assert tracker.take_committable() == {TP: 1, OTHER: 1}
    # Nothing moved since the last call.
    assert tracker.take_committable() == {}
    tracker.done(TP, 1)
    assert tracker.take_committable() == {TP: 2}


def test_an_ack_that_does_not_move_the_watermark_reports_nothing():
    tracker = tracker_with(TP, range(3))
    tracker.done(TP, 0)
    tracker.take_committable()
    tracker.done(TP, 2)
    assert tracker.take_committable() == {}


@pytest.mark.parametrize("lower", [0, 4, 5])
def test_tracking_at_or_below_the_last_tracked_offset_is_refused(lower):
    tracker = tracker_with(TP, [3, 5])
    with pytest.raises(OffsetOrderError):
        tracker.track(TP, lower)


def test_tracking_below_the_committed_watermark_is_refused():
    tracker = tracker_with(TP, [7, 8])
    ack(tracker, TP, [7, 8])
    assert tracker.take_committable() == {TP: 9}
    with pytest.raises(OffsetOrderError):
        tracker.track(TP, 8)
    tracker.track(TP, 9)  # the next one is fine
    assert tracker.in_flight(TP) == 1


def test_tracking_order_is_per_partition():
    tracker = tracker_with(TP, [50])
    tracker.track(OTHER, 1)  # lower than TP's, but another partition
    assert tracker.in_flight() == 2


@pytest.mark.parametrize(
    ("consumed", "acked", "stale"),
    [
        ([10, 11, 12], [9], "below the range in flight"),
        ([10, 11, 12], [13], "above the range in flight"),
        ([10, 11], [10, 10], "already done"),
        ([1], [1, 2], "nothing in flight"),
        ([5, 9, 12], [7], "inside a gap, never consumed"),
    ],
)
def test_an_ack_not_in_flight_is_counted_as_stale_and_moves_nothing(consumed, acked, stale):
    tracker = tracker_with(TP, consumed)
    *first, last = acked
    ack(tracker, TP, first)
    before = tracker.take_committable()
    assert tracker.done(TP, last) is False, stale
    assert tracker.stale_acks == 1
    assert tracker.take_committable() == {}
    assert tracker.in_flight(TP) == len(set(consumed) - set(first)), before


def test_a_late_ack_from_before_a_reassignment_counts_for_the_reread_offset():
    """Outputs queued before a revoke may be acknowledged after the partition came back. That output
    exists, so the offset really is done; the second ack for it is then stale."""
    tracker = tracker_with(TP, [1, 2])
    tracker.forget([TP])
    tracker.track(TP, 1)
    tracker.track(TP, 2)
    assert tracker.done(TP, 1) is True  # the old output's ack
    assert tracker.take_committable() == {TP: 2}
    assert tracker.done(TP, 1) is False  # the new output's ack
    assert tracker.stale_acks == 1


def test_acks_for_forgotten_partitions_are_ignored():
    tracker = tracker_with(TP, [1, 2, 3])
    tracker.track(OTHER, 1)
    tracker.forget([TP])
    tracker.done(TP, 1)  # revoked meanwhile: no error
    tracker.done(TP, 99)
    assert tracker.take_committable() == {}
    assert tracker.in_flight(TP) == 0
    assert tracker.in_flight() == 1


def test_forget_drops_a_pending_watermark_move():
    tracker = tracker_with(TP, [1, 2])
    tracker.done(TP, 1)
    tracker.forget([TP])
    assert tracker.take_committable() == {}


def test_a_forgotten_partition_starts_afresh_when_tracked_again():
    tracker = tracker_with(TP, [10, 11])
    ack(tracker, TP, [10, 11])
    tracker.forget([TP])
    tracker.track(TP, 3)  # re-assigned and re-read from an older commit: allowed
    tracker.done(TP, 3)
    assert tracker.take_committable() == {TP: 4}


def test_in_flight_counts_per_partition_and_in_total():
    tracker = OffsetTracker()
    assert tracker.in_flight() == 0
    assert tracker.in_flight(TP) == 0
    for offset in range(4):
        tracker.track(TP, offset)
    tracker.track(OTHER, 0)
    assert tracker.in_flight(TP) == 4
    assert tracker.in_flight(OTHER) == 1
    assert tracker.in_flight() == 5
    ack(tracker, TP, [0, 1])
    assert tracker.in_flight(TP) == 2
    assert tracker.in_flight() == 3
    assert tracker.in_flight(("unknown", 0)) == 0


def test_in_flight_excludes_done_offsets_waiting_behind_a_gap():
    tracker = tracker_with(TP, range(34, 41))
    ack(tracker, TP, [34, 35, 36, 40])
    # The module docstring: "acked 34 35 36 40 -> commit 37 (37, 38, 39 still in flight)".
    assert tracker.in_flight(TP) == 3


# -- property-style: random ack orders against a reference model ------------------------------------------


def min_not_acked(consumed: list[int], acked: set[int]) -> int:
    """Reference for consecutive offsets: the first offset not acknowledged (or one past the last)."""
    return min((o for o in consumed if o not in acked), default=consumed[-1] + 1)


@pytest.mark.parametrize("seed", range(25))
def test_random_ack_orders_match_the_min_not_acked_reference(seed):
    rng = random.Random(seed)
    start = rng.randrange(0, 1000)
    consumed = list(range(start, start + rng.randrange(1, 40)))
    tracker = tracker_with(TP, consumed)
    order = consumed[:]
    rng.shuffle(order)
    acked: set[int] = set()
    last_commit = start
    for offset in order:
        tracker.done(TP, offset)
        acked.add(offset)
        expected = min_not_acked(consumed, acked)
        got = tracker.take_committable()
        if expected != last_commit:
            assert got == {TP: expected}, f"after acking {offset} of {order}"
            last_commit = expected
        else:
            assert got == {}, f"after acking {offset} of {order}"
    assert last_commit == consumed[-1] + 1
    assert tracker.in_flight() == 0


def prefix_reference(consumed: list[int], acked: set[int]) -> int | None:
    """With gaps: one past the last offset of the fully acked prefix of consumed offsets."""
    committable = None
    for offset in consumed:
        if offset not in acked:
            break
        committable = offset + 1
    return committable


@pytest.mark.parametrize("seed", range(25))
def test_interleaved_tracking_and_acks_with_gaps_match_the_reference(seed):
    rng = random.Random(1000 + seed)
    tracker = OffsetTracker()
    consumed: list[int] = []
    in_flight: list[int] = []
    acked: set[int] = set()
    next_offset = rng.randrange(0, 50)
    last_commit = None
    for _ in range(200):
        if in_flight and rng.random() < 0.5:
            offset = in_flight.pop(rng.randrange(len(in_flight)))
            tracker.done(TP, offset)
            acked.add(offset)
        else:
            tracker.track(TP, next_offset)
            consumed.append(next_offset)
            in_flight.append(next_offset)
            next_offset += rng.choice([1, 1, 1, 2, 5])  # compaction leaves gaps
        expected = prefix_reference(consumed, acked)
        got = tracker.take_committable()
        if expected != last_commit:
            assert got == {TP: expected}
            last_commit = expected
        else:
            assert got == {}
        # Never past an offset whose output is not acknowledged.
        if last_commit is not None:
            assert all(o in acked for o in consumed if o < last_commit)


# -- fan-out: one message, many outputs ---------------------------------------------------------------


def test_an_offset_with_many_outputs_is_done_only_with_the_last_one():
    tracker = tracker_with(TP, [10, 11])
    tracker.expect(TP, 10, 3)
    ack(tracker, TP, [10, 11, 10])
    assert tracker.take_committable() == {}  # one output of offset 10 is still out
    assert tracker.in_flight() == 1
    ack(tracker, TP, [10])
    assert tracker.take_committable() == {TP: 12}
    assert tracker.in_flight() == 0


def test_a_message_with_no_items_is_done_at_once_but_waits_for_the_ones_before_it():
    tracker = tracker_with(TP, [5, 6, 7])
    tracker.expect(TP, 6, 0)
    assert tracker.take_committable() == {}
    ack(tracker, TP, [5])
    assert tracker.take_committable() == {TP: 7}
    tracker.expect(TP, 7, 0)
    assert tracker.take_committable() == {TP: 8}


def test_in_flight_counts_outputs_so_back_pressure_sees_items():
    tracker = tracker_with(TP, [1, 2])
    tracker.expect(TP, 1, 500)
    assert tracker.in_flight() == 501
    assert tracker.in_flight(TP) == 501
    tracker.forget([TP])
    assert tracker.in_flight() == 0


def test_fan_out_in_random_ack_order_never_commits_an_unfinished_message():
    rng = random.Random(3)
    tracker = tracker_with(TP, range(20))
    outputs = {offset: rng.randint(0, 4) for offset in range(20)}
    for offset, n in outputs.items():
        tracker.expect(TP, offset, n)
    pending = [offset for offset, n in outputs.items() for _ in range(n)]
    rng.shuffle(pending)
    left = dict(outputs)
    committed = 0
    for offset in pending:
        tracker.done(TP, offset)
        left[offset] -= 1
        committed = tracker.take_committable().get(TP, committed)
        # Everything below the committed offset has had all its outputs acknowledged.
        assert all(left[o] == 0 for o in range(committed))
    assert committed == 20
    assert tracker.stale_acks == 0


def test_a_fan_out_count_for_an_offset_forgotten_by_a_rewind_is_ignored():
    # A consumed group 100, 50 of one partition: the rewind to 50 forgets 100 before its count arrives.
    tracker = tracker_with(TP, [100])
    tracker.forget([TP])
    tracker.track(TP, 50)
    tracker.expect(TP, 100, 3)
    assert tracker.in_flight() == 1
    ack(tracker, TP, [50])
    assert tracker.take_committable() == {TP: 51}


# -- runs: track_run / done_run are track / done for many offsets at once ---------------------------------


@pytest.mark.parametrize("seed", range(25))
def test_runs_commit_exactly_what_one_by_one_commits(seed):
    """The same consumption and acks, once offset by offset and once in runs: the same commits, the same
    in-flight count, the same stale acks, fan-out included."""
    rng = random.Random(2000 + seed)
    single, runs = OffsetTracker(), OffsetTracker()
    next_offset = rng.randrange(0, 50)
    in_flight: list[int] = []
    for _ in range(60):
        if in_flight and rng.random() < 0.5:
            rng.shuffle(in_flight)
            cut = rng.randint(1, len(in_flight))
            acked, in_flight = in_flight[:cut], in_flight[cut:]
            if rng.random() < 0.2:
                acked.append(next_offset + 1000)  # never consumed: stale
            for offset in acked:
                single.done(TP, offset)
            runs.done_run(TP, acked)
        else:
            offsets = []
            for _ in range(rng.randint(1, 6)):
                offsets.append(next_offset)
                next_offset += rng.choice([1, 1, 1, 2, 5])  # compaction leaves gaps
            for offset in offsets:
                single.track(TP, offset)
            runs.track_run(TP, offsets)
            outputs = rng.choice([1, 1, 1, 2])
            if outputs != 1:  # a message of several items: acked once per output
                single.expect(TP, offsets[0], outputs)
                runs.expect(TP, offsets[0], outputs)
                in_flight += [offsets[0]] * (outputs - 1)
            in_flight += offsets
        assert runs.take_committable() == single.take_committable()
        assert runs.in_flight() == single.in_flight()
        assert runs.stale_acks == single.stale_acks


@pytest.mark.parametrize(
    ("tracked", "run"),
    [([10], [10, 11]), ([10], [9]), ([], [5, 7, 6]), ([], [5, 5])],
    ids=["at the last tracked", "below it", "not rising", "repeated"],
)
def test_a_run_that_does_not_rise_is_refused_and_tracks_none_of_it(tracked, run):
    tracker = tracker_with(TP, tracked)
    with pytest.raises(OffsetOrderError):
        tracker.track_run(TP, run)
    assert tracker.in_flight() == len(tracked)


def test_acks_in_a_run_for_a_partition_never_tracked_are_stale():
    tracker = OffsetTracker()
    tracker.done_run(OTHER, [1, 2, 3])
    assert tracker.stale_acks == 3
    assert tracker.take_committable() == {}
