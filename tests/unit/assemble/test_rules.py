"""service/assemble/rules.py: how a row's series make each feature."""

from __future__ import annotations

import pytest

from service.assemble.rules import SEMCONV, Rule, Source, rules_for


def series(metric_points: list[tuple[dict[str, str], float]]):
    return [(tuple(sorted(attrs.items())), value) for attrs, value in metric_points]


def read(rule: Rule, metrics: dict[str, list[tuple[dict[str, str], float]]]) -> float | None:
    for source in rule.sources:
        found = [(a, v) for a, v in series(metrics.get(source.metric, [])) if source.matches(dict(a))]
        if found and (value := source.value(found)) is not None:
            return value
    return None


def test_cpu_utilization_is_the_mean_over_cpus_of_a_gauge():
    rule = SEMCONV["system.cpu.utilization.user"]
    metrics = {
        "system.cpu.utilization": [
            ({"cpu": "0", "cpu.mode": "user"}, 0.2),
            ({"cpu": "1", "cpu.mode": "user"}, 0.4),
            ({"cpu": "0", "cpu.mode": "system"}, 0.9),
        ]
    }
    assert read(rule, metrics) == pytest.approx(0.3)


def test_cpu_utilization_from_cpu_time_is_each_cpus_share_of_its_modes():
    rule = SEMCONV["system.cpu.utilization.system"]
    metrics = {
        "system.cpu.time": [
            ({"cpu": "0", "cpu.mode": "user"}, 30.0),
            ({"cpu": "0", "cpu.mode": "system"}, 10.0),
            ({"cpu": "0", "cpu.mode": "idle"}, 60.0),
            ({"cpu": "1", "cpu.mode": "system"}, 50.0),
            ({"cpu": "1", "cpu.mode": "idle"}, 50.0),
        ]
    }
    assert read(rule, metrics) == pytest.approx((0.1 + 0.5) / 2)


def test_network_sums_interfaces_but_leaves_loopback_out():
    rule = SEMCONV["system.network.io.receive"]
    metrics = {
        "system.network.io": [
            ({"network.interface.name": "eth0", "network.io.direction": "receive"}, 100.0),
            ({"network.interface.name": "eth1", "network.io.direction": "receive"}, 50.0),
            ({"network.interface.name": "lo", "network.io.direction": "receive"}, 1e9),
            ({"network.interface.name": "eth0", "network.io.direction": "transmit"}, 7.0),
        ]
    }
    assert read(rule, metrics) == 150.0


def test_disk_io_counts_whole_disks_only():
    rule = SEMCONV["system.disk.io.write"]
    metrics = {
        "system.disk.io": [
            ({"system.device": "sda", "disk.io.direction": "write"}, 1000.0),
            ({"system.device": "sda1", "disk.io.direction": "write"}, 1000.0),
            ({"system.device": "nvme0n1", "disk.io.direction": "write"}, 10.0),
            ({"system.device": "nvme0n1p2", "disk.io.direction": "write"}, 10.0),
            ({"system.device": "loop3", "disk.io.direction": "write"}, 5.0),
        ]
    }
    assert read(rule, metrics) == 1010.0


def test_memory_utilization_prefers_the_gauge_then_the_used_share_of_states():
    rule = SEMCONV["system.memory.utilization"]
    gauge = {"system.memory.utilization": [({"system.memory.state": "used"}, 0.3)]}
    usage = {
        "system.memory.usage": [
            ({"system.memory.state": "used"}, 25.0),
            ({"system.memory.state": "free"}, 50.0),
            ({"system.memory.state": "cached"}, 25.0),
            ({"system.memory.state": "available"}, 75.0),  # a sum of the others: never in the total
        ]
    }
    assert read(rule, gauge) == 0.3
    assert read(rule, usage) == 0.25
    assert read(rule, gauge | usage) == 0.3


def test_filesystem_utilization_is_the_fullest_filesystem():
    rule = SEMCONV["system.filesystem.utilization"]
    usage = {
        "system.filesystem.usage": [
            ({"system.filesystem.mountpoint": "root", "system.filesystem.state": "used"}, 20.0),
            ({"system.filesystem.mountpoint": "root", "system.filesystem.state": "free"}, 80.0),
            ({"system.filesystem.mountpoint": "data", "system.filesystem.state": "used"}, 90.0),
            ({"system.filesystem.mountpoint": "data", "system.filesystem.state": "free"}, 10.0),
        ]
    }
    assert read(rule, usage) == 0.9
    pseudo = {
        "system.filesystem.utilization": [
            ({"system.filesystem.mountpoint": "root"}, 0.2),
            ({"system.filesystem.mountpoint": "snap-core-1234"}, 1.0),  # collectd's name for /snap/core/1234
            ({"system.filesystem.mountpoint": "/run/user/1000"}, 0.99),
            ({"system.filesystem.mountpoint": "/mnt/iso", "system.filesystem.type": "iso9660"}, 1.0),
        ]
    }
    assert read(rule, pseudo) == 0.2


def test_a_feature_without_a_rule_reads_the_metric_of_its_name():
    (rule,) = rules_for(["queue.depth"])
    assert rule == Rule("queue.depth", (Source("queue.depth"),))
    assert read(rule, {"queue.depth": [({"queue": "a"}, 2.0), ({"queue": "b"}, 4.0)]}) == 3.0


def test_a_share_counts_only_once_its_wanted_value_is_there():
    source = SEMCONV["system.cpu.utilization.iowait"].sources[1]
    assert not source.counts({"cpu": "0", "cpu.mode": "user"})
    assert source.counts({"cpu": "0", "cpu.mode": "iowait"})
