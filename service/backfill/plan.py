"""What a backfill will read: the partitions chosen, each one's ``[from, to)``, and where an earlier run of
the same job already got to. Pure: the offsets come from a :class:`PlanLookup`.

Resuming: the job's group holds the offsets its earlier runs committed (delivered, contiguous, as the
service commits). A partition whose commit lies inside ``(from, to]`` starts there; a commit at or past
``to`` means that partition is done; a commit before ``from`` belongs to another range and is ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from service.backfill.bounds import Bound, Clamp, OffsetsLookup, resolve
from service.backfill.ranges import Ranges
from service.errors import UsageError
from service.flow.records import TopicPartition


class PlanLookup(OffsetsLookup, Protocol):
    def partitions(self, topic: str) -> list[int]: ...

    def committed(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]: ...


@dataclass(frozen=True, slots=True)
class Plan:
    ranges: Ranges
    clamps: list[Clamp]
    resumed: dict[TopicPartition, int]
    """Partitions an earlier run of the job had got into: the offset this run starts at instead."""

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
    resumed = {}
    for tp, offset in lookup.committed(tps).items():
        if starts[tp] < offset:
            starts[tp] = resumed[tp] = min(offset, ends[tp])
    return Plan(Ranges(starts, ends), clamped_from + clamped_to, resumed)
