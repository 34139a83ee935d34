"""Prometheus metrics of one service process, in their own registry.

The loop calls these methods per consumed group, per batch and per commit, never per message: a whole
batch's end-to-end latencies go into their histogram in one numpy step (:class:`BulkHistogram`). Gauges
that describe state (lag, partitions, the target batch size) are set by :meth:`Metrics.state`, which the
loop calls about once a second. Names follow the Prometheus conventions: ``microbatch_`` prefix, base units
(seconds), ``_total`` on counters (added by the client library).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from service.errors import Reason
from service.flow.records import Ack, TopicPartition

PREFIX = "microbatch"
# Seconds: from a tiny model's batch (50 us) to a slow GPU batch or a stalled broker (minutes).
TIME_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_ANSWERED = {Ack.ACCEPT: "accepted", Ack.RELEASE: "released", Ack.REJECT: "rejected"}
EXACT_SIZES = 64
"""Batch sizes up to this (and up to ``MAX_SIZE``) get a bucket each; see :func:`size_buckets`."""
LARGEST_SIZE_BUCKET = 4096


def size_buckets(max_size: int) -> tuple[int, ...]:
    """Histogram buckets for batch sizes: one per size from 1 to ``MAX_SIZE`` (at most ``EXACT_SIZES``),
    then powers of two up to ``LARGEST_SIZE_BUCKET`` for the drain regime's and a backfill's batches.

    Every size is a whole number, so a bucket ``(k-1, k]`` holds only batches of exactly ``k``, and
    ``ceil(histogram_quantile(...))`` is the exact size at that quantile, where powers of two alone made
    ``histogram_quantile`` interpolate batches of 4 down to 3. Above the exact sizes, a quantile is only
    known to lie within its power of two."""
    exact = min(max(max_size, 1), EXACT_SIZES)
    doubling = 1 << exact.bit_length()
    return (*range(1, exact + 1), *(1 << n for n in range(doubling.bit_length() - 1, 13)))


class OptionalGauge(Collector):
    """A gauge with no sample until it has a value: "no data" rather than 0 where a value does not apply
    (the padding efficiency of a model that does not pad, the GPU of a CPU replica). The value is set, or
    read at each scrape from a function (which may fail: no sample then, and the scrape goes on). Safe to
    set from one thread while another scrapes (one attribute, replaced whole)."""

    def __init__(self, name: str, documentation: str) -> None:
        self._name, self._doc = name, documentation
        self._value: float | None = None
        self._read: Callable[[], float] | None = None

    def set(self, value: float) -> None:
        self._value = float(value)

    def set_function(self, read: Callable[[], float]) -> None:
        """Read the value from ``read()`` at each scrape from now on."""
        self._read = read

    def collect(self) -> Iterator[Metric]:
        """The family always (its HELP and TYPE are scraped), with its one sample only when there is a
        value."""
        family = GaugeMetricFamily(self._name, self._doc)
        value = self._value
        if self._read is not None:
            value = None
            with contextlib.suppress(Exception):  # a scrape must not fail because NVML did
                value = float(self._read())
        if value is not None:
            family.add_metric([], value)
        yield family


class BulkHistogram(Collector):
    """A histogram the loop feeds at the cost of a list append: values, one at a time or a whole array, wait
    in a list and are counted into their buckets in one ``searchsorted`` and ``bincount`` when ``FOLD_AT``
    entries have waited or a scrape reads it, where a library histogram takes a lock and scans its buckets
    in Python for every value. Exposed like any Prometheus histogram (``_bucket``, ``_sum``, ``_count``).
    ``scale`` is one fed unit in the exposed one (milliseconds fed, seconds exposed: 0.001). Safe to feed
    from one thread while another scrapes."""

    FOLD_AT = 1024
    """Entries (values or arrays) that may wait: memory stays bounded when nobody scrapes."""

    def __init__(
        self, name: str, documentation: str, buckets: Sequence[float], *, scale: float = 1.0
    ) -> None:
        self._name, self._doc = name, documentation
        self._bounds = np.asarray(buckets, dtype=np.float64)
        self._fed_bounds = self._bounds / scale
        self._scale = scale
        self._counts = np.zeros(len(buckets) + 1, dtype=np.int64)  # the last one is +Inf
        self._sum = 0.0  # in the fed unit
        self._pending: list[float | np.ndarray] = []
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        """Count one value (upper bounds inclusive)."""
        with self._lock:
            self._pending.append(value)
            if len(self._pending) >= self.FOLD_AT:
                self._fold()

    def observe_many(self, values: np.ndarray) -> None:
        """Count every value of ``values`` (any shape) into its bucket (upper bounds inclusive)."""
        if values.size == 0:
            return
        with self._lock:
            self._pending.append(values.ravel())
            if len(self._pending) >= self.FOLD_AT:
                self._fold()

    def _fold(self) -> None:
        """The waiting values into the counts; the caller holds the lock."""
        if not self._pending:
            return
        flat = np.hstack(self._pending).astype(np.float64, copy=False)
        self._pending = []
        self._counts += np.bincount(
            np.searchsorted(self._fed_bounds, flat, side="left"), minlength=self._counts.size
        )
        self._sum += float(flat.sum())

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            self._fold()
            counts, total = self._counts.copy(), self._sum * self._scale
        cumulative = np.cumsum(counts)
        # "1.0", as the library writes (its helper is untyped).
        bounds = [*(floatToGoString(b) for b in self._bounds), "+Inf"]  # type: ignore[no-untyped-call]
        family = HistogramMetricFamily(self._name, self._doc)
        family.add_metric([], list(zip(bounds, cumulative.tolist(), strict=True)), total)
        yield family


class Device(Protocol):
    """What the GPU gauges read (``engine.memory.DeviceMemory``)."""

    total: int

    def used(self) -> int: ...

    def utilization(self) -> float: ...


class Metrics:
    """Every metric of the service. ``registry`` defaults to a fresh one, so tests and several pipelines
    in one process never share counters; the HTTP server serves the registry it is given. ``max_size``:
    ``MAX_SIZE``, up to which each batch size has a bucket of its own."""

    def __init__(self, registry: CollectorRegistry | None = None, max_size: int = 16) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r, p = self.registry, PREFIX
        self.consumed = Counter(f"{p}_events_consumed", "Input messages consumed.", registry=r)
        self.produced = Counter(f"{p}_results_produced", "Results handed to the producer.", registry=r)
        self.acknowledged = Counter(
            f"{p}_outputs_acknowledged",
            "Outputs (results and dead letters, one per item) the broker acknowledged.",
            registry=r,
        )
        self.dead_letters = Counter(
            f"{p}_dead_letters",
            "Messages, or items of them, sent to the dead-letter topic, by reason code.",
            ["reason"],
            registry=r,
        )
        for reason in Reason:  # every reason a series from the start: 0, not "no data", and rate() sees
            self.dead_letters.labels(reason=reason.value)  # the first increment of each
        self.batch_size = BulkHistogram(f"{p}_batch_size", "Items per batch.", size_buckets(max_size))
        self.target_size = Gauge(f"{p}_batch_target_size", "The adaptive controller's target.", registry=r)
        self.queue_wait = BulkHistogram(
            f"{p}_queue_wait_seconds",
            "Per batch: how long its oldest item waited between consume and the batch's start.",
            TIME_BUCKETS,
        )
        self.inference = BulkHistogram(f"{p}_inference_seconds", "Model run time per batch.", TIME_BUCKETS)
        self.latency = BulkHistogram(
            f"{p}_end_to_end_latency_seconds",
            "Per result: from the input's Kafka timestamp to the result handed to the producer.",
            LATENCY_BUCKETS,
            scale=0.001,  # fed in milliseconds, as the loop measures them
        )
        for histogram in (self.batch_size, self.queue_wait, self.inference, self.latency):
            r.register(histogram)
        self.commit_time = Histogram(
            f"{p}_commit_seconds",
            "Synchronous offset commits (on rebalance and shutdown; auto-commits are not timed).",
            buckets=TIME_BUCKETS,
            registry=r,
        )
        self.commits = Counter(
            f"{p}_commits",
            "Offset commits the broker took: the auto-commits (as librdkafka reports them) and the "
            "synchronous ones.",
            registry=r,
        )
        self.commit_failures = Counter(
            f"{p}_commit_failures", "Offset commits that failed, auto or synchronous.", registry=r
        )
        self.last_commit = Gauge(
            f"{p}_last_commit_timestamp_seconds",
            "Unix time of the last offset commit the broker took (0: none yet).",
            registry=r,
        )
        self.transactions = Counter(
            f"{p}_transactions",
            "Exactly-once: transactions ended, by outcome (committed, aborted); an abort rewinds the input "
            "to the last commit and processes it again.",
            ["outcome"],
            registry=r,
        )
        self.transaction_time = Histogram(
            f"{p}_transaction_commit_seconds",
            "Exactly-once: how long committing a transaction took (its deliveries, offsets and markers).",
            buckets=TIME_BUCKETS,
            registry=r,
        )
        self.transactions_fenced = Counter(
            f"{p}_transactions_fenced",
            "Exactly-once: transactions aborted because the group had moved on without this instance "
            "(a zombie fenced by its group's generation, or partitions lost).",
            registry=r,
        )
        self.share_records = Counter(
            f"{p}_share_records",
            "Share groups: records acquired from the group, and answered: accepted (done), released (back "
            "to the group, at a stop) or rejected.",
            ["outcome"],
            registry=r,
        )
        self.share_delivery_count = Histogram(
            f"{p}_share_delivery_count",
            "Share groups: each acquired record's delivery count (1 the first time; more: delivered again "
            "after a lock ran out, a release, or a member's crash).",
            buckets=(1, 2, 3, 4, 5, 6, 8, 10),
            registry=r,
        )
        self.transaction_age = Gauge(
            f"{p}_transaction_age_seconds",
            "Exactly-once: how long the open transaction has been open (0: none is).",
            registry=r,
        )
        self.authorization_failures = Counter(
            f"{p}_authorization_failures",
            "Requests and deliveries the cluster refused for want of an ACL, by the permission missing "
            "(logged once per refusal as not_authorised).",
            ["operation", "resource", "name"],
            registry=r,
        )
        self.splits = Counter(
            f"{p}_batch_splits", "Failed batches split in halves (e.g. GPU out of memory).", registry=r
        )
        self.lag = Gauge(
            f"{p}_consumer_lag",
            "Messages between the consumer's position and the partition's end (last fetch).",
            ["topic", "partition"],
            registry=r,
        )
        self.assigned = Gauge(f"{p}_assigned_partitions", "Partitions assigned to this consumer.", registry=r)
        self.paused = Gauge(f"{p}_paused_partitions", "Partitions paused by back-pressure.", registry=r)
        self.in_flight = Gauge(
            f"{p}_in_flight_events", "Consumed messages whose output is not acknowledged yet.", registry=r
        )
        self.padding = OptionalGauge(
            f"{p}_padding_efficiency",
            "Real over padded tokens, last stats window with batches (text models; no sample otherwise).",
        )
        r.register(self.padding)
        self.points = Counter(
            f"{p}_points",
            "Data points of agents' metrics (rows assembled): used by a row, ignored (no feature reads "
            "them), late (their row had closed), empty (no value yet: a counter's first sample).",
            ["outcome"],
            registry=r,
        )
        self.rows = Counter(
            f"{p}_rows",
            "Assembled rows closed: scored complete, scored with optional features filled, or incomplete "
            "(a required feature missing: not scored).",
            ["outcome"],
            registry=r,
        )
        self.fields_never_seen = Counter(
            f"{p}_fields_never_seen",
            "Fields the processor reads that none of the first events carried (logged as field_never_seen).",
            ["field"],
            registry=r,
        )
        self.open_rows = Gauge(f"{p}_open_rows", "Assembled rows waiting for their features.", registry=r)
        self.tokens = Counter(f"{p}_tokens", "Tokens in batches, real or padded.", ["kind"], registry=r)
        self.model = Gauge(
            f"{p}_model_info",
            "The model being served (always 1).",
            ["name", "version", "provider"],
            registry=r,
        )
        # The GPU the model runs on, read through NVML at each scrape once attach_device was told of it.
        self.gpu_memory_used = OptionalGauge(
            f"{p}_gpu_memory_used_bytes", "GPU memory in use on the model's device, all processes."
        )
        self.gpu_memory_total = OptionalGauge(
            f"{p}_gpu_memory_total_bytes", "GPU memory of the model's device."
        )
        self.gpu_utilization = OptionalGauge(
            f"{p}_gpu_utilization_ratio", "Share of time a kernel ran on the model's device (NVML)."
        )
        for gauge in (self.gpu_memory_used, self.gpu_memory_total, self.gpu_utilization):
            r.register(gauge)
        self.ready = Gauge(f"{p}_ready", "1 when /readyz answers 200.", registry=r)
        self.live = Gauge(f"{p}_live", "1 when /healthz answers 200.", registry=r)
        ProcessCollector(registry=r)  # process_*: CPU seconds, resident memory, open files (Linux)
        self._lag_labels: set[tuple[str, str]] = set()

    def model_loaded(self, name: str, version: str, provider: str) -> None:
        self.model.labels(name=name, version=version, provider=provider).set(1)

    def attach_device(self, device: Device) -> None:
        """The GPU gauges read ``device`` at each scrape from now on (a CPU replica never attaches one)."""
        self.gpu_memory_used.set_function(device.used)
        self.gpu_memory_total.set(device.total)
        self.gpu_utilization.set_function(device.utilization)

    def committed(self, ok: bool, seconds: float | None = None) -> None:
        """One offset commit: taken by the broker or failed; ``seconds``: how long a synchronous one took
        (None for an auto-commit, whose result librdkafka reports without its time)."""
        if not ok:
            self.commit_failures.inc()
            return
        self.commits.inc()
        self.last_commit.set_to_current_time()
        if seconds is not None:
            self.commit_time.observe(seconds)

    def transaction(self, committed: bool, seconds: float, fenced: bool = False) -> None:
        """Exactly-once: one transaction committed (``seconds`` to commit it) or aborted."""
        self.transactions.labels("committed" if committed else "aborted").inc()
        if committed:
            self.transaction_time.observe(seconds)
            self.last_commit.set_to_current_time()
        if fenced:
            self.transactions_fenced.inc()

    def share_acquired(self, delivery_counts: Sequence[int | None]) -> None:
        """Share groups: records acquired, each with its delivery count."""
        self.share_records.labels("acquired").inc(len(delivery_counts))
        for count in delivery_counts:
            self.share_delivery_count.observe(count or 1)

    def share_answered(self, ack: Ack, count: int) -> None:
        """Share groups: ``count`` records answered with ``ack``."""
        self.share_records.labels(_ANSWERED[ack]).inc(count)

    def watch_transactions(self, opened: Callable[[], float | None], clock: Callable[[], float]) -> None:
        """The open transaction's age, read at each scrape from ``opened()`` (its start on ``clock``)."""
        self.transaction_age.set_function(lambda: 0.0 if (since := opened()) is None else clock() - since)

    def batch(
        self,
        size: int,
        queue_wait_s: float,
        inference_s: float | None,
        latencies_ms: np.ndarray,
        padding: tuple[int, int] | None,
    ) -> None:
        """One finished batch: its size, its oldest item's queue wait, its model time (None when it ran
        in pieces after a failure), every result's end-to-end latency in milliseconds, its (real, padded)
        tokens."""
        self.batch_size.observe(size)
        self.queue_wait.observe(queue_wait_s)
        if inference_s is not None:
            self.inference.observe(inference_s)
        self.latency.observe_many(latencies_ms)
        self.produced.inc(latencies_ms.size)
        if padding is not None:
            self.tokens.labels(kind="real").inc(padding[0])
            self.tokens.labels(kind="padded").inc(padding[1])

    def state(
        self,
        target_size: int,
        in_flight: int,
        assigned: int,
        paused: int,
        lag: Mapping[TopicPartition, int],
    ) -> None:
        """The loop's state, about once a second. Lag series of partitions no longer assigned are
        removed, so a scaled-out group does not report a partition twice."""
        self.target_size.set(target_size)
        self.in_flight.set(in_flight)
        self.assigned.set(assigned)
        self.paused.set(paused)
        labels = {(topic, str(part)): value for (topic, part), value in lag.items()}
        for gone in self._lag_labels - labels.keys():
            self.lag.remove(*gone)
        for (topic, part), value in labels.items():
            self.lag.labels(topic=topic, partition=part).set(value)
        self._lag_labels = set(labels)
