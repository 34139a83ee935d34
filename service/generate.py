"""Synthetic monitoring and log events: what the reference models are trained on and the load generator sends.

Pure module (stdlib + numpy). Everything is drawn from one seed, so the same seed gives the same events, and
different seeds give independent samples of the same world: the fleet (services, hosts, their baselines) is
fixed, only the traffic and the variable parts of messages change. That is what lets a model trained on one
seed be evaluated on another.

Metrics events are JSON-able dicts ``{"ts", "host", "service", <METRIC_FEATURES>...}``. Normal behaviour is
driven by one latent load per host (per-service baseline x diurnal cycle x host weight x noise) from which the
features follow with realistic couplings (cpu ~ load, latency grows with utilisation, open connections follow
Little's law, bytes follow requests, gc pauses follow memory). Anomalies come in :data:`ANOMALY_KINDS`: loud
ones (cpu spike, memory leak, latency blowup with error burst, network saturation) and subtle ones that stay
inside every feature's normal range and only break the correlations (cpu runaway, connection leak, egress
drop).

Log events are ``{"ts", "host", "service", "level", "message"}``, labelled by :data:`LOG_LABELS`. Messages
come from many templates per class with variable parts and vocabulary shared between classes; the level is
drawn per class with overlapping distributions so it does not determine the label.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
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
_METRICS_INTERVAL_MS = 6_000.0
_LOGS_INTERVAL_MS = 40.0
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


_SERVICES: tuple[_Service, ...] = (
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
        for i, svc in enumerate(_SERVICES):
            numbers = rng.choice(np.arange(1, 40), size=svc.hosts, replace=False)
            for num in sorted(numbers.tolist()):
                names.append(f"{svc.host_prefix}-{num:02d}")
                svc_index.append(i)
        self.hosts: tuple[str, ...] = tuple(names)
        self.service_index = np.array(svc_index)
        self.service_names: tuple[str, ...] = tuple(s.name for s in _SERVICES)
        # Hosts of one service do not share traffic evenly (balancer weights, hot shards).
        self.weight = rng.uniform(0.8, 1.2, size=len(names))

        def column(field: str) -> np.ndarray:
            return np.array([getattr(_SERVICES[i], field) for i in svc_index], dtype=np.float64)

        self.col = {f: column(f) for f in _Service.__dataclass_fields__ if f not in ("name", "host_prefix")}


_FLEET = _Fleet()


class EventGenerator:
    """Seeded source of metrics and log events.

    Each call continues the generator's simulated clocks and random stream, so consecutive calls give new
    events with increasing timestamps. Two generators built with the same ``seed`` (and ``start_ms``) produce
    identical sequences of calls' results; ``seed=None`` draws fresh entropy.
    """

    def __init__(self, seed: int | None = None, *, start_ms: int = DEFAULT_START_MS) -> None:
        self._rng = np.random.default_rng(seed)
        # Python's Random is ~10x cheaper per call than numpy's scalar draws; used to fill message slots.
        self._py = random.Random(int(self._rng.integers(2**63)))
        self._metrics_clock = float(start_ms)
        self._logs_clock = float(start_ms)

    # ------------------------------------------------------------------ metrics

    def metrics(self, n: int, anomaly_ratio: float = 0.02) -> list[dict]:
        """``n`` metrics events; each is an anomaly independently with probability ``anomaly_ratio``."""
        return self.metrics_with_kinds(n, anomaly_ratio)[0]

    def metrics_labeled(self, n: int, anomaly_ratio: float) -> tuple[list[dict], np.ndarray]:
        """Like :meth:`metrics`, plus a bool array, True where the event is an anomaly."""
        events, kinds = self.metrics_with_kinds(n, anomaly_ratio)
        return events, kinds > 0

    def metrics_with_kinds(self, n: int, anomaly_ratio: float) -> tuple[list[dict], np.ndarray]:
        """Like :meth:`metrics`, plus an int array of indices into :data:`ANOMALY_KINDS` (0 = normal)."""
        if not 0.0 <= anomaly_ratio <= 1.0:
            raise ValueError(f"anomaly_ratio must be in [0, 1], got {anomaly_ratio}")
        rng = self._rng
        ts = self._advance("_metrics_clock", n, _METRICS_INTERVAL_MS)
        host = rng.integers(len(_FLEET.hosts), size=n)
        values = _normal_metrics(rng, ts, host)
        kinds = np.zeros(n, dtype=np.int64)
        is_anomaly = rng.random(n) < anomaly_ratio
        n_anom = int(is_anomaly.sum())
        if n_anom:
            # Loud kinds are more common in practice, but subtle ones are a good share of what matters.
            weights = np.array([0.17, 0.15, 0.17, 0.13, 0.14, 0.12, 0.12])
            kinds[is_anomaly] = rng.choice(np.arange(1, len(ANOMALY_KINDS)), size=n_anom, p=weights)
            _inject_anomalies(rng, values, host, kinds)
        return _metrics_events(ts, host, values), kinds

    # ------------------------------------------------------------------ logs

    def logs(self, n: int) -> list[dict]:
        """``n`` log events with a realistic class mix (mostly routine)."""
        return self.logs_labeled(n)[0]

    def logs_labeled(self, n: int) -> tuple[list[dict], np.ndarray]:
        """Like :meth:`logs`, plus an int array of indices into :data:`LOG_LABELS`."""
        rng = self._rng
        ts = self._advance("_logs_clock", n, _LOGS_INTERVAL_MS).tolist()
        labels = rng.choice(len(LOG_LABELS), size=n, p=_LABEL_MIX)
        host = rng.integers(len(_FLEET.hosts), size=n)
        # Vectorised draws; the per-event loop below only formats strings.
        levels = (rng.random(n)[:, None] >= _LEVEL_CDF[labels]).sum(axis=1).tolist()
        with_tail = (rng.random(n) < 0.45).tolist()
        py = self._py
        hosts, svc_names = _FLEET.hosts, _FLEET.service_names
        svc_of = _FLEET.service_index.tolist()
        events: list[dict] = []
        for i, (label, h) in enumerate(zip(labels.tolist(), host.tolist(), strict=True)):
            templates = _TEMPLATES[label]
            message = templates[py.randrange(len(templates))].render(py)
            if with_tail[i]:
                message = f"{message} {_context_tail(py)}"
            events.append(
                {
                    "ts": ts[i],
                    "host": hosts[h],
                    "service": svc_names[svc_of[h]],
                    "level": LOG_LEVELS[levels[i]],
                    "message": message,
                }
            )
        return events, labels.astype(np.int64)

    # ------------------------------------------------------------------ helpers

    def _advance(self, clock: str, n: int, mean_ms: float) -> np.ndarray:
        """Next ``n`` increasing epoch-ms timestamps (Poisson arrivals) of one simulated clock."""
        start = getattr(self, clock)
        t = start + np.cumsum(self._rng.exponential(mean_ms, size=n))
        if n:
            setattr(self, clock, float(t[-1]))
        return t.astype(np.int64)


# ---------------------------------------------------------------------- metrics internals


def _normal_metrics(rng: np.random.Generator, ts: np.ndarray, host: np.ndarray) -> dict[str, np.ndarray]:
    """Healthy feature values for the given hosts at the given times."""
    c = {k: v[host] for k, v in _FLEET.col.items()}
    n = len(host)
    hour = (ts / 3_600_000.0) % 24.0
    # Traffic peaks mid-afternoon UTC and bottoms out at night.
    diurnal = 1.0 + 0.45 * np.sin(2 * np.pi * (hour - 9.0) / 24.0)
    req = c["rps"] * diurnal * _FLEET.weight[host] * rng.lognormal(0.0, 0.15, n)
    cpu = np.clip(c["cpu_idle"] + c["cpu_per_rps"] * req + rng.normal(0.0, 1.5, n), 0.5, 100.0)
    rho = np.minimum(cpu / 100.0, 0.97)
    load = c["cores"] * rho * rng.lognormal(0.0, 0.08, n) + np.abs(rng.normal(0.0, 0.05, n))
    # Queueing: the tail latency grows like rho / (1 - rho) as the host saturates.
    latency = c["latency_ms"] * (1.0 + 0.5 * rho / (1.0 - rho)) * rng.lognormal(0.0, 0.12, n)
    errors = req * c["error_frac"] * rng.lognormal(0.0, 0.3, n)
    net_in = req * c["kb_in"] * 8e-3 * rng.lognormal(0.0, 0.06, n)
    net_out = req * c["kb_out"] * 8e-3 * rng.lognormal(0.0, 0.06, n)
    disk = c["disk_base"] * rng.lognormal(0.0, 0.3, n) + c["disk_per_rps"] * req * rng.lognormal(0.0, 0.1, n)
    mem = np.clip(c["mem_base"] + 6.0 * rho + rng.normal(0.0, 1.5, n), 1.0, 100.0)
    gc = c["gc_ms"] * (mem / c["mem_base"]) ** 3 * (0.7 + 0.3 * req / c["rps"]) * rng.lognormal(0.0, 0.25, n)
    # Little's law: concurrency = arrival rate x time in system (mean latency ~ p99 / 4).
    conns = c["conn_pool"] + req * latency / 4000.0 + rng.normal(0.0, 2.0, n)
    return {
        "req_rate": req,
        "cpu_pct": cpu,
        "mem_pct": mem,
        "load_1m": load,
        "disk_io_mbps": disk,
        "net_in_mbps": net_in,
        "net_out_mbps": net_out,
        "latency_p99_ms": latency,
        "error_rate": errors,
        "gc_pause_ms": gc,
        "open_conns": np.maximum(conns, 0.0),
    }


def _inject_anomalies(
    rng: np.random.Generator, v: dict[str, np.ndarray], host: np.ndarray, kinds: np.ndarray
) -> None:
    """Rewrite the rows of ``v`` whose ``kinds`` is non-zero, in place, per anomaly kind."""
    cores = _FLEET.col["cores"][host]
    k = ANOMALY_KINDS.index

    def rows(kind: str) -> tuple[np.ndarray, int]:
        idx = np.flatnonzero(kinds == k(kind))
        return idx, len(idx)

    idx, m = rows("cpu_spike")  # runaway job / hot loop: cpu pinned, load and latency follow
    if m:
        v["cpu_pct"][idx] = rng.uniform(88.0, 100.0, m)
        v["load_1m"][idx] = cores[idx] * rng.uniform(1.1, 2.5, m)
        v["latency_p99_ms"][idx] *= rng.uniform(1.5, 4.0, m)

    idx, m = rows("memory_leak")  # heap nearly full: gc thrashes, latency creeps up
    if m:
        v["mem_pct"][idx] = rng.uniform(88.0, 99.5, m)
        v["gc_pause_ms"][idx] *= rng.uniform(6.0, 30.0, m)
        v["latency_p99_ms"][idx] *= rng.uniform(1.1, 1.8, m)
        v["cpu_pct"][idx] = np.minimum(v["cpu_pct"][idx] + rng.uniform(3.0, 12.0, m), 100.0)

    idx, m = rows("latency_blowup")  # slow dependency: latency and errors explode, connections pile up
    if m:
        factor = rng.uniform(4.0, 20.0, m)
        v["latency_p99_ms"][idx] *= factor
        v["error_rate"][idx] = v["req_rate"][idx] * rng.uniform(0.05, 0.4, m)
        v["open_conns"][idx] *= np.sqrt(factor)
        v["net_out_mbps"][idx] *= rng.uniform(0.5, 0.9, m)

    idx, m = rows("network_saturation")  # a flood or backup job fills the NIC
    if m:
        v["net_in_mbps"][idx] *= rng.uniform(4.0, 12.0, m)
        v["net_out_mbps"][idx] *= rng.uniform(2.0, 8.0, m)
        v["latency_p99_ms"][idx] *= rng.uniform(1.5, 3.0, m)
        v["error_rate"][idx] *= rng.uniform(2.0, 8.0, m)

    idx, m = rows("cpu_runaway")  # subtle: +10-30 cpu points the traffic does not explain; latency unaffected
    if m:
        extra = rng.uniform(10.0, 30.0, m)
        v["cpu_pct"][idx] = np.minimum(v["cpu_pct"][idx] + extra, 95.0)
        v["load_1m"][idx] += cores[idx] * extra / 100.0

    idx, m = rows("connection_leak")  # subtle: connections never returned to the pool
    if m:
        v["open_conns"][idx] = v["open_conns"][idx] * rng.uniform(1.4, 3.0, m) + rng.uniform(5.0, 40.0, m)

    idx, m = rows("egress_drop")  # subtle: requests arrive but responses are truncated or empty
    if m:
        v["net_out_mbps"][idx] *= rng.uniform(0.3, 0.7, m)


# Per-feature rounding, as a metrics agent would report them.
_DECIMALS: dict[str, int] = {
    "req_rate": 1,
    "cpu_pct": 1,
    "mem_pct": 1,
    "load_1m": 2,
    "disk_io_mbps": 2,
    "net_in_mbps": 2,
    "net_out_mbps": 2,
    "latency_p99_ms": 1,
    "error_rate": 3,
    "gc_pause_ms": 1,
    "open_conns": 0,
}


def _metrics_events(ts: np.ndarray, host: np.ndarray, v: dict[str, np.ndarray]) -> list[dict]:
    # Column-wise tolist() then one dict per row: ~10x faster than indexing numpy scalars per event.
    cols = [np.round(v[f], _DECIMALS[f]).astype(np.float64).tolist() for f in METRIC_FEATURES]
    hosts = [_FLEET.hosts[h] for h in host.tolist()]
    services = [_FLEET.service_names[_FLEET.service_index[h]] for h in host.tolist()]
    events: list[dict] = []
    for i, t in enumerate(ts.tolist()):
        ev: dict = {"ts": t, "host": hosts[i], "service": services[i]}
        for name, col in zip(METRIC_FEATURES, cols, strict=True):
            ev[name] = col[i]
        events.append(ev)
    return events


# ---------------------------------------------------------------------- log internals

# routine, performance, connectivity, security, failure
_LABEL_MIX = np.array([0.50, 0.13, 0.13, 0.11, 0.13])

# P(level | class) over LOG_LEVELS, overlapping on purpose: the level alone must not give the label away.
_LEVEL_P = np.array(
    [
        [0.25, 0.68, 0.06, 0.01, 0.00],  # routine
        [0.02, 0.30, 0.52, 0.16, 0.00],  # performance
        [0.01, 0.14, 0.45, 0.38, 0.02],  # connectivity
        [0.01, 0.38, 0.40, 0.19, 0.02],  # security
        [0.00, 0.04, 0.18, 0.62, 0.16],  # failure
    ]
)
_LEVEL_CDF = np.cumsum(_LEVEL_P, axis=1)
_LEVEL_CDF[:, -1] = 1.0  # guard against float round-off leaving a gap at 1.0


def _hex(r: random.Random, k: int) -> str:
    return f"{r.getrandbits(4 * k):0{k}x}"


_SERVICE_NAMES = tuple(s.name for s in _SERVICES)
_USERS = ("alice", "bob", "carol", "dmitri", "erin", "farah", "gwen", "hiro", "ines", "jakub", "kofi", "lena")
_TABLES = ("orders", "order_items", "users", "sessions", "payments", "inventory", "carts", "audit_log")
_QUEUES = ("orders.created", "payments.settled", "email.outbox", "search.reindex", "audit.events")
_RESOURCES = ("orders", "users", "carts", "products", "payments", "sessions", "invoices", "reviews")
_EXCEPTIONS = (
    "NullPointerException",
    "IllegalStateException",
    "KeyError",
    "ValueError",
    "IndexOutOfBoundsException",
    "OutOfMemoryError",
    "SerializationException",
    "AssertionError",
    "TypeError",
    "ConcurrentModificationException",
)
_REGIONS = ("eu-west-1", "eu-central-1", "us-east-1", "us-west-2", "ap-southeast-1")
_METHODS = ("GET", "GET", "GET", "POST", "POST", "PUT", "DELETE", "PATCH")
_COUNTRIES = ("DE", "FR", "US", "BR", "IN", "NG", "RU", "CN", "VN", "NL")
_CIPHERS = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
_JOBS = ("nightly-reindex", "cache-warmup", "report-export", "session-gc", "ledger-reconcile")
_POOLS = ("db-main", "db-replica", "redis", "http-upstream", "kafka-producer")
_SIGNALS = ("SIGKILL", "SIGSEGV", "SIGABRT", "SIGTERM")


def _ip(r: random.Random) -> str:
    if r.random() < 0.6:
        return f"10.{r.randrange(256)}.{r.randrange(256)}.{r.randrange(1, 255)}"
    return f"{r.randrange(1, 224)}.{r.randrange(256)}.{r.randrange(256)}.{r.randrange(1, 255)}"


def _path(r: random.Random) -> str:
    res = r.choice(_RESOURCES)
    roll = r.random()
    if roll < 0.4:
        return f"/api/v{r.randrange(1, 4)}/{res}/{r.randrange(1, 999_999)}"
    if roll < 0.7:
        return f"/api/v{r.randrange(1, 4)}/{res}"
    if roll < 0.85:
        return f"/api/v2/{res}/{_hex(r, 8)}/items?limit={r.choice((10, 20, 50, 100))}"
    return r.choice(("/health", "/metrics", "/login", "/logout", "/static/app.js", "/graphql"))


# Slot name -> filler. Templates name slots as {slot}; a slot repeated in a template gets one value.
_FILLERS: dict[str, Callable[[random.Random], str]] = {
    "ip": _ip,
    "port": lambda r: str(r.choice((80, 443, 5432, 6379, 9092, 8080, 8443, 3306, 9200, 2181))),
    "user": lambda r: (
        f"u-{r.randrange(10_000, 999_999)}"
        if r.random() < 0.6
        else f"{r.choice(_USERS)}.{r.randrange(1, 99)}"
    ),
    "ms": lambda r: str(int(r.lognormvariate(3.5, 1.0)) + 1),
    "slow_ms": lambda r: str(int(r.lognormvariate(7.5, 0.8)) + 500),
    "sec": lambda r: f"{r.lognormvariate(0.5, 1.0):.2f}",
    "path": _path,
    "method": lambda r: r.choice(_METHODS),
    "svc": lambda r: r.choice(_SERVICE_NAMES),
    "host": lambda r: r.choice(_FLEET.hosts),
    "rid": lambda r: _hex(r, 12),
    "hex": lambda r: _hex(r, 8),
    "trace": lambda r: _hex(r, 16),
    "n": lambda r: str(r.randrange(2, 64)),
    "big": lambda r: str(r.randrange(1_000, 5_000_000)),
    "pct": lambda r: str(r.randrange(70, 100)),
    "low_pct": lambda r: str(r.randrange(1, 60)),
    "kb": lambda r: str(r.randrange(1, 20_000)),
    "table": lambda r: r.choice(_TABLES),
    "queue": lambda r: r.choice(_QUEUES),
    "exc": lambda r: r.choice(_EXCEPTIONS),
    "region": lambda r: r.choice(_REGIONS),
    "country": lambda r: r.choice(_COUNTRIES),
    "cipher": lambda r: r.choice(_CIPHERS),
    "job": lambda r: r.choice(_JOBS),
    "pool": lambda r: r.choice(_POOLS),
    "signal": lambda r: r.choice(_SIGNALS),
    "version": lambda r: f"{r.randrange(1, 5)}.{r.randrange(0, 30)}.{r.randrange(0, 12)}",
    "line": lambda r: str(r.randrange(20, 2400)),
    "partition": lambda r: str(r.randrange(0, 48)),
    "offset": lambda r: str(r.randrange(10_000, 90_000_000)),
    "status2": lambda r: r.choice(("200", "200", "200", "201", "204", "304")),
    "status4": lambda r: r.choice(("401", "403")),
    "status5": lambda r: r.choice(("500", "500", "502")),
    "statusc": lambda r: r.choice(("503", "504", "502")),
}


class _Template:
    """A message template with its slot names parsed once (parsing per message would dominate the cost)."""

    __slots__ = ("fillers", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        names = {name for _, name, _, _ in string.Formatter().parse(text) if name}
        self.fillers = tuple((name, _FILLERS[name]) for name in sorted(names))

    def render(self, r: random.Random) -> str:
        return self.text.format_map({name: fill(r) for name, fill in self.fillers})


_TEMPLATE_TEXT: tuple[tuple[str, ...], ...] = (
    (  # routine
        "{method} {path} {status2} {ms}ms",
        "request {rid} {method} {path} completed with status {status2} in {ms}ms",
        "user {user} logged in from {ip}",
        "user {user} logged out, session duration {sec}s",
        "session {hex} refreshed for user {user}",
        "health check ok",
        "health check passed for {svc} ({n} instances)",
        "cache hit ratio {pct}% over last {n} minutes",
        "scheduled job {job} started",
        "scheduled job {job} finished in {sec}s, processed {big} records",
        "consumer group {svc}-workers rebalanced, assigned {n} partitions",
        "committed offset {offset} for {queue} partition {partition}",
        "published {n} events to {queue}",
        "connection to {host}:{port} established",
        "opened connection pool {pool} with {n} connections",
        "config reloaded, version {version}",
        "starting {svc} version {version} in {region}",
        "flushed {kb} KB to disk in {ms}ms",
        "order {big} created for user {user}, {n} items",
        "payment {hex} authorized for order {big}",
        "query on {table} returned {n} rows in {ms}ms",
        "tls handshake with {ip} completed using {cipher}",
        "token issued for user {user}, expires in {n} minutes",
        "gc completed, freed {kb} KB in {ms}ms",
        "feature flag checkout_v{n} evaluated for user {user}",
    ),
    (  # performance
        "slow request {rid} {method} {path} took {slow_ms}ms (threshold {ms}ms)",
        "request {rid} {method} {path} completed with status {status2} in {slow_ms}ms, exceeding slo",
        "slow query on {table} took {slow_ms}ms: full table scan",
        "query on {table} returned {big} rows in {slow_ms}ms",
        "gc pause of {slow_ms}ms exceeded target of {ms}ms",
        "heap usage at {pct}% after full gc",
        "cpu usage {pct}% on {host}, throttling background tasks",
        "thread pool {pool} saturated: {n} active, {big} queued",
        "connection pool {pool} exhausted, waited {slow_ms}ms for a connection",
        "consumer lag on {queue} partition {partition} is {big} messages",
        "cache hit ratio dropped to {low_pct}% for {svc}",
        "event loop blocked for {slow_ms}ms",
        "response time p99 {slow_ms}ms above budget for {path}",
        "disk latency {slow_ms}ms on /var/lib/{svc}, io wait {pct}%",
        "batch of {big} records processed in {sec}s, {n}x slower than baseline",
        "scheduled job {job} finished in {slow_ms}s, over its {n} minute window",
        "backpressure applied to {queue}: queue depth {big}",
        "lock wait on {table} took {slow_ms}ms",
        "search for user {user} took {slow_ms}ms, {n} shards slow to respond",
    ),
    (  # connectivity
        "connection to {host}:{port} refused",
        "connection to {ip}:{port} timed out after {slow_ms}ms",
        "connection reset by peer {ip}:{port}",
        "failed to connect to {svc} at {host}:{port}, retrying in {n}s",
        "upstream {svc} unavailable, status {statusc} for {method} {path}",
        "request {rid} to {svc} failed: upstream connect error or disconnect before headers",
        "dns resolution failed for {svc}.internal: SERVFAIL",
        "lost connection to broker {host}:{port}, reconnecting",
        "kafka producer: broker {host}:{port} disconnected ({n} in-flight requests)",
        "tls handshake with {ip} failed: connection closed",
        "circuit breaker opened for {svc} after {n} consecutive failures",
        "no route to host {ip}",
        "socket read timeout after {sec}s from {ip}:{port}",
        "health check failed for {svc} on {host}: connection timed out",
        "connection pool {pool} could not open connection to {host}:{port}",
        "replication link to {host} down, last heartbeat {n}s ago",
        "network unreachable while contacting {region} endpoint",
        "retry {n}/5 sending to {queue}: broker not available",
        "websocket for user {user} closed: connection lost after {sec}s",
    ),
    (  # security
        "failed login for user {user} from {ip}: invalid password",
        "user {user} locked out after {n} failed login attempts",
        "invalid token presented by {ip} for {method} {path}",
        "request {rid} {method} {path} rejected with status {status4}: signature mismatch",
        "permission denied: user {user} attempted {method} on {path}",
        "jwt expired for user {user}, rejecting request {rid}",
        "rate limit exceeded for {ip}: {big} requests in {n}s",
        "blocked request from {ip} ({country}): matched waf rule sqli-{n}",
        "possible sql injection in parameter q from {ip}",
        "tls handshake with {ip} rejected: client certificate revoked",
        "csrf token mismatch for session {hex}",
        "role admin granted to user {user} by request from {ip}",
        "api key {hex} revoked after use from unrecognized ip {ip}",
        "suspicious login for user {user} from new country {country}",
        "path traversal attempt blocked: {method} /static/../../etc/passwd from {ip}",
        "mfa challenge failed for user {user}",
        "audit: secret db-password read by service account {svc}",
        "session {hex} reused from {ip} after logout",
    ),
    (  # failure
        "unhandled {exc} in {svc} at line {line}",
        "request {rid} {method} {path} failed with status {status5}: {exc}",
        "{exc}: cannot process order {big}",
        "worker {n} crashed with {signal}, restarting",
        "process exited with code {n}",
        "out of memory: killed process {big} ({svc})",
        "disk full on /var/lib/{svc}: no space left on device",
        "failed to write {kb} KB to {table}: transaction rolled back",
        "scheduled job {job} failed after {sec}s: {exc}",
        "deserialization failed for message at offset {offset} on {queue}",
        "panic: runtime error: index out of range [{n}] with length {n}",
        "assertion failed in {svc}: ledger balance mismatch of {big}",
        "failed to start {svc} version {version}: missing config key {table}.url",
        "query on {table} failed: deadlock detected",
        "message {hex} moved to dead letter queue after {n} retries",
        "liveness probe failed on {host}, container restarted {n} times",
        "corrupt index segment {hex} in {table}, rebuilding",
        "payment {hex} failed for order {big}: {exc}",
        "checkout for user {user} failed: {exc} in cart service",
    ),
)
_TEMPLATES: tuple[tuple[_Template, ...], ...] = tuple(tuple(map(_Template, ts)) for ts in _TEMPLATE_TEXT)

# Fields a structured logger appends after the message; shared by every class, so they carry no label signal
# but make lengths vary from a few words to ~200 characters.
_TAIL_KEYS: tuple[tuple[str, Callable[[random.Random], str]], ...] = (
    ("trace_id", lambda r: _hex(r, 16)),
    ("span_id", lambda r: _hex(r, 8)),
    ("pod", lambda r: f"{r.choice(_SERVICE_NAMES)}-{_hex(r, 5)}-{_hex(r, 5)}"),
    ("region", lambda r: r.choice(_REGIONS)),
    ("thread", lambda r: f"worker-{r.randrange(1, 32)}"),
    ("tenant", lambda r: f"t{r.randrange(100, 9999)}"),
    ("attempt", lambda r: str(r.randrange(1, 4))),
)


def _context_tail(r: random.Random) -> str:
    keys = r.sample(_TAIL_KEYS, r.randrange(1, len(_TAIL_KEYS) + 1))
    return " ".join(f"{k}={fill(r)}" for k, fill in keys)
