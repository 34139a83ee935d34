"""What every renderer of :mod:`service.tools.generate.agents` starts from: a host's rows as the samples an
agent reads, with interval counts, cumulative counters since boot, memory and filesystem in bytes, and CPU
jiffies per state and per CPU. Deterministic: boot time and counter bases come from the host name.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from service.tools.generate._hosts import USER_HZ, name_seed

Sample = tuple[float, Mapping[str, float | None]]

CPU_STATES = ("user", "system", "wait", "nice", "interrupt", "softirq", "steal", "idle")
"""collectd's cpu type_instances, in the order it sends them (hostmetrics: the same names)."""
RESERVED_SHARE = 0.05  # of a filesystem, for root (ext4's default)
SOFTIRQ_SHARE = 0.01  # of the busy time, taken from idle
IO_SIZE = 64 * 1024  # bytes per disk operation, for the operation counters
NS = 1_000_000_000

GROUPS: dict[str, tuple[str, ...]] = {
    "cpu": ("system.cpu.utilization.user", "system.cpu.utilization.system", "system.cpu.utilization.iowait"),
    "memory": ("system.memory.utilization",),
    "load": ("system.cpu.load_average.1m", "system.cpu.load_average.5m", "system.cpu.load_average.15m"),
    "network": (
        "system.network.io.receive",
        "system.network.io.transmit",
        "system.network.packet.count.receive",
        "system.network.packet.count.transmit",
        "system.network.errors.receive",
        "system.network.errors.transmit",
    ),
    "disk": ("system.disk.io.read", "system.disk.io.write"),
    "filesystem": ("system.filesystem.utilization",),
}
# Counters per interval: name -> the row's rate it grows by (loopback comes from the cpu, see _loopback).
COUNTERS = {
    "rx_bytes": "system.network.io.receive",
    "tx_bytes": "system.network.io.transmit",
    "rx_packets": "system.network.packet.count.receive",
    "tx_packets": "system.network.packet.count.transmit",
    "rx_errors": "system.network.errors.receive",
    "tx_errors": "system.network.errors.transmit",
    "read_bytes": "system.disk.io.read",
    "write_bytes": "system.disk.io.write",
}


# ---------------------------------------------------------------------------------------------- the host


@dataclass(frozen=True)
class Point:
    """One sample, with everything the renderers need: the row's groups present, interval counts and
    cumulative counters since boot."""

    time: float
    interval: float
    first: bool
    has: dict[str, bool]
    row: Mapping[str, float | None]
    jiffies: dict[str, int]  # this interval, per state, the whole host
    cpu_jiffies: dict[str, float]  # cumulative since boot, per state, the whole host
    per_cpu_jiffies: list[dict[str, float]]  # cumulative since boot, per CPU and state
    counts: dict[str, int]  # this interval
    totals: dict[str, int]  # cumulative since boot
    memory: dict[str, int]
    filesystem: dict[str, int]


