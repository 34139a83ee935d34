"""How each feature of a row comes from the series of its points. Pure.

A metrics format names its points after the OpenTelemetry semantic conventions where the agent's metric has
a counterpart (``service.formats.points``): collectd's ``cpu/percent-user``, Telegraf's ``cpu.usage_user``
and the hostmetrics receiver's ``system.cpu.utilization{state=user}`` all arrive as
``system.cpu.utilization{cpu.mode=user}``. A rule then says how the series of one row (one host, one
interval) make one number: which metric, which attribute values, summed over devices or averaged over CPUs,
or as a share of a total (CPU time by mode, memory by state). A feature without a rule here is read from
the metric of the same name (mean over its series), so a model of one's own can name any metric.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

Attributes = tuple[tuple[str, str], ...]
"""A series' attributes, sorted by name."""

Aggregate = Literal["sum", "mean", "max"]


@dataclass(frozen=True, slots=True)
class Source:
    """One way to read a feature: the series of ``metric`` whose attributes include ``where`` and match
    none of ``exclude``, combined by ``aggregate``.

    With ``share`` = (attribute, value), each group of series that differ only in that attribute gives the
    part of its total that ``value`` holds (CPU time in mode ``user`` among all modes of that CPU), and the
    groups are combined by ``aggregate``."""

    metric: str
    where: Attributes = ()
    share: tuple[str, str] | None = None
    aggregate: Aggregate = "mean"
    exclude: tuple[tuple[str, re.Pattern[str]], ...] = field(default=())

    def matches(self, attributes: Mapping[str, str]) -> bool:
        """Whether a series with these attributes feeds this source."""
        for k, v in self.where:
            if attributes.get(k) != v:
                return False
        return not any(pattern.fullmatch(attributes.get(k, "")) for k, pattern in self.exclude)

    def counts(self, attributes: Mapping[str, str]) -> bool:
        """Whether a series with these attributes makes this source computable (for a share: the
        wanted value's series; its total needs the others too, which come in the same burst)."""
        if self.share is None:
            return True
        name, value = self.share
        return attributes.get(name) == value

    def value(self, series: Iterable[tuple[Attributes, float]]) -> float | None:
        """The feature from the series of one row that :meth:`matches` (None: none of them)."""
        if self.share is None:
            values = [v for _attrs, v in series]
            return _combine(values, self.aggregate)
        name, wanted = self.share
        part: dict[Attributes, float] = {}
        total: dict[Attributes, float] = {}
        for attrs, v in series:
            group = tuple(kv for kv in attrs if kv[0] != name)
            total[group] = total.get(group, 0.0) + v
            if (name, wanted) in attrs:
                part[group] = part.get(group, 0.0) + v
        shares = [part[g] / total[g] for g in part if total[g] > 0]
        return _combine(shares, self.aggregate)


@dataclass(frozen=True, slots=True)
class Rule:
    """A feature and its sources, in order of preference: the first that yields a value wins."""

    feature: str
    sources: tuple[Source, ...]


def _combine(values: Sequence[float], aggregate: Aggregate) -> float | None:
    if not values:
        return None
    if aggregate == "sum":
        return float(sum(values))
    if aggregate == "max":
        return float(max(values))
    return float(sum(values)) / len(values)


def _where(**attributes: str) -> Attributes:
    return tuple(sorted((k.replace("_", "."), v) for k, v in attributes.items()))


# Loopback is the host talking to itself; partitions, loop devices and device-mapper volumes count bytes
# their whole disk (or a disk underneath) counts already.
_LOOPBACK = (("network.interface.name", re.compile(r"lo\d*")),)
_NOT_WHOLE_DISKS = (
    (
        "system.device",
        re.compile(
            r"(?:sd|vd|xvd|hd)[a-z]+\d+|nvme\d+n\d+p\d+|mmcblk\d+p\d+|loop\d+|ram\d+|dm-\d+|sr\d+|fd\d+"
        ),
    ),
)


# Pseudo and read-only filesystems (Telegraf's disk input leaves the same ones out by default): a squashfs
# image is always 100% full, and that is no disk filling up. collectd names a mount point with dashes
# ("/dev/shm" -> "dev-shm"); the others keep it whole.
_NOT_DISKS = (
    (
        "system.filesystem.mountpoint",
        re.compile(r"(?:/?(?:dev|run|sys|proc|snap)(?:[-/].*)?)|/var/lib/docker/.*|/var/lib/kubelet/.*"),
    ),
    ("system.filesystem.type", re.compile(r"tmpfs|devtmpfs|devfs|squashfs|overlay|aufs|iso9660|ramfs|nsfs")),
)


def _cpu(mode: str) -> Rule:
    return Rule(
        f"system.cpu.utilization.{mode}",
        (
            Source("system.cpu.utilization", _where(cpu_mode=mode)),
            Source("system.cpu.time", share=("cpu.mode", mode)),
        ),
    )


def _network(metric: str, direction: str) -> Rule:
    return Rule(
        f"{metric}.{direction}",
        (Source(metric, (("network.io.direction", direction),), aggregate="sum", exclude=_LOOPBACK),),
    )


def _disk(direction: str) -> Rule:
    return Rule(
        f"system.disk.io.{direction}",
        (
            Source(
                "system.disk.io",
                (("disk.io.direction", direction),),
                aggregate="sum",
                exclude=_NOT_WHOLE_DISKS,
            ),
        ),
    )


SEMCONV: dict[str, Rule] = {
    rule.feature: rule
    for rule in (
        *(
            _cpu(mode)
            for mode in ("user", "system", "iowait", "idle", "nice", "interrupt", "softirq", "steal")
        ),
        Rule(
            "system.memory.utilization",
            (
                Source("system.memory.utilization", (("system.memory.state", "used"),), aggregate="max"),
                # collectd's memory states add up to the total; gopsutil's (hostmetrics) overlap a little
                # (cached includes slab_reclaimable), within a few percent.
                Source(
                    "system.memory.usage",
                    share=("system.memory.state", "used"),
                    exclude=(("system.memory.state", re.compile("available")),),
                ),
            ),
        ),
        *(
            Rule(
                f"system.cpu.load_average.{span}",
                (Source(f"system.cpu.load_average.{span}", aggregate="max"),),
            )
            for span in ("1m", "5m", "15m")
        ),
        *(
            _network(metric, direction)
            for metric in (
                "system.network.io",
                "system.network.packet.count",
                "system.network.errors",
                "system.network.packet.dropped",
            )
            for direction in ("receive", "transmit")
        ),
        _disk("read"),
        _disk("write"),
        Rule(
            "system.filesystem.utilization",
            (
                # used / (used + free), the blocks reserved for root left out: Telegraf's used_percent, the
                # receiver's utilization and df's Use% are that; collectd's percent_bytes is of the whole
                # size, 5% lower on a default ext4, so its df_complex bytes come first.
                Source(
                    "system.filesystem.usage",
                    share=("system.filesystem.state", "used"),
                    aggregate="max",
                    exclude=(*_NOT_DISKS, ("system.filesystem.state", re.compile("reserved"))),
                ),
                Source("system.filesystem.utilization", aggregate="max", exclude=_NOT_DISKS),
            ),
        ),
    )
}
"""The rules for the host features of the semantic conventions (``host-anomaly``'s, and more)."""


def rules_for(features: Sequence[str]) -> list[Rule]:
    """One rule per feature, in order: the semantic-convention rule, else the metric of the same name."""
    return [SEMCONV.get(f) or Rule(f, (Source(f),)) for f in features]
