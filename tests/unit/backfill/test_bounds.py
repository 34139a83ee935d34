"""service/backfill/bounds.py: the forms a range's ends are written in, and their offsets per partition."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from service.backfill.bounds import Named, Offsets, Time, parse, parse_partitions, resolve
from service.errors import UsageError
from service.flow.records import TopicPartition

NOW_MS = 1_764_547_200_000  # 2025-12-01T00:00:00Z
A0: TopicPartition = ("a", 0)
A1: TopicPartition = ("a", 1)
B0: TopicPartition = ("b", 0)


def bound(text: str):
    return parse("--from", text, lambda: NOW_MS)


class Lookup:
    """Partitions holding offsets [low, high); records stamped ``ms_per_offset`` apart from ``base_ms``."""

    def __init__(
        self, marks: dict[TopicPartition, tuple[int, int]], base_ms: int = 0, ms_per_offset: int = 10
    ):
        self.marks, self.base_ms, self.step = marks, base_ms, ms_per_offset
        self.asked_times: list[int] = []

    def watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        return self.marks[tp]

    def at_time(self, tps: Sequence[TopicPartition], ms: int) -> dict[TopicPartition, int]:
        self.asked_times.append(ms)
        found = {}
        for tp in tps:
            low, high = self.marks[tp]
            first = max(low, -(-(ms - self.base_ms) // self.step))  # first offset stamped >= ms
            found[tp] = first if first < high else -1
        return found


def test_named_bounds_and_now():
    assert bound("earliest") == Named("earliest")
    assert bound(" latest ") == Named("latest")
    assert bound("now") == Time(NOW_MS, now=True)


def test_times_iso_with_a_zone_or_epoch_milliseconds():
    assert bound("2025-12-01T00:00:00Z") == Time(NOW_MS)
    assert bound("2025-12-01T01:00:00+01:00") == Time(NOW_MS)
    assert bound("2025-12-01T00:00:00.250Z") == Time(NOW_MS + 250)
    assert bound(f"@{NOW_MS}") == Time(NOW_MS)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("2025-12-01T00:00:00", "no time zone"),
        ("1500", "ambiguous: write *=1500"),
        ("@soon", "epoch milliseconds"),
        ("yesterday", "earliest, latest, now"),
        ("0=-1", "is not P=OFFSET"),
        ("x=3", "is not P=OFFSET"),
        ("0=3,1", "is not P=OFFSET"),
        ("-1=5", "is not P=OFFSET"),
        ("@-3", "epoch milliseconds"),
    ],
)
def test_what_is_not_a_bound_is_refused_naming_the_flag(text, says):
    with pytest.raises(UsageError) as caught:
        bound(text)
    assert str(caught.value).startswith("--from: ")
    assert says in str(caught.value)


def test_offsets_per_partition_per_topic_and_for_the_rest():
    spec = bound("0=10, b:0=7, *=3")
    assert isinstance(spec, Offsets)
    assert spec.of(A0) == 10
    assert spec.of(B0) == 7  # the topic's own entry wins over the bare partition's
    assert spec.of(A1) == 3
    assert bound("1=5").of(A0) is None


def test_resolving_named_bounds_reads_the_watermarks():
    lookup = Lookup({A0: (5, 100), A1: (0, 40)})
    assert resolve("--from", Named("earliest"), [A0, A1], lookup) == ({A0: 5, A1: 0}, [])
    assert resolve("--to", Named("latest"), [A0, A1], lookup) == ({A0: 100, A1: 40}, [])


def test_a_time_is_the_first_offset_stamped_at_or_after_it_and_the_end_past_the_last():
    lookup = Lookup({A0: (0, 100), A1: (0, 40)}, base_ms=NOW_MS, ms_per_offset=10)
    offsets, clamps = resolve("--from", Time(NOW_MS + 501), [A0, A1], lookup)
    assert offsets == {A0: 51, A1: 40}  # A1's last record is stamped +390 ms: nothing at or after
    assert clamps == []
    assert lookup.asked_times == [NOW_MS + 501]


def test_offsets_outside_what_a_partition_holds_are_clamped_and_reported():
    lookup = Lookup({A0: (20, 100), A1: (0, 40)})
    offsets, clamps = resolve("--to", Offsets({(None, 0): 5}, default=70), [A0, A1], lookup)
    assert offsets == {A0: 20, A1: 40}
    assert [(c.tp, c.flag, c.asked, c.used) for c in clamps] == [(A0, "--to", 5, 20), (A1, "--to", 70, 40)]


def test_per_partition_offsets_must_name_every_partition_read():
    lookup = Lookup({A0: (0, 10), A1: (0, 10)})
    with pytest.raises(UsageError, match=r"--from: no offset for partition\(s\) a\[1\]"):
        resolve("--from", Offsets({(None, 0): 1}), [A0, A1], lookup)


@pytest.mark.parametrize(
    ("spec", "chosen"),
    [(None, set(range(12))), ("", set(range(12))), ("0,3-5, 9", {0, 3, 4, 5, 9}), ("1/4", {1, 5, 9})],
)
def test_partitions_a_process_reads(spec, chosen):
    pick = parse_partitions("--partitions", spec)
    assert {p for p in range(12) if pick(p)} == chosen


def test_indexed_splits_cover_every_partition_exactly_once():
    for count in (1, 2, 3, 5, 12, 16):
        picks = [parse_partitions("--partitions", f"{i}/{count}") for i in range(count)]
        for p in range(12):
            assert sum(pick(p) for pick in picks) == 1


@pytest.mark.parametrize("spec", ["4/4", "-1/4", "1/0", "a", "5-3", "1,,2", "-2", "0-"])
def test_bad_partition_choices_are_refused(spec):
    with pytest.raises(UsageError, match="--partitions: "):
        parse_partitions("--partitions", spec)


def test_offsets_naming_a_partition_not_read_are_refused():
    lookup = Lookup({A0: (0, 10), A1: (0, 10)})
    with pytest.raises(UsageError, match=r"--to: names partition\(s\) 2, lgs:0 that this run does not read"):
        resolve("--to", Offsets({(None, 2): 5, ("lgs", 0): 1}, default=3), [A0, A1], lookup)
