"""Generated host behaviour (service/tools/generate/_hosts.py): the feature contract, determinism, rows that
are physically consistent, the two machines that must look normal, and incidents that meet their
definitions."""

from __future__ import annotations

import numpy as np
import pytest

from service.tools.generate import (
    CI_MACHINE,
    HOST_FEATURES,
    HOST_REGIMES,
    HOST_REQUIRED,
    IDLE_MACHINE,
    INCIDENT_KINDS,
    HostSpec,
    Incident,
    host_dataset,
    host_rows,
)
from service.tools.generate._hosts import (
    ERRORS_PER_S,
    FILLING_FILESYSTEM,
    IOWAIT_STORM,
    LEAK_MEMORY,
    SATURATION_BUSY,
    SATURATION_LOAD_PER_CPU,
    USER_HZ,
)

F = {name: i for i, name in enumerate(HOST_FEATURES)}


def test_the_feature_contract() -> None:
    assert HOST_FEATURES == (
        "system.cpu.utilization.user",
        "system.cpu.utilization.system",
        "system.cpu.utilization.iowait",
        "system.memory.utilization",
        "system.cpu.load_average.1m",
        "system.cpu.load_average.5m",
        "system.cpu.load_average.15m",
        "system.network.io.receive",
        "system.network.io.transmit",
        "system.network.packet.count.receive",
        "system.network.packet.count.transmit",
        "system.network.errors.receive",
        "system.network.errors.transmit",
        "system.disk.io.read",
        "system.disk.io.write",
        "system.filesystem.utilization",
    )
    assert HOST_REQUIRED == (
        "system.cpu.utilization.user",
        "system.cpu.utilization.system",
        "system.cpu.utilization.iowait",
        "system.memory.utilization",
        "system.cpu.load_average.1m",
    )
    assert INCIDENT_KINDS[0] == "normal"
    assert set(INCIDENT_KINDS[1:]) == {
        "cpu_saturation",
        "memory_leak",
        "disk_filling",
        "interface_errors",
        "iowait_storm",
    }


def test_same_seed_same_rows_other_seed_other_rows() -> None:
    a = host_rows(5, 3, interval_s=10.0, count=50, incidents={"host-02": "memory_leak"})
    b = host_rows(5, 3, interval_s=10.0, count=50, incidents={"host-02": "memory_leak"})
    c = host_rows(6, 3, interval_s=10.0, count=50)
    assert [s.spec for s in a] == [s.spec for s in b]
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.matrix(), y.matrix())
        np.testing.assert_array_equal(x.labels, y.labels)
    assert not np.array_equal(a[0].matrix(), c[0].matrix())
    d1 = host_dataset(3, 20, 30, incident_ratio=0.5)
    d2 = host_dataset(3, 20, 30, incident_ratio=0.5)
    np.testing.assert_array_equal(d1.x, d2.x)
    np.testing.assert_array_equal(d1.kinds, d2.kinds)


def test_series_shape_times_and_rows() -> None:
    [s] = host_rows(
        1, [HostSpec("web-01", cpus=4, regime="busy")], start=1_800_000_000, interval_s=15.0, count=40
    )
    assert len(s) == 40 and s.interval_s == 15.0
    assert s.times[0] == 1_800_000_000 and np.all(np.diff(s.times) == 15.0)
    assert s.matrix().shape == (40, 16) and s.matrix().dtype == np.float32
    rows = s.rows()
    assert list(rows[0]) == list(HOST_FEATURES)
    samples = s.samples()
    assert samples[3][0] == s.times[3] and samples[3][1] == rows[3]
    assert s.label_names() == ["normal"] * 40 and not s.in_window.any()


@pytest.fixture(scope="module")
def fleet() -> np.ndarray:
    return host_dataset(11, 300, 40).x.astype(np.float64)