class Host:
    def __init__(
        self,
        host: str,
        samples: Sequence[Sample],
        cpus: int,
        memory_bytes: int,
        filesystem_bytes: int,
        interval_s: float | None,
    ) -> None:
        if not samples:
            raise ValueError("no samples")
        if cpus < 1 or memory_bytes < 1 or filesystem_bytes < 1:
            raise ValueError("cpus, memory_bytes and filesystem_bytes must be positive")
        times = [float(t) for t, _ in samples]
        if any(b <= a for a, b in itertools.pairwise(times)):
            raise ValueError("sample times must increase")
        if interval_s is None:
            gaps = sorted(b - a for a, b in itertools.pairwise(times))
            interval_s = gaps[len(gaps) // 2] if gaps else 10.0
        self.name, self.cpus = host, cpus
        self.memory_bytes, self.filesystem_bytes = memory_bytes, filesystem_bytes
        self.interval = float(interval_s)
        seed = name_seed(host)
        self.uptime0 = 86_400 * (1 + seed % 40) + seed % 86_400  # at the first sample
        self.boot = int(times[0] - self.interval) - self.uptime0
        self.points = self._points(samples)

    def _points(self, samples: Sequence[Sample]) -> list[Point]:
        seed = name_seed(self.name)
        since_boot = float(self.uptime0)
        # Counters start from what the host has done since boot, at a rate of its rows' typical values.
        totals = {}
        for key, feature in COUNTERS.items():
            rates = [r.get(feature) for _, r in samples]
            mean = sum(v for v in rates if v is not None) / max(1, sum(v is not None for v in rates))
            totals[key] = int(mean * since_boot * (0.5 + (seed % 1000) / 2000))
        totals["lo_bytes"] = int(2e4 * since_boot)
        totals["lo_packets"] = totals["lo_bytes"] // 900
        totals["rx_dropped"] = seed % 97
        totals["tx_dropped"] = 0
        totals["reads"] = totals["read_bytes"] // IO_SIZE
        totals["writes"] = totals["write_bytes"] // IO_SIZE
        cpu_total = {s: 0.0 for s in CPU_STATES}
        cpu_total["idle"] = USER_HZ * since_boot * self.cpus * 0.8
        cpu_total["user"] = USER_HZ * since_boot * self.cpus * 0.15
        cpu_total["system"] = USER_HZ * since_boot * self.cpus * 0.05
        per_cpu_total = [{s: v / self.cpus for s, v in cpu_total.items()} for _ in range(self.cpus)]
        points = []
        previous_time = None
        for k, (when, row) in enumerate(samples):
            t = float(when)
            interval = self.interval if previous_time is None else t - previous_time
            previous_time = t
            has = {g: all(row.get(f) is not None for f in fs) for g, fs in GROUPS.items()}
            jiffies = self._jiffies(row, interval) if has["cpu"] else {}
            for state, j in jiffies.items():
                cpu_total[state] += j
            for total, part in zip(per_cpu_total, self._spread(jiffies), strict=True):
                for state, seconds in part.items():
                    total[state] += seconds
            counts: dict[str, int] = {}
            if has["network"]:
                for key in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_errors", "tx_errors"):
                    counts[key] = max(0, round(float(row[COUNTERS[key]] or 0.0) * interval))
            if has["disk"]:
                for key in ("read_bytes", "write_bytes"):
                    counts[key] = max(0, round(float(row[COUNTERS[key]] or 0.0) * interval))
                counts["reads"] = math.ceil(counts["read_bytes"] / IO_SIZE)
                counts["writes"] = math.ceil(counts["write_bytes"] / IO_SIZE)
            busy = (jiffies.get("user", 0) + jiffies.get("system", 0)) / max(1, sum(jiffies.values()) or 1)
            counts["lo_bytes"] = round((1.5e4 + 6e4 * busy + 997 * (k % 7)) * interval)
            counts["lo_packets"] = max(1, counts["lo_bytes"] // 900)
            for key, value in counts.items():
                totals[key] = totals.get(key, 0) + value
            points.append(
                Point(
                    time=t,
                    interval=interval,
                    first=k == 0,
                    has=has,
                    row=row,
                    jiffies=jiffies,
                    cpu_jiffies=dict(cpu_total),
                    per_cpu_jiffies=[dict(t) for t in per_cpu_total],
                    counts=counts,
                    totals=dict(totals),
                    memory=self._memory(row) if has["memory"] else {},
                    filesystem=self._filesystem(row) if has["filesystem"] else {},
                )
            )
        return points

    def _jiffies(self, row: Mapping[str, float | None], interval: float) -> dict[str, int]:
        total = max(1, round(USER_HZ * interval * self.cpus))

        def share(feature: str) -> int:
            return max(0, round(min(1.0, max(0.0, float(row[feature] or 0.0))) * total))

        user = min(share("system.cpu.utilization.user"), total)
        system = min(share("system.cpu.utilization.system"), total - user)
        wait = min(share("system.cpu.utilization.iowait"), total - user - system)
        softirq = min(round(SOFTIRQ_SHARE * (user + system)), total - user - system - wait)
        idle = total - user - system - wait - softirq
        jiffies = dict.fromkeys(CPU_STATES, 0)
        jiffies.update(user=user, system=system, wait=wait, softirq=softirq, idle=idle)
        return jiffies

    def _memory(self, row: Mapping[str, float | None]) -> dict[str, int]:
        """Linux memory in bytes: used = the row's share of the total (= total - available)."""
        total = self.memory_bytes
        used = pages(min(1.0, max(0.0, float(row["system.memory.utilization"] or 0.0))) * total)
        rest = total - used
        buffered, cached = pages(0.03 * rest), pages(0.5 * rest)
        slab_recl, slab_unrecl = pages(0.08 * cached), pages(0.01 * rest)
        return {
            "total": total,
            "used": used,
            "available": rest,
            "free": rest - buffered - cached,  # used + free + buffered + cached = total
            "buffered": buffered,
            "cached": cached,  # gopsutil's Cached: the page cache and SReclaimable
            "slab_recl": slab_recl,
            "slab_unrecl": slab_unrecl,
        }

    def _filesystem(self, row: Mapping[str, float | None]) -> dict[str, int]:
        """``/`` in bytes: used / (used + free) = the row's share; 5 % reserved for root."""
        size = pages(self.filesystem_bytes)
        reserved = pages(RESERVED_SHARE * size)
        share = min(1.0, max(0.0, float(row["system.filesystem.utilization"] or 0.0)))
        used = pages(share * (size - reserved))
        inodes = max(1024, size // (16 * 1024))
        inodes_used = min(inodes, int(inodes * (0.02 + 0.5 * share)))
        return {
            "size": size,
            "used": used,
            "free": size - reserved - used,
            "reserved": reserved,
            "inodes": inodes,
            "inodes_used": inodes_used,
        }

    def per_cpu_seconds(self, point: Point) -> list[dict[str, float]]:
        """Cumulative seconds per CPU and state (:meth:`_spread` of every interval so far)."""
        return [{s: total[s] / USER_HZ for s in CPU_STATES} for total in point.per_cpu_jiffies]

    def _spread(self, jiffies: Mapping[str, int]) -> list[dict[str, float]]:
        """One interval's jiffies of the host spread over its CPUs: unevenly for the busy states (CPU i a
        little busier or idler than the mean), every CPU with the same total and none busier than that, so
        every CPU's counters only ever grow."""
        c = self.cpus
        weights = [1.0 + 0.3 * math.sin(1.7 * i + 0.5) for i in range(c)]
        mean = sum(weights) / c
        weights = [w / mean for w in weights]
        busy = sum(v for s, v in jiffies.items() if s != "idle")
        capacity = sum(jiffies.values()) / c
        spread = max((w - 1.0) for w in weights) if c > 1 else 0.0
        alpha = 1.0 if spread == 0 else min(1.0, max(0.0, (capacity * c / max(busy, 1e-9) - 1.0) / spread))
        out = []
        for w in weights:
            scale = 1.0 + alpha * (w - 1.0)
            states = {s: float(v) / c * scale for s, v in jiffies.items() if s != "idle"}
            states["idle"] = max(0.0, capacity - sum(states.values()))
            out.append({s: states.get(s, 0.0) for s in CPU_STATES})
        return out


def pages(value: float) -> int:
    return round(value / 4096.0) * 4096


def nanoseconds(seconds: float) -> int:
    whole = math.floor(seconds)
    return whole * NS + round((seconds - whole) * NS)
