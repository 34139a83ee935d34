"""The fixed world the generator draws from: metric features, log labels and levels, anomaly kinds, and
the fleet of services and hosts with their baselines (the same for every seed)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

METRIC_FEATURES: tuple[str, ...] = (
    "req_rate",  # requests per second
    "cpu_pct",  # 0..100
    "mem_pct",  # 0..100
    "load_1m",  # 1-minute load average (scales with the host's cores)
    "disk_io_mbps",
    "net_in_mbps",
    "net_out_mbps",
    "latency_p99_ms",
    "error_rate",  # failed requests per second
    "gc_pause_ms",  # total GC pause in the sample interval
    "open_conns",
)

LOG_LABELS: tuple[str, ...] = ("routine", "performance", "connectivity", "security", "failure")

ANOMALY_KINDS: tuple[str, ...] = (
    "normal",
    "cpu_spike",
    "memory_leak",
    "latency_blowup",
    "network_saturation",
    "cpu_runaway",  # subtle: cpu well above what the traffic explains, latency unaffected
    "connection_leak",  # subtle: connections pile up although latency and traffic are normal
    "egress_drop",  # subtle: responses much smaller than the request rate implies (truncated/empty bodies)
)
"""Index 0 is normal; :meth:`EventGenerator.metrics_with_kinds` returns indices into this tuple."""

LOG_LEVELS: tuple[str, ...] = ("DEBUG", "INFO", "WARN", "ERROR", "FATAL")

# 2024-06-01T00:00:00Z; deterministic default start of the simulated clock.
DEFAULT_START_MS = 1_717_200_000_000
# Mean spacing of the simulated clocks. Metrics are spaced widely so that a few thousand events span the
# diurnal cycle (a training set must see day and night traffic).
METRICS_INTERVAL_MS = 6_000.0
LOGS_INTERVAL_MS = 40.0
# Fixed seed of the fleet layout: the same hosts and baselines for every generator seed.
_FLEET_SEED = 20240601


@dataclass(frozen=True, slots=True)
class _Service:
    name: str
    host_prefix: str
    hosts: int
    rps: float  # mean requests/s per host at the diurnal mean
    cores: int
    cpu_idle: float  # cpu % at zero traffic
    cpu_per_rps: float  # cpu % per request/s
    mem_base: float  # memory %
    latency_ms: float  # p99 at light load
    error_frac: float  # fraction of requests failing
    kb_in: float  # mean request size
    kb_out: float  # mean response size
    disk_base: float  # background MB/s
    disk_per_rps: float  # MB/s per request/s
    gc_ms: float  # gc pause per sample at baseline memory
    conn_pool: float  # idle connections held open (pools, keep-alives)


SERVICES: tuple[_Service, ...] = (
    _Service("checkout", "web", 6, 120, 8, 6, 0.30, 52, 180, 0.004, 4, 14, 2, 0.01, 14, 40),
    _Service("payments", "pay", 4, 60, 4, 5, 0.55, 48, 320, 0.006, 3, 3, 1, 0.02, 10, 30),
    _Service("search", "search", 5, 260, 16, 10, 0.20, 68, 95, 0.002, 2, 38, 8, 0.05, 22, 60),
    _Service("auth", "auth", 3, 420, 4, 4, 0.10, 38, 35, 0.010, 1, 2, 0.5, 0.001, 6, 80),
    _Service("inventory", "db", 4, 150, 8, 8, 0.25, 74, 60, 0.001, 2, 6, 20, 0.40, 4, 120),
    _Service("gateway", "edge", 6, 900, 8, 5, 0.045, 30, 25, 0.003, 6, 24, 0.5, 0.0, 3, 200),
    _Service("recommendations", "ml", 3, 70, 16, 12, 0.60, 78, 240, 0.002, 2, 9, 3, 0.02, 35, 20),
    _Service("notifications", "worker", 3, 40, 4, 3, 0.50, 44, 400, 0.008, 2, 1, 1, 0.01, 8, 15),
)


class _Fleet:
    """The fixed set of hosts, as parallel arrays indexed by host number."""

    def __init__(self) -> None:
        rng = np.random.default_rng(_FLEET_SEED)
        names: list[str] = []
        svc_index: list[int] = []
        for i, svc in enumerate(SERVICES):
            numbers = rng.choice(np.arange(1, 40), size=svc.hosts, replace=False)
            for num in sorted(numbers.tolist()):
                names.append(f"{svc.host_prefix}-{num:02d}")
                svc_index.append(i)
        self.hosts: tuple[str, ...] = tuple(names)
        self.service_index = np.array(svc_index)
        self.service_names: tuple[str, ...] = tuple(s.name for s in SERVICES)
        # Hosts of one service do not share traffic evenly (balancer weights, hot shards).
        self.weight = rng.uniform(0.8, 1.2, size=len(names))

        def column(field: str) -> np.ndarray:
            return np.array([getattr(SERVICES[i], field) for i in svc_index], dtype=np.float64)

        self.col = {f: column(f) for f in _Service.__dataclass_fields__ if f not in ("name", "host_prefix")}


FLEET = _Fleet()