def test_ratios_shares_and_loads_are_in_range(fleet: np.ndarray) -> None:
    x = fleet
    cpu = x[
        :,
        [
            F["system.cpu.utilization.user"],
            F["system.cpu.utilization.system"],
            F["system.cpu.utilization.iowait"],
        ],
    ]
    assert (cpu >= 0).all() and (cpu.sum(axis=1) <= 1.0 + 1e-6).all()
    for name in ("system.memory.utilization", "system.filesystem.utilization"):
        assert ((x[:, F[name]] > 0) & (x[:, F[name]] < 0.95)).all(), name
    assert (x[:, 4:7] >= 0).all() and (x[:, 7:] >= 0).all()
    # The normal world covers what the brief asks for.
    memory = x[:, F["system.memory.utilization"]]
    assert memory.min() < 0.015 and memory.max() > 0.8
    busy = cpu[:, 0] + cpu[:, 1]
    assert busy.min() < 0.01 and (busy >= 0.97).any()
    assert x[:, F["system.network.io.receive"]].max() > 5e7
    assert x[:, F["system.disk.io.write"]].max() > 1e8


def test_packets_and_bytes_are_consistent(fleet: np.ndarray) -> None:
    for direction in ("receive", "transmit"):
        octets = fleet[:, F[f"system.network.io.{direction}"]]
        packets = fleet[:, F[f"system.network.packet.count.{direction}"]]
        some = packets > 0
        assert (octets[~some] == 0).all()
        frame = octets[some] / packets[some]
        assert frame.min() >= 60 * (1 - 1e-6) and frame.max() <= 1514 * (1 + 1e-6)


def test_errors_are_usually_exactly_zero(fleet: np.ndarray) -> None:
    errors = fleet[:, [F["system.network.errors.receive"], F["system.network.errors.transmit"]]]
    assert (errors == 0).mean() > 0.98
    assert errors.max() < ERRORS_PER_S


def test_rates_are_counter_differences() -> None:
    """A row's rates are whole counts per interval: cpu in jiffies, packets, bytes in pages."""
    [s] = host_rows(2, [HostSpec("db-01", cpus=8, regime="batch")], interval_s=10.0, count=60)
    jiffies = USER_HZ * 10.0 * 8
    for name in ("system.cpu.utilization.user", "system.cpu.utilization.system"):
        counts = s.values[name] * jiffies
        np.testing.assert_allclose(counts, np.round(counts), atol=1e-6)
    for name in HOST_FEATURES[7:15]:
        counts = s.values[name] * 10.0
        np.testing.assert_allclose(counts, np.round(counts), atol=1e-6)
    for name in ("system.disk.io.read", "system.disk.io.write"):
        assert (np.round(s.values[name] * 10.0) % 4096 == 0).all()


def test_load_averages_lag_behind_the_cpu() -> None:
    """The 1-minute load moves more than the 15-minute one: they are damped means of one run-queue."""
    [s] = host_rows(4, [HostSpec("ci-01", cpus=2, regime="ci")], interval_s=1.0, count=1800)
    l1, l15 = s.values["system.cpu.load_average.1m"], s.values["system.cpu.load_average.15m"]
    assert np.std(np.diff(l1)) > 3 * np.std(np.diff(l15))
    assert np.abs(np.diff(l15)).max() < 0.05


def test_the_ci_machine_looks_like_one() -> None:
    """A 2-core CI machine sampled every second (broker, JVM, test suite)."""
    for seed in range(3):
        [s] = host_rows(seed, [CI_MACHINE], interval_s=1.0, count=1800)
        v = s.values
        busy = v["system.cpu.utilization.user"] + v["system.cpu.utilization.system"]
        assert 0.15 < np.median(busy) < 0.8
        assert (busy >= 0.97).mean() < 0.3  # bursts to 100 % for seconds, not for good
        assert v["system.cpu.load_average.1m"].max() < 5.0
        memory, filesystem = v["system.memory.utilization"], v["system.filesystem.utilization"]
        assert memory.min() > 0.01 and memory.max() < 0.35
        assert filesystem.min() > 0.05 and filesystem.max() < 0.65
        assert v["system.network.io.receive"].max() < 1e7


