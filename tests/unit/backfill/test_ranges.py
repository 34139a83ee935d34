"""service/backfill/ranges.py and plan.py: how far each partition was read, when the range is done, and
where a run of the same job resumes."""

from __future__ import annotations

import pytest

from service.backfill.bounds import Named, Offsets, Time
from service.backfill.plan import note, plan, range_of
from service.backfill.ranges import Ranges
from service.errors import UsageError
from service.flow.records import InputRecord, TopicPartition

A0: TopicPartition = ("a", 0)
A1: TopicPartition = ("a", 1)


def rec(tp: TopicPartition, offset: int) -> InputRecord:
    return InputRecord(tp[0], tp[1], offset, None, b"{}", None, None, 0.0)


def test_records_past_the_end_are_dropped_and_the_last_one_in_range_finishes_its_partition():
    ranges = Ranges({A0: 10, A1: 0}, {A0: 13, A1: 100})
    kept, finished = ranges.admit([rec(A0, 10), rec(A1, 0), rec(A0, 11), rec(A0, 12), rec(A0, 13)])
    assert [(r.partition, r.offset) for r in kept] == [(0, 10), (1, 0), (0, 11), (0, 12)]
    assert finished == [A0]
    assert ranges.pending == [A1]
    assert (ranges.read, ranges.total) == (3 + 1, 3 + 100)


def test_a_record_past_the_end_finishes_a_partition_whose_last_offsets_held_no_record():
    ranges = Ranges({A0: 0}, {A0: 5})
    assert ranges.admit([rec(A0, 3)]) == ([rec(A0, 3)], [])
    kept, finished = ranges.admit([rec(A0, 7)])  # 4 and 5-6 were transaction markers, say
    assert (kept, finished, ranges.done, ranges.read) == ([], [A0], True, 5)


def test_a_position_at_the_end_finishes_a_partition_and_one_before_it_does_not():
    ranges = Ranges({A0: 0, A1: 0}, {A0: 5, A1: 5})
    assert ranges.reached({A0: 4, A1: 5}) == [A1]
    assert ranges.reached({A1: 9}) == []  # already done: reported once
    assert ranges.reached({A0: 6}) == [A0]
    assert ranges.done


def test_empty_ranges_are_done_from_the_start():
    ranges = Ranges({A0: 7, A1: 9}, {A0: 7, A1: 3})
    assert ranges.done and ranges.total == 0 and ranges.pending == []


class Cluster:
    """Partitions 0 and 1 of topic a holding [0, 100), stamped 10 ms apart; a group's commits."""

    def __init__(self, committed: dict[TopicPartition, int | tuple[int, str]] | None = None) -> None:
        self.commits = {tp: c if isinstance(c, tuple) else (c, None) for tp, c in (committed or {}).items()}

    def partitions(self, topic: str) -> list[int]:
        return [0, 1]

    def watermarks(self, tp):
        return (0, 100)

    def at_time(self, tps, ms):
        return {tp: ms // 10 if ms < 1000 else -1 for tp in tps}

    def committed(self, tps):
        return {tp: o for tp, o in self.commits.items() if tp in tps}


def test_a_plan_reads_the_chosen_partitions_between_the_bounds():
    planned = plan(Cluster(), ["a"], lambda p: p == 1, Time(200), Named("latest"))
    assert planned.ranges.starts == {A1: 20}
    assert planned.ranges.ends == {A1: 100}
    assert planned.resumed == {}
    assert planned.describe()["partitions"] == {"a[1]": [20, 100]}


def test_every_partition_notes_the_jobs_range_for_its_commits():
    planned = plan(Cluster({A0: 60}), ["a"], lambda p: True, Offsets({}, default=20), Named("latest"))
    assert planned.notes == {A0: note(20, 100), A1: note(20, 100)}
    assert range_of(planned.notes[A0]) == (20, 100)
    assert [range_of(m) for m in (None, "", "other", "microbatch-backfill 5", "microbatch-backfill 9-3")] == [
        None
    ] * 5


def test_a_rerun_finishes_the_range_its_job_recorded_whatever_its_flags_say_now():
    # The first run read [20, 60) of [20, 80) in A0 and committed 60 with its range; the rerun says
    # --from earliest --to latest (100 now): it finishes [60, 80), and says the flags were not used.
    planned = plan(
        Cluster({A0: (60, note(20, 80))}), ["a"], lambda p: True, Named("earliest"), Named("latest")
    )
    assert planned.ranges.starts == {A0: 60, A1: 0}
    assert planned.ranges.ends == {A0: 80, A1: 100}
    assert planned.notes[A0] == note(20, 80)
    assert planned.kept == {A0: (0, 100)}
    assert planned.describe()["flags_not_used"] == {"a[0]": [0, 100]}
    # The range done, the job is done there, even though the flags ask for more.
    done = plan(
        Cluster({A0: (80, note(20, 80))}), ["a"], lambda p: p == 0, Named("earliest"), Named("latest")
    )
    assert done.ranges.done


def test_a_run_of_the_same_job_resumes_from_its_commits_inside_the_range():
    # A0 got to 60 of [20, 100): resumed there. A1 committed 10, before this range: ignored.
    planned = plan(Cluster({A0: 60, A1: 10}), ["a"], lambda p: True, Offsets({}, default=20), Named("latest"))
    assert planned.ranges.starts == {A0: 60, A1: 20}
    assert planned.resumed == {A0: 60}
    assert planned.ranges.total == 40 + 80


def test_a_commit_at_or_past_the_end_means_the_partition_is_done():
    planned = plan(Cluster({A0: 100, A1: 250}), ["a"], lambda p: True, Named("earliest"), Time(500))
    assert planned.ranges.done
    assert planned.resumed == {A0: 50, A1: 50}


def test_a_choice_of_no_partition_and_a_backwards_range_are_refused():
    with pytest.raises(UsageError, match="--partitions: selects none of the partitions of a"):
        plan(Cluster(), ["a"], lambda p: p > 5, Named("earliest"), Named("latest"))
    with pytest.raises(UsageError, match=r"--to: comes before --from in a\[0\], a\[1\]"):
        plan(Cluster(), ["a"], lambda p: True, Time(500), Time(100))
