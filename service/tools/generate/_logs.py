"""Log events: message templates per class with variable parts, and the class and level mixes."""

from __future__ import annotations

import random
import string
from collections.abc import Callable

import numpy as np

from service.tools.generate._world import FLEET, SERVICES

# routine, performance, connectivity, security, failure
LABEL_MIX = np.array([0.50, 0.13, 0.13, 0.11, 0.13])

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
LEVEL_CDF = np.cumsum(_LEVEL_P, axis=1)
LEVEL_CDF[:, -1] = 1.0  # guard against float round-off leaving a gap at 1.0


def _hex(r: random.Random, k: int) -> str:
    return f"{r.getrandbits(4 * k):0{k}x}"


_SERVICE_NAMES = tuple(s.name for s in SERVICES)
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
    "host": lambda r: r.choice(FLEET.hosts),
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
TEMPLATES: tuple[tuple[_Template, ...], ...] = tuple(tuple(map(_Template, ts)) for ts in _TEMPLATE_TEXT)

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


def context_tail(r: random.Random) -> str:
    keys = r.sample(_TAIL_KEYS, r.randrange(1, len(_TAIL_KEYS) + 1))
    return " ".join(f"{k}={fill(r)}" for k, fill in keys)