def test_the_idle_machine_looks_like_one() -> None:
    [s] = host_rows(0, [IDLE_MACHINE], interval_s=1.0, count=1800)
    v = s.values
    busy = v["system.cpu.utilization.user"] + v["system.cpu.utilization.system"]
    assert np.median(busy) < 0.05
    assert v["system.cpu.load_average.15m"].max() < 1.0
    assert v["system.memory.utilization"].max() < 0.5


@pytest.mark.parametrize("kind", INCIDENT_KINDS[1:])
def test_an_injected_incident_meets_its_definition(kind: str) -> None:
    spec = HostSpec("app-01", cpus=4, regime="daily")
    [s] = host_rows(9, [spec], interval_s=10.0, count=240, incidents={"app-01": kind})
    labelled = s.labels == INCIDENT_KINDS.index(kind)
    assert labelled.sum() >= 10, kind
    assert s.in_window[labelled].all()
    assert not s.in_window[: 240 // 3].any()  # the window starts a third in
    v = s.values
    busy = v["system.cpu.utilization.user"] + v["system.cpu.utilization.system"]
    if kind == "cpu_saturation":
        assert (busy[labelled] >= SATURATION_BUSY).all()
        assert (v["system.cpu.load_average.1m"][labelled] >= SATURATION_LOAD_PER_CPU * 4).all()
    elif kind == "memory_leak":
        assert (v["system.memory.utilization"][labelled] >= LEAK_MEMORY).all()
    elif kind == "disk_filling":
        assert (v["system.filesystem.utilization"][labelled] >= FILLING_FILESYSTEM).all()
    elif kind == "interface_errors":
        errors = np.maximum(v["system.network.errors.receive"], v["system.network.errors.transmit"])
        assert (errors[labelled] >= ERRORS_PER_S).all()
    else:
        assert (v["system.cpu.utilization.iowait"][labelled] >= IOWAIT_STORM).all()
    # The rest of the series is normal.
    assert (s.labels[~s.in_window] == 0).all()


def test_incident_at_a_given_time_for_a_given_duration() -> None:
    start = 1_800_000_000
    incident = Incident("h", "interface_errors", start=start + 600, duration_s=300)
    [s] = host_rows(1, ["h"], start=start, interval_s=10.0, count=120, incidents=[incident])
    window = np.flatnonzero(s.in_window)
    assert window[0] == 60 and window[-1] == 89
    assert (s.labels[60:90] == INCIDENT_KINDS.index("interface_errors")).all()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown incident kind"):
        host_rows(1, ["a"], incidents={"a": "fire"})
    with pytest.raises(ValueError, match="unknown host"):
        host_rows(1, ["a"], incidents={"b": "memory_leak"})
    with pytest.raises(ValueError, match="unique"):
        host_rows(1, ["a", "a"])
    with pytest.raises(ValueError):
        host_dataset(1, 2, 2, incident_ratio=2.0)


def test_dataset_mixes_regimes_intervals_and_incidents() -> None:
    d = host_dataset(2, 200, 30, incident_ratio=0.5)
    assert d.x.shape == (6000, 16)
    assert set(np.unique(d.regime).tolist()) == set(range(len(HOST_REGIMES)))
    assert len(np.unique(d.interval_s)) >= 4
    assert set(np.unique(d.kinds).tolist()) == set(range(len(INCIDENT_KINDS)))
    assert (d.kinds[~d.in_window] == 0).all()
    assert d.scored.sum() < len(d.x) and d.normal.sum() > len(d.x) // 2
    only_idle = host_dataset(2, 20, 10, regimes=["idle"])
    assert (only_idle.regime == HOST_REGIMES.index("idle")).all()
