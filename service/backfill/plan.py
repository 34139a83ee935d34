"""What a backfill will read: the partitions chosen, each one's ``[from, to)``, and where an earlier run of
the same job already got to. Pure: the offsets come from a :class:`PlanLookup`.

Resuming: the job's group holds the offsets its earlier runs committed (delivered, contiguous, as the
service commits), each with the job's range in that partition as its metadata (:func:`note`), as the
job's first run resolved it. A rerun finishes that range, whatever its own flags resolve to now: ``--to
latest`` has moved on since, and a rerun with other bounds must not skip what the job never read (a
different range wants a different ``--job``); where they differ, :attr:`Plan.kept` says so. The partition
starts at the commit, or is done when the commit is at or past the end. A commit without a range (none
recorded) counts only inside this run's ``(from, to]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from service.backfill.bounds import Bound, Clamp, OffsetsLookup, resolve
from service.backfill.ranges import Ranges
from service.errors import UsageError
from service.flow.records import TopicPartition


class PlanLookup(OffsetsLookup, Protocol):
    def partitions(self, topic: str) -> list[int]: ...

    def committed(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, tuple[int, str | None]]: ...


@dataclass(frozen=True, slots=True)
class Plan:
    ranges: Ranges
    clamps: list[Clamp]
    resumed: dict[TopicPartition, int]
    """Partitions an earlier run of the job had got into: the offset this run starts at instead."""
    notes: dict[TopicPartition, str]
    """The job's range of each partition, as the metadata of its commits."""
    kept: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    """Partitions where the job's recorded range differs from what this run's flags resolve to: the
    range the flags gave, which this run does not use."""

    def describe(self) -> dict[str, object]:
        """For the start-up log line: every partition's range, and what was clamped or resumed."""
        ranges = self.ranges
        return {
            "partitions": {
                f"{t}[{p}]": [ranges.starts[(t, p)], ranges.ends[(t, p)]] for t, p in sorted(ranges.starts)
            },
            "offsets": ranges.total,
            "clamped": [f"{c.flag} {c.tp[0]}[{c.tp[1]}]: {c.asked} -> {c.used}" for c in self.clamps],
            "resumed": {f"{t}[{p}]": offset for (t, p), offset in sorted(self.resumed.items())},
            "flags_not_used": {f"{t}[{p}]": list(r) for (t, p), r in sorted(self.kept.items())},
        }


def plan(
    lookup: PlanLookup,
    topics: Sequence[str],
    chosen: Callable[[int], bool],
    first: Bound,
    last: Bound,
) -> Plan:
    """The range of every chosen partition of ``topics``. Raises UsageError when the choice names none
    of them, or when ``--to`` comes before ``--from`` in a partition."""
    tps = [(topic, p) for topic in topics for p in lookup.partitions(topic) if chosen(p)]
    if not tps:
        raise UsageError("--partitions", f"selects none of the partitions of {', '.join(topics)}")
    starts, clamped_from = resolve("--from", first, tps, lookup)
    ends, clamped_to = resolve("--to", last, tps, lookup)
    backwards = [f"{t}[{p}]" for t, p in tps if ends[(t, p)] < starts[(t, p)]]
    if backwards:
        raise UsageError("--to", f"comes before --from in {', '.join(backwards)}")
    resumed, kept = {}, {}
    for tp, (offset, metadata) in lookup.committed(tps).items():
        recorded = range_of(metadata)
        if recorded is not None and recorded != (starts[tp], ends[tp]):
            kept[tp] = (starts[tp], ends[tp])
            starts[tp], ends[tp] = recorded
        if starts[tp] < offset:
            resumed[tp] = min(offset, ends[tp])
    notes = {tp: note(starts[tp], ends[tp]) for tp in tps}
    starts |= resumed
    return Plan(Ranges(starts, ends), clamped_from + clamped_to, resumed, notes, kept)


def job_group(group_id: str, job: str) -> str:
    """The consumer group a backfill job commits its progress under, with ``group_id`` the service's
    (``MICROBATCH_KAFKA__GROUP_ID``): its own, never the live service's."""
    return f"{group_id}-backfill-{job}"


_NOTE = "microbatch-backfill "


def note(start: int, end: int) -> str:
    """A job's range in a partition, as its commits' metadata: ``microbatch-backfill 1000-2000``."""
    return f"{_NOTE}{start}-{end}"


def range_of(metadata: str | None) -> tuple[int, int] | None:
    """The range a commit's metadata records; None when it records none (or not in :func:`note`'s form)."""
    if not metadata or not metadata.startswith(_NOTE):
        return None
    first, _, last = metadata[len(_NOTE) :].partition("-")
    try:
        start, end = int(first), int(last)
    except ValueError:
        return None
    return (start, end) if 0 <= start <= end else None
