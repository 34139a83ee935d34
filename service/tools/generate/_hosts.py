"""Generated host behaviour: what the host metrics agents send by default (collectd, Telegraf, the
OpenTelemetry Collector's hostmetrics receiver) say about a machine, one row per host and interval.

Features are named after the OpenTelemetry semantic conventions (:data:`HOST_FEATURES`): CPU utilisation of
the whole host per mode (ratio), memory in use (ratio), the load averages (run-queue length, not per CPU),
network bytes, packets and errors per second over every interface but loopback, disk bytes per second over
whole disks, and the used share of the fullest filesystem.

Every host is simulated as a time series with half an hour of history before its first row, so that what
depends on the past is consistent: load averages are the kernel's exponentially damped means (1, 5 and 15
minutes) of a run-queue driven by the cpu and by D-state tasks; counters are integers per interval (CPU
jiffies at 100 per second per CPU, packets, bytes in pages), so a row's rates are exact counter differences
over its interval; short intervals are burstier than long ones (a 1 s sample of a disk that flushes every
few seconds is mostly 0 with bursts).

A host has a size (1-64 CPUs, 1-512 GiB) and a regime (:data:`HOST_REGIMES`): ``idle`` (cpu 0.5-5 %, load
near 0, rare cron spikes), ``busy`` (steady 30-85 % with bursts to 100 % of seconds to a minute, load up to
~1.5x the CPUs), ``daily`` (cpu and traffic follow a day curve with noise), ``batch`` (idle between jobs of
5-60 minutes at 55-92 %), ``ci`` (a small build/test machine: phases of bursty 15-92 % cpu with seconds at
100 %, many runnable threads, so load up to ~2.5x the CPUs; write bursts). Memory in use is anything from
0.008 (a big idle box) to ~0.9, filesystems 0.05-0.9, network from nothing to ~100 MB/s with mean frame
sizes of 60-1500 B, disks 0 to hundreds of MB/s with streaming I/O now and then (a backup, a copy); network
errors are exactly 0 on most hosts, with a trickle on some and a rare single error or two.

Incidents (:data:`INCIDENT_KINDS`) are injected into a window of a host's series. A row is labelled with
the incident's kind only where the incident's definition holds (the thresholds below); rows of a window
where it does not yet hold (the first minute of a saturation, while the load average climbs; the ramp of a
leak), and the 15 minutes after a saturation or an iowait storm while the load averages come back down, are
neither incident nor normal and are left out of quality measurements (``in_window``):

- ``cpu_saturation``: user + system >= 0.97 sustained, with a run-queue of 4.5-10x the CPUs (a fork storm,
  runaway threads), labelled where the 1-minute load is >= 4x the CPU count;
- ``memory_leak``: memory in use climbs to >= 0.95;
- ``disk_filling``: the filesystem fills to >= 0.95 (with heavy writes);
- ``interface_errors``: >= 5 receive (and often transmit) errors per second;
- ``iowait_storm``: iowait >= 0.5 (a stalled disk: cpu starved, load up from D-state tasks).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

HOST_FEATURES: tuple[str, ...] = (
    "system.cpu.utilization.user",  # ratio 0..1 of the whole host (all CPUs)
    "system.cpu.utilization.system",
    "system.cpu.utilization.iowait",
    "system.memory.utilization",  # used share, ratio
    "system.cpu.load_average.1m",  # run-queue length (not divided by the CPU count)
    "system.cpu.load_average.5m",
    "system.cpu.load_average.15m",
    "system.network.io.receive",  # bytes/s, all interfaces but loopback
    "system.network.io.transmit",
    "system.network.packet.count.receive",  # packets/s
    "system.network.packet.count.transmit",
    "system.network.errors.receive",  # errors/s
    "system.network.errors.transmit",
    "system.disk.io.read",  # bytes/s, whole disks
    "system.disk.io.write",
    "system.filesystem.utilization",  # used share of the fullest filesystem, ratio
)
"""The row layout (names and order are a contract: the ``host-anomaly`` model's input columns)."""

HOST_REQUIRED: tuple[str, ...] = HOST_FEATURES[:5]
"""The features a row must have to be scored: cpu user/system/iowait, memory, 1-minute load."""

HOST_REGIMES: tuple[str, ...] = ("idle", "busy", "daily", "batch", "ci")

INCIDENT_KINDS: tuple[str, ...] = (
    "normal",
    "cpu_saturation",
    "memory_leak",
    "disk_filling",
    "interface_errors",
    "iowait_storm",
)
"""Index 0 is normal; labels are indices into this tuple."""

# The incidents' definitions: a row of an incident window is labelled with its kind where these hold.
SATURATION_BUSY = 0.97  # user + system
SATURATION_LOAD_PER_CPU = 4.0  # 1-minute load / CPU count
LEAK_MEMORY = 0.95
FILLING_FILESYSTEM = 0.95
ERRORS_PER_S = 5.0
IOWAIT_STORM = 0.5

# After these, the load averages stay high for a while: the rows of that recovery count as in the window.
_RECOVERY_KINDS = frozenset({"cpu_saturation", "iowait_storm"})
RECOVERY_S = 900.0
BURN_IN_S = 1800.0  # simulated before the first row of every host

# 2024-06-01T00:00:00Z, as the events generator's default clock.
DEFAULT_START_S = 1_717_200_000
GIB = 1 << 30
USER_HZ = 100  # jiffies per second per CPU
PAGE = 4096
MTU_FRAME = 1514  # the largest Ethernet frame the kernel counts (no jumbo frames here)
MIN_FRAME = 60
MAX_NET_RATE = 1.2e8  # ~1 Gbit/s
MAX_PPS = 3e5
MAX_DISK_RATE = 6e8
NORMAL_IOWAIT_CAP = 0.4  # normal iowait approaches this softly; storms start at IOWAIT_STORM

_LOAD_WINDOWS_S = (60.0, 300.0, 900.0)
_CPU_CHOICES = np.array([1, 2, 2, 4, 4, 4, 8, 8, 8, 12, 16, 16, 24, 32, 48, 64])
_MEMORY_GIB = np.array([1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512])
_REGIME_MIX = np.array([0.2, 0.22, 0.24, 0.2, 0.14])
# Sample intervals of the generated training data: collectd at 1 s (as on a CI machine) to 60 s scrapes.
_INTERVALS_S = np.array([1.0, 5.0, 10.0, 15.0, 30.0, 60.0])
_INTERVAL_MIX = np.array([0.22, 0.1, 0.36, 0.06, 0.08, 0.18])
# Incident durations (seconds), per kind.
_DURATION_S: dict[str, tuple[float, float]] = {
    "cpu_saturation": (180.0, 900.0),
    "memory_leak": (600.0, 3600.0),
    "disk_filling": (600.0, 3600.0),
    "interface_errors": (60.0, 1800.0),
    "iowait_storm": (60.0, 900.0),
}


@dataclass(frozen=True, slots=True)
class HostSpec:
    """A host's fixed facts: what the renderers need to turn ratios into bytes, and its regime."""

    name: str
    cpus: int = 2
    memory_bytes: int = 8 * GIB
    filesystem_bytes: int = 64 * GIB
    regime: str = "daily"

    def facts(self) -> dict[str, int]:
        """Keyword arguments of the renderers in :mod:`service.tools.generate.agents`."""
        return {
            "cpus": self.cpus,
            "memory_bytes": self.memory_bytes,
            "filesystem_bytes": self.filesystem_bytes,
        }


CI_MACHINE = HostSpec("ci-runner", cpus=2, memory_bytes=8 * GIB, filesystem_bytes=80 * GIB, regime="ci")
"""A 2-core CI machine running a broker, a JVM and a test suite (sample it at 1 s, as collectd there)."""
IDLE_MACHINE = HostSpec("idle-box", cpus=2, memory_bytes=24 * GIB, filesystem_bytes=256 * GIB, regime="idle")
"""An idle 2-core box with 24 GiB, ~2 % of it in use."""


@dataclass(frozen=True, slots=True)
class Incident:
    """An incident on ``host`` from ``start`` (unix seconds; default: a third into the series) for
    ``duration_s`` (default: a typical duration of the kind, at most to the end of the series)."""

    host: str
    kind: str
    start: float | None = None
    duration_s: float | None = None


@dataclass(frozen=True)
class HostSeries:
    """One host's rows: ``values[feature][i]`` at ``times[i]`` (unix seconds; the end of the interval the
    rates are over), ``labels[i]`` an index into :data:`INCIDENT_KINDS`, ``in_window[i]`` True inside an
    injected incident's window (labelled or not)."""

    spec: HostSpec
    interval_s: float
    times: np.ndarray
    values: dict[str, np.ndarray]
    labels: np.ndarray
    in_window: np.ndarray

    def __len__(self) -> int:
        return len(self.times)

    def rows(self) -> list[dict[str, float]]:
        """The rows as dicts feature -> value, in :data:`HOST_FEATURES` order."""
        cols = [self.values[f].tolist() for f in HOST_FEATURES]
        return [dict(zip(HOST_FEATURES, vals, strict=True)) for vals in zip(*cols, strict=True)]

    def samples(self) -> list[tuple[float, dict[str, float]]]:
        """``(time, row)`` pairs: what the renderers of :mod:`service.tools.generate.agents` take."""
        return list(zip(self.times.tolist(), self.rows(), strict=True))

    def label_names(self) -> list[str]:
        return [INCIDENT_KINDS[k] for k in self.labels.tolist()]

    def matrix(self) -> np.ndarray:
        """float32 [n, 16] in HOST_FEATURES order (the model's input)."""
        return np.stack([self.values[f] for f in HOST_FEATURES], axis=1).astype(np.float32)


@dataclass(frozen=True)
class HostDataset:
    """Rows of many hosts, flattened: ``x`` float32 [n, 16], ``kinds`` int [n], ``in_window`` bool [n],
    ``host`` int [n] (which host), ``interval_s`` float [n] (its sample interval), ``regime`` int [n]
    (index into :data:`HOST_REGIMES`), ``cpus`` int [n]."""

    x: np.ndarray
    kinds: np.ndarray
    in_window: np.ndarray
    host: np.ndarray
    interval_s: np.ndarray
    regime: np.ndarray
    cpus: np.ndarray

    @property
    def normal(self) -> np.ndarray:
        """Rows that are normal: not in any incident window."""
        return ~self.in_window

    @property
    def scored(self) -> np.ndarray:
        """Rows quality is measured on: normal rows and labelled incident rows."""
        return ~self.in_window | (self.kinds > 0)


# ---------------------------------------------------------------------------------------------- public


def host_rows(
    seed: int,
    hosts: int | Sequence[str | HostSpec] = 1,
    start: float = DEFAULT_START_S,
    interval_s: float = 10.0,
    count: int = 360,
    incidents: Mapping[str, str] | Sequence[Incident] = (),
) -> list[HostSeries]:
    """``count`` rows every ``interval_s`` seconds from ``start`` for each host, with injected incidents.

    ``hosts``: a number (hosts ``host-01``… of random size and regime), or names (random size and regime)
    and :class:`HostSpec` s (as given). ``incidents``: host name -> kind (a window from a third into the
    series, of a typical duration for the kind), or :class:`Incident` s. Deterministic in all arguments.
    """
    if count < 1 or interval_s <= 0:
        raise ValueError("count must be >= 1 and interval_s > 0")
    rng = np.random.default_rng(seed)
    names: list[str | HostSpec]
    names = [f"host-{i + 1:02d}" for i in range(hosts)] if isinstance(hosts, int) else list(hosts)
    specs = [h if isinstance(h, HostSpec) else _random_spec(rng, h) for h in names]
    by_name = {s.name: i for i, s in enumerate(specs)}
    if len(by_name) != len(specs):
        raise ValueError("host names must be unique")
    wanted = (
        [Incident(host, kind) for host, kind in incidents.items()]
        if isinstance(incidents, Mapping)
        else list(incidents)
    )
    windows: list[tuple[int, int, int, int]] = []
    for inc in wanted:
        if inc.host not in by_name:
            raise ValueError(f"incident for unknown host {inc.host!r}")
        if inc.kind not in _DURATION_S:
            raise ValueError(f"unknown incident kind {inc.kind!r}; known: {sorted(_DURATION_S)}")
        i0 = count // 3 if inc.start is None else math.ceil((inc.start - start) / interval_s)
        lo, hi = _DURATION_S[inc.kind]
        duration = (lo * hi) ** 0.5 if inc.duration_s is None else inc.duration_s
        i0 = max(0, min(i0, count - 1))
        i1 = min(count, i0 + max(1, round(duration / interval_s)))
        windows.append((by_name[inc.host], INCIDENT_KINDS.index(inc.kind), i0, i1))
    t0 = np.full(len(specs), float(start))
    values, kinds, in_window = _simulate(rng, specs, float(interval_s), t0, count, windows)
    times = float(start) + np.arange(count) * float(interval_s)
    return [
        HostSeries(
            spec=spec,
            interval_s=float(interval_s),
            times=times.copy(),
            values={f: values[f][h].copy() for f in HOST_FEATURES},
            labels=kinds[h].copy(),
            in_window=in_window[h].copy(),
        )
        for h, spec in enumerate(specs)
    ]


def host_dataset(
    seed: int,
    hosts: int,
    rows_per_host: int,
    incident_ratio: float = 0.0,
    *,
    regimes: Sequence[str] | None = None,
) -> HostDataset:
    """Rows of ``hosts`` random hosts (sizes, regimes, sample intervals of 1-60 s, times of day), each
    with an incident of a random kind with probability ``incident_ratio``: training and held-out data."""
    if not 0.0 <= incident_ratio <= 1.0:
        raise ValueError(f"incident_ratio must be in [0, 1], got {incident_ratio}")
    rng = np.random.default_rng(seed)
    specs = [_random_spec(rng, f"host-{i + 1:04d}", regimes) for i in range(hosts)]
    dt = rng.choice(_INTERVALS_S, size=hosts, p=_INTERVAL_MIX)
    t0 = DEFAULT_START_S + np.floor(rng.uniform(0, 365 * 86400, size=hosts))
    windows: list[tuple[int, int, int, int]] = []
    with_incident = rng.random(hosts) < incident_ratio
    kinds_of = rng.integers(1, len(INCIDENT_KINDS), size=hosts)
    for h in np.flatnonzero(with_incident).tolist():
        kind = int(kinds_of[h])
        lo, hi = _DURATION_S[INCIDENT_KINDS[kind]]
        rows = max(1, round(float(np.exp(rng.uniform(np.log(lo), np.log(hi)))) / dt[h]))
        i0 = int(rng.integers(0, max(1, rows_per_host - min(rows, rows_per_host) // 2)))
        windows.append((h, kind, i0, min(rows_per_host, i0 + rows)))
    # One simulation per sample interval (hosts of one interval share their burn-in steps).
    size = (hosts, rows_per_host)
    values = {f: np.zeros(size) for f in HOST_FEATURES}
    kinds, in_window = np.zeros(size, dtype=np.int64), np.zeros(size, dtype=bool)
    for interval in np.unique(dt).tolist():
        group = np.flatnonzero(dt == interval)
        local = {h: i for i, h in enumerate(group.tolist())}
        group_windows = [(local[h], k, i0, i1) for h, k, i0, i1 in windows if h in local]
        v, k, w = _simulate(rng, [specs[h] for h in group], interval, t0[group], rows_per_host, group_windows)
        for f in HOST_FEATURES:
            values[f][group] = v[f]
        kinds[group], in_window[group] = k, w
    x = np.stack([values[f].reshape(-1) for f in HOST_FEATURES], axis=1).astype(np.float32)
    host = np.repeat(np.arange(hosts), rows_per_host)
    return HostDataset(
        x=x,
        kinds=kinds.reshape(-1),
        in_window=in_window.reshape(-1),
        host=host,
        interval_s=np.repeat(dt, rows_per_host),
        regime=np.repeat([HOST_REGIMES.index(s.regime) for s in specs], rows_per_host),
        cpus=np.repeat([s.cpus for s in specs], rows_per_host),
    )


# ---------------------------------------------------------------------------------------------- hosts


def _random_spec(rng: np.random.Generator, name: str, regimes: Sequence[str] | None = None) -> HostSpec:
    """A host of random size and regime (``regimes``: draw only from these, uniformly)."""
    if regimes:
        regime = str(rng.choice(list(regimes)))
    else:
        regime = HOST_REGIMES[int(rng.choice(len(HOST_REGIMES), p=_REGIME_MIX))]
    cpus = int(rng.choice(_CPU_CHOICES))
    if regime == "ci":
        cpus = int(rng.choice([1, 2, 2, 2, 4, 4, 8]))
    # Memory grows with the CPUs, loosely: 1-16 GiB per CPU, within 1-512 GiB.
    per_cpu = float(np.exp(rng.uniform(np.log(1.0), np.log(16.0))))
    target = min(512.0, max(1.0, cpus * per_cpu))
    memory_gib = int(_MEMORY_GIB[np.argmin(np.abs(np.log(_MEMORY_GIB / target)))])
    fs_gib = int(np.exp(rng.uniform(np.log(8.0), np.log(4096.0))))
    return HostSpec(name, cpus, memory_gib * GIB, fs_gib * GIB, regime)


def _loguniform(rng: np.random.Generator, lo: float, hi: float, size: int) -> np.ndarray:
    return np.exp(rng.uniform(np.log(lo), np.log(hi), size=size))


def _markov(rng: np.random.Generator, n: int, p_on: np.ndarray, p_off: np.ndarray) -> np.ndarray:
    """On/off chains [hosts, n] with per-step switching probabilities, started from their stationary mix."""
    u = rng.random((len(p_on), n))
    state = rng.random(len(p_on)) < p_on / np.maximum(p_on + p_off, 1e-12)
    out = np.empty((len(p_on), n), dtype=bool)
    for i in range(n):
        state = np.where(state, u[:, i] >= p_off, u[:, i] < p_on)
        out[:, i] = state
    return out


def _ar1(rng: np.random.Generator, n: int, phi: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """Stationary AR(1) processes [hosts, n] with per-host coefficient and marginal std."""
    eps = rng.standard_normal((len(phi), n))
    innovation = sigma * np.sqrt(1.0 - phi**2)
    out = np.empty((len(phi), n))
    x = sigma * rng.standard_normal(len(phi))
    for i in range(n):
        x = phi * x + innovation * eps[:, i]
        out[:, i] = x
    return out


def _ramp_to(series: np.ndarray, i0: int, i1: int, target: float, rng: np.random.Generator) -> None:
    """Climb linearly from the value at ``i0`` to ``target`` over the first quarter of [i0, i1), stay."""
    k = max(1, (i1 - i0) // 4)
    start = float(series[i0])
    steps = np.arange(i1 - i0)
    path = np.where(steps < k, start + (target - start) * (steps + 1) / k, target)
    series[i0:i1] = np.minimum(path + rng.normal(0.0, 0.001, i1 - i0) * (steps >= k), 0.999)


# ---------------------------------------------------------------------------------------------- simulation


def _simulate(
    rng: np.random.Generator,
    specs: Sequence[HostSpec],
    interval_s: float,
    t0: np.ndarray,
    n: int,
    windows: Sequence[tuple[int, int, int, int]],
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """``n`` rows of every host, sampled every ``interval_s`` from ``t0`` [hosts]. ``windows``: (host, kind,
    i0, i1) in rows. Returns feature -> [hosts, n], kinds [hosts, n] and in_window [hosts, n].

    The hosts run for BURN_IN_S before the first row, so that the first rows have a history: load
    averages that lag behind the cpu, jobs that started a while ago.
    """
    burn = math.ceil(BURN_IN_S / interval_s)
    dt = np.full(len(specs), float(interval_s))
    shifted = [(h, kind, i0 + burn, i1 + burn) for h, kind, i0, i1 in windows]
    values, kinds, in_window = _simulate_steps(rng, specs, dt, t0 - burn * interval_s, burn + n, shifted)
    return {f: v[:, burn:] for f, v in values.items()}, kinds[:, burn:], in_window[:, burn:]


def _simulate_steps(
    rng: np.random.Generator,
    specs: Sequence[HostSpec],
    dt: np.ndarray,
    t0: np.ndarray,
    n: int,
    windows: Sequence[tuple[int, int, int, int]],
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Simulate ``n`` steps of every host (vectorised over hosts). ``windows``: (host, kind, i0, i1)."""
    sim = _Sim(rng, specs, dt, t0, n, windows)
    sim.activity()
    sim.disk()
    sim.memory_and_filesystem()
    sim.network()
    sim.incidents_before_cpu()
    sim.cpu()
    sim.loads()
    sim.incidents_after_cpu()
    return sim.values(), *sim.labels()


class _Sim:
    """The state of one simulation: per-host parameters [hosts, 1] and series [hosts, n], built in stages
    (each stage draws from the generator in a fixed order)."""

    def __init__(
        self,
        rng: np.random.Generator,
        specs: Sequence[HostSpec],
        dt: np.ndarray,
        t0: np.ndarray,
        n: int,
        windows: Sequence[tuple[int, int, int, int]],
    ) -> None:
        self.rng, self.n, self.windows = rng, n, list(windows)
        self.n_hosts = len(specs)
        regime = np.array([HOST_REGIMES.index(s.regime) for s in specs])
        self.is_regime = {name: (regime == i)[:, None] for i, name in enumerate(HOST_REGIMES)}
        self.cpus = np.array([s.cpus for s in specs], dtype=np.float64)
        self.dt = np.asarray(dt, dtype=np.float64)
        self.dtc = self.dt[:, None]
        self.t0 = t0
        self.t = t0[:, None] + np.arange(n)[None, :] * self.dtc
        # Short samples are noisier: a 1 s sample averages over a tenth of what a 10 s one does.
        self.burst = np.clip(np.sqrt(10.0 / self.dt), 0.4, 3.2)[:, None]
        self.size = (self.n_hosts, n)
        self.in_window = np.zeros(self.size, dtype=bool)
        for h, _, i0, i1 in self.windows:
            self.in_window[h, i0:i1] = True

    def u(self, lo: float, hi: float) -> np.ndarray:
        return self.rng.uniform(lo, hi, self.n_hosts)[:, None]

    def lu(self, lo: float, hi: float) -> np.ndarray:
        return _loguniform(self.rng, lo, hi, self.n_hosts)[:, None]

    def noise(self, sigma: float, power: float = 1.0) -> np.ndarray:
        """Lognormal noise, wider at short intervals."""
        return self.rng.lognormal(0.0, sigma, self.size) ** (self.burst**power)

    def _windows(self, kind: str) -> list[tuple[int, int, int]]:
        return [(h, i0, i1) for h, k, i0, i1 in self.windows if INCIDENT_KINDS[k] == kind]

    # ------------------------------------------------------------------ stages

    def activity(self) -> None:
        """Busy share (user + system) per regime, jobs, bursts to 100 %."""
        rng, n, dt, size, burst, is_regime = self.rng, self.n, self.dt, self.size, self.burst, self.is_regime
        idle_base = self.lu(0.004, 0.04)
        cron = _markov(rng, n, dt / 3600.0, np.minimum(1.0, dt / 30.0))
        a_idle = np.where(cron, rng.uniform(0.08, 0.5, size), idle_base * self.noise(0.3))

        busy_base = self.u(0.3, 0.85)
        slow = _ar1(rng, n, np.exp(-dt / 900.0), np.full(self.n_hosts, 0.07))
        a_busy = busy_base + slow + rng.normal(0.0, 0.025, size) * burst

        lo, span, peak = self.u(0.02, 0.25), self.u(0.15, 0.65), self.u(11.0, 21.0)
        hour = (self.t / 3600.0) % 24.0
        day = (0.5 * (1.0 + np.cos(2 * np.pi * (hour - peak) / 24.0))) ** 1.5
        slow_d = _ar1(rng, n, np.exp(-dt / 1800.0), np.full(self.n_hosts, 0.08))
        a_daily = lo + np.minimum(span, 0.9 - lo) * day * (1.0 + slow_d) + rng.normal(0.0, 0.02, size) * burst

        off_level, job_level = self.lu(0.005, 0.08), self.u(0.55, 0.92)
        gap, duration = _loguniform(rng, 900, 7200, self.n_hosts), _loguniform(rng, 300, 3600, self.n_hosts)
        job = _markov(rng, n, np.minimum(1.0, dt / gap), np.minimum(1.0, dt / duration))
        a_batch = np.where(
            job, job_level * (1.0 + rng.normal(0.0, 0.04, size) * burst), off_level * self.noise(0.3)
        )

        ci_off, ci_mean = self.lu(0.01, 0.08), self.u(0.35, 0.65)
        ci_gap, ci_duration = (
            _loguniform(rng, 30, 300, self.n_hosts),
            _loguniform(rng, 300, 1800, self.n_hosts),
        )
        ci_job = _markov(rng, n, np.minimum(1.0, dt / ci_gap), np.minimum(1.0, dt / ci_duration))
        ci_fast = _ar1(rng, n, np.exp(-dt / 8.0), np.full(self.n_hosts, 0.22))
        a_ci = np.where(ci_job, np.clip(ci_mean + ci_fast, 0.15, 0.92), ci_off * self.noise(0.3))

        choices = [a_idle, a_busy, a_daily, a_batch, a_ci]
        a = np.clip(np.select([is_regime[r] for r in HOST_REGIMES], choices, default=a_daily), 0.002, 0.93)
        # Bursts to 100 % lasting seconds to a minute (not on idle hosts: their spikes are the cron jobs
        # above). A sample covers the part of the burst inside its interval: at 1-10 s a burst pins the
        # cpu for a few samples, at 60 s it only lifts the average.
        is_ci = is_regime["ci"][:, 0]
        burst_gap = np.where(
            is_ci, _loguniform(rng, 60, 600, self.n_hosts), _loguniform(rng, 300, 3600, self.n_hosts)
        )
        burst_len = np.where(
            is_ci, _loguniform(rng, 2, 40, self.n_hosts), _loguniform(rng, 5, 60, self.n_hosts)
        )
        bursting = _markov(rng, n, np.minimum(0.05, dt / burst_gap), np.minimum(1.0, dt / burst_len))
        self.bursting = bursting & ~is_regime["idle"]
        partial = rng.uniform(0.7, 1.0, size) ** (self.dtc > burst_len[:, None])
        coverage = np.minimum(1.0, burst_len / dt)[:, None] * partial
        self.a = np.where(self.bursting, a + (rng.uniform(0.97, 1.0, size) - a) * coverage, a)
        self.job_on = np.where(is_regime["batch"], job, False) | np.where(is_regime["ci"], ci_job, False)

    def disk(self) -> None:
        """Disk bytes (flushed in bursts: at short intervals most samples are 0), streaming I/O, iowait."""
        rng, n, dt, dtc, size, is_regime = self.rng, self.n, self.dt, self.dtc, self.size, self.is_regime
        lu = self.lu
        rd_level = np.where(rng.random((self.n_hosts, 1)) < 0.35, lu(10, 5e3), lu(5e3, 8e7))
        wr_level = lu(2e3, 8e7)
        rd_level = np.where(is_regime["idle"], lu(1, 2e3), np.where(is_regime["ci"], lu(1e3, 5e6), rd_level))
        wr_level = np.where(
            is_regime["idle"], lu(1e3, 2e5), np.where(is_regime["ci"], lu(1e5, 8e6), wr_level)
        )
        self.wr_level = wr_level
        couple = self.u(0.0, 1.0)
        self.rel = self.a / np.maximum(self.a.mean(axis=1, keepdims=True), 0.01)
        activity = 1.0 - couple + couple * self.rel
        rd_gap = lu(0.5, 10.0)
        wr_gap = np.where(is_regime["ci"], lu(0.5, 4.0), lu(0.5, 20.0))
        rd_p = 1.0 - np.exp(-dtc / rd_gap)
        wr_p = 1.0 - np.exp(-dtc / wr_gap)
        rd_noise, wr_noise = self.noise(0.5, 0.5), self.noise(0.5, 0.5)
        read = rd_level * activity * rd_noise * (rng.random(size) < rd_p) / rd_p
        write = wr_level * activity * wr_noise * (rng.random(size) < wr_p) / wr_p
        # Streaming I/O now and then, on any host: a backup, a dump, a copy, an fsync'd write of hundreds
        # of MB; reads or writes, whatever the cpu does, with iowait and kernel time of their own.
        stream_gap = _loguniform(rng, 600, 7200, self.n_hosts)
        stream_len = _loguniform(rng, 5, 120, self.n_hosts)
        streaming = _markov(rng, n, np.minimum(0.2, dt / stream_gap), np.minimum(1.0, dt / stream_len))
        stream_rate = lu(1e7, 4e8) * rng.uniform(0.6, 1.0, size) * np.minimum(1.0, stream_len / dt)[:, None]
        stream_writes = rng.random((self.n_hosts, 1)) < 0.6
        self.write = np.where(streaming & stream_writes, np.maximum(write, stream_rate), write)
        self.read = np.where(streaming & ~stream_writes, np.maximum(read, stream_rate), read)
        stream_wait = np.where(streaming, self.u(0.0, 0.35) * rng.uniform(0.5, 1.0, size), 0.0)
        self.a = np.where(
            streaming, np.minimum(self.a + self.u(0.01, 0.12) * rng.uniform(0.5, 1.0, size), 0.95), self.a
        )
        self.streaming = streaming
        # iowait follows the disk, softly capped below the storm level.
        w0, wk = lu(2e-4, 6e-3), np.where(is_regime["ci"], lu(1e-3, 0.02), lu(1e-3, 0.08))
        raw = w0 * rng.lognormal(0.0, 0.5, size) + wk * (self.read + self.write) / (rd_level + wr_level + 1.0)
        raw = raw + stream_wait
        self.iowait = NORMAL_IOWAIT_CAP * (1.0 - np.exp(-raw / NORMAL_IOWAIT_CAP))

    def memory_and_filesystem(self) -> None:
        rng, n, dt, size, is_regime, u = self.rng, self.n, self.dt, self.size, self.is_regime, self.u
        pick = rng.random((self.n_hosts, 1))
        mem0 = np.where(pick < 0.15, u(0.008, 0.08), np.where(pick < 0.7, u(0.08, 0.6), u(0.6, 0.82)))
        mem0 = np.where(is_regime["idle"], np.where(pick < 0.5, u(0.008, 0.08), u(0.08, 0.5)), mem0)
        mem0 = np.where(is_regime["ci"], u(0.02, 0.22), mem0)
        mem_job = np.where(is_regime["ci"], u(0.0, 0.06), u(0.02, 0.12)) * self.job_on
        mem_walk = _ar1(rng, n, np.exp(-dt / 3600.0), (0.015 * np.minimum(1.0, mem0[:, 0] * 5)))
        self.memory = np.clip(mem0 + mem_walk + mem_job + rng.normal(0.0, 0.001, size), 0.005, 0.9)

        fs0 = np.where(is_regime["ci"], u(0.1, 0.55), u(0.05, 0.85))
        growth = u(0.0, 0.03) / 86400.0 * (self.t - self.t0[:, None])
        fs_walk = np.cumsum(rng.normal(0.0, 3e-4, size) * np.sqrt(self.dtc / 10.0), axis=1)
        self.filesystem = np.clip(fs0 + growth + fs_walk, 0.01, 0.9)

    def network(self) -> None:
        """Bytes and packets consistent (frames of 60-1514 B); errors exactly 0 on most hosts, a trickle on
        some, a rare single error or two."""
        rng, dtc, size, is_regime, lu, u = self.rng, self.dtc, self.size, self.is_regime, self.lu, self.u
        net_level = np.where(
            is_regime["idle"], lu(50, 3e4), np.where(is_regime["ci"], lu(2e3, 1.5e6), lu(500, 5e7))
        )
        # Some boxes see next to no traffic whatever they do (a sandbox, an offline build machine).
        net_level = np.where(rng.random((self.n_hosts, 1)) < 0.1, lu(0.5, 100), net_level)
        net_couple, tx_share = u(0.0, 1.0), u(0.15, 0.85)
        level = net_level * (1.0 - net_couple + net_couple * self.rel) * self.noise(0.25, 0.5)
        rx_rate = np.minimum(2.0 * level * (1.0 - tx_share), MAX_NET_RATE)
        tx_rate = np.minimum(2.0 * level * tx_share, MAX_NET_RATE)
        # Mean frame sizes of 60-1500 B; a busy link does not carry mostly tiny frames (<= ~300k packets/s).
        frame_rx = np.clip(
            np.maximum(lu(60, 1500), 2.0 * net_level * (1.0 - tx_share) / MAX_PPS), MIN_FRAME, 1500
        )
        frame_tx = np.clip(np.maximum(lu(60, 1500), 2.0 * net_level * tx_share / MAX_PPS), MIN_FRAME, 1500)
        self.rx_packets = rng.poisson(rx_rate * dtc / frame_rx)
        self.tx_packets = rng.poisson(tx_rate * dtc / frame_tx)

        def frames_to_bytes(packets: np.ndarray, frame: np.ndarray) -> np.ndarray:
            jitter = rng.lognormal(0.0, 0.3, size) ** (1.0 / np.sqrt(np.maximum(packets, 1)))
            return np.round(packets * np.clip(frame * jitter, MIN_FRAME, MTU_FRAME))

        self.rx_bytes = frames_to_bytes(self.rx_packets, frame_rx)
        self.tx_bytes = frames_to_bytes(self.tx_packets, frame_tx)
        trickle = np.where(rng.random((self.n_hosts, 1)) < 0.15, lu(1e-4, 5e-3), 0.0)
        rx_err = rng.poisson(trickle * dtc) + (rng.random(size) < 3e-4) * rng.integers(1, 3, size)
        tx_err = rng.poisson(trickle * dtc * 0.3) + (rng.random(size) < 1e-4) * rng.integers(1, 3, size)
        self.rx_err, self.tx_err = rx_err.astype(np.float64), tx_err.astype(np.float64)
        # The run-queue's parameters (drawn here to keep the generator's order): many runnable threads on
        # small (CI) machines.
        self.queue = np.where(
            is_regime["ci"], u(0.5, 1.5), np.where(self.cpus[:, None] <= 4, u(0.2, 0.8), u(0.0, 0.5))
        )
        self.background = lu(0.01, 0.4)
        self.d_state = u(0.5, 1.5)
        self.runq_noise = self.noise(0.15, 0.5)

    def incidents_before_cpu(self) -> None:
        """What drives cpu, iowait, the run-queue and the disk."""
        rng, cpus = self.rng, self.cpus
        self.extra_runq = np.zeros(self.size)
        for h, i0, i1 in self._windows("cpu_saturation"):
            m = i1 - i0
            self.a[h, i0:i1] = rng.uniform(SATURATION_BUSY + 0.002, 1.0, m)
            self.extra_runq[h, i0:i1] = cpus[h] * rng.uniform(4.5, 10.0) * rng.lognormal(0.0, 0.05, m)
        for h, i0, i1 in self._windows("iowait_storm"):
            m = i1 - i0
            wait = np.clip(rng.uniform(0.52, 0.9) + rng.normal(0.0, 0.02, m), 0.505, 0.95)
            self.iowait[h, i0:i1] = wait
            self.a[h, i0:i1] = np.minimum(self.a[h, i0:i1], 1.0 - wait) * rng.uniform(0.3, 0.9)
            self.extra_runq[h, i0:i1] = cpus[h] * wait * rng.uniform(1.0, 3.0)
            scale = rng.uniform(0.05, 1.5)
            self.read[h, i0:i1] *= scale
            self.write[h, i0:i1] *= scale
        for h, i0, i1 in self._windows("disk_filling"):
            self.write[h, i0:i1] = np.maximum(self.write[h, i0:i1], self.wr_level[h, 0]) * rng.uniform(
                2.0, 8.0
            )

    def cpu(self) -> None:
        """cpu in jiffies: the ratios are exact counter differences."""
        lu, a = self.lu, self.a
        # The kernel's share of the busy time: ~1 % for number crunching, up to half for I/O-heavy services
        # (and idle boxes); jobs and bursts have their own.
        host_share, work_share = lu(0.01, 0.5), lu(0.003, 0.3)
        share = np.where(self.bursting | self.job_on, work_share, host_share)
        share = np.where(self.streaming, np.maximum(share, self.u(0.3, 0.9)), share)
        user_frac = 1.0 - np.clip(share * self.noise(0.3, 0.5), 0.002, 0.8)
        total = np.round(USER_HZ * self.dtc * self.cpus[:, None])
        user_j = np.round(a * user_frac * total)
        system_j = np.minimum(np.round(a * total) - user_j, total - user_j)
        wait_j = np.minimum(np.round(np.minimum(self.iowait, 1.0 - a) * total), total - user_j - system_j)
        for h, i0, i1 in self._windows("iowait_storm"):  # the storm's iowait wins over rounding
            wait_j[h, i0:i1] = np.round(self.iowait[h, i0:i1] * total[h])
            spare = total[h] - wait_j[h, i0:i1]
            user_j[h, i0:i1] = np.minimum(user_j[h, i0:i1], spare)
            system_j[h, i0:i1] = np.minimum(system_j[h, i0:i1], spare - user_j[h, i0:i1])
        self.user, self.system, self.wait = user_j / total, system_j / total, wait_j / total

    def loads(self) -> None:
        """The kernel's load averages: exponentially damped means of the run-queue."""
        c, busy = self.cpus[:, None], self.user + self.system
        runq = c * busy * (1.0 + self.queue * busy**3) + c * self.wait * self.d_state + self.background
        runq = runq * self.runq_noise + self.extra_runq
        # The averages start where the host's normal run-queue of its first 15 minutes has them.
        warm = (np.arange(self.n)[None, :] < np.ceil(900.0 / self.dtc)) & ~self.in_window
        warm = np.where(warm.any(axis=1, keepdims=True), warm, ~self.in_window)
        start_level = (runq * warm).sum(axis=1) / np.maximum(warm.sum(axis=1), 1)
        start_level = np.where(warm.any(axis=1), start_level, self.background[:, 0])
        loads = []
        for window in _LOAD_WINDOWS_S:
            decay = np.exp(-self.dt / window)
            level_now = start_level.copy()
            out = np.empty(self.size)
            for i in range(self.n):
                level_now = level_now * decay + runq[:, i] * (1.0 - decay)
                out[:, i] = level_now
            loads.append(np.round(out, 2))
        self.load1, self.load5, self.load15 = loads

    def incidents_after_cpu(self) -> None:
        """Memory, filesystem, errors."""
        rng = self.rng
        for h, k, i0, i1 in self.windows:
            name = INCIDENT_KINDS[k]
            if name == "memory_leak":
                _ramp_to(self.memory[h], i0, i1, rng.uniform(0.955, 0.995), rng)
            elif name == "disk_filling":
                _ramp_to(self.filesystem[h], i0, i1, rng.uniform(0.955, 0.999), rng)
            elif name == "interface_errors":
                m, dt = i1 - i0, self.dt[h]
                floor = math.ceil(ERRORS_PER_S * dt)
                rate = float(np.exp(rng.uniform(np.log(ERRORS_PER_S * 1.2), np.log(300.0))))
                self.rx_err[h, i0:i1] = np.maximum(floor, np.round(rate * dt * rng.lognormal(0.0, 0.2, m)))
                if rng.random() < 0.5:
                    tx_rate = rate * rng.uniform(0.2, 1.0)
                    self.tx_err[h, i0:i1] = np.round(tx_rate * dt * rng.lognormal(0.0, 0.2, m))

    # ------------------------------------------------------------------ results

    def values(self) -> dict[str, np.ndarray]:
        dtc = self.dtc
        read = np.minimum(np.round(self.read * dtc / PAGE) * PAGE, MAX_DISK_RATE * dtc)
        write = np.minimum(np.round(self.write * dtc / PAGE) * PAGE, MAX_DISK_RATE * dtc)
        columns = (
            self.user,
            self.system,
            self.wait,
            np.round(self.memory, 6),
            self.load1,
            self.load5,
            self.load15,
            self.rx_bytes / dtc,
            self.tx_bytes / dtc,
            self.rx_packets / dtc,
            self.tx_packets / dtc,
            self.rx_err / dtc,
            self.tx_err / dtc,
            read / dtc,
            write / dtc,
            np.round(self.filesystem, 6),
        )
        return dict(zip(HOST_FEATURES, columns, strict=True))

    def labels(self) -> tuple[np.ndarray, np.ndarray]:
        """Kinds where an incident's definition holds in its window; in_window, with the recovery."""
        kinds = np.zeros(self.size, dtype=np.int64)
        in_window = self.in_window.copy()
        busy = self.user + self.system
        for h, kind, i0, i1 in self.windows:
            name, dt, sl = INCIDENT_KINDS[kind], self.dt[h], slice(i0, i1)
            if name in _RECOVERY_KINDS:  # the load averages take minutes to come back down
                in_window[h, i1 : i1 + math.ceil(RECOVERY_S / dt)] = True
            if name == "cpu_saturation":
                load_ok = self.load1[h, sl] >= SATURATION_LOAD_PER_CPU * self.cpus[h]
                holds = (busy[h, sl] >= SATURATION_BUSY) & load_ok
            elif name == "memory_leak":
                holds = self.memory[h, sl] >= LEAK_MEMORY
            elif name == "disk_filling":
                holds = self.filesystem[h, sl] >= FILLING_FILESYSTEM
            elif name == "interface_errors":
                holds = (self.rx_err[h, sl] >= ERRORS_PER_S * dt) | (self.tx_err[h, sl] >= ERRORS_PER_S * dt)
            else:
                holds = self.wait[h, sl] >= IOWAIT_STORM
            kinds[h, sl] = np.where(holds, kind, kinds[h, sl])
        return kinds, in_window


def name_seed(name: str) -> int:
    """A stable 32-bit number from a host name (renderers derive boot times and counter bases from it)."""
    return zlib.crc32(name.encode())
