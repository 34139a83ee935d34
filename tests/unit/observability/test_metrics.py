"""service/observability/metrics.py: the bulk histogram matches the client library's own, state gauges
follow the assignment, batch sizes have exact buckets, and the series a dashboard reads exist when they
should (dead letters at 0) and not when they should not (padding of a model that does not pad)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.utils import floatToGoString

from service.errors import Reason
from service.observability.metrics import (
    EXACT_SIZES,
    LATENCY_BUCKETS,
    BulkHistogram,
    Metrics,
    size_buckets,
)


def sample(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float | None:
    return registry.get_sample_value(name, labels or {})


def test_bulk_histogram_counts_like_the_client_librarys_histogram():
    values = np.array([0.0, 0.001, 0.0011, 0.003, 0.02, 0.25, 0.2500001, 7.0, 100.0])
    reference_registry, bulk_registry = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("lat_seconds", "x", buckets=LATENCY_BUCKETS, registry=reference_registry)
    for v in values:
        reference.observe(v)
    bulk = BulkHistogram("lat_seconds", "x", LATENCY_BUCKETS)
    bulk_registry.register(bulk)
    bulk.observe_many(values[:4])
    bulk.observe_many(values[4:])
    bulk.observe_many(np.empty(0))
    for le in [*(floatToGoString(b) for b in LATENCY_BUCKETS), "+Inf"]:
        labels = {"le": le}
        ref = sample(reference_registry, "lat_seconds_bucket", labels)
        assert sample(bulk_registry, "lat_seconds_bucket", labels) == ref, le
    assert sample(bulk_registry, "lat_seconds_count") == len(values)
    assert sample(bulk_registry, "lat_seconds_sum") == pytest.approx(values.sum())


def test_bulk_histogram_takes_single_values_and_scales_the_fed_unit():
    values = [0.5, 1.0, 1.1, 3.0, 20.0, 250.0, 7000.0]  # milliseconds, exposed in seconds
    reference_registry, bulk_registry = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("lat_seconds", "x", buckets=LATENCY_BUCKETS, registry=reference_registry)
    bulk = BulkHistogram("lat_seconds", "x", LATENCY_BUCKETS, scale=0.001)
    bulk_registry.register(bulk)
    for v in values:
        reference.observe(v / 1000)
        bulk.observe(v)
    for le in [*(floatToGoString(b) for b in LATENCY_BUCKETS), "+Inf"]:
        labels = {"le": le}
        assert sample(bulk_registry, "lat_seconds_bucket", labels) == sample(
            reference_registry, "lat_seconds_bucket", labels
        ), le
    assert sample(bulk_registry, "lat_seconds_sum") == pytest.approx(sum(values) / 1000)


def test_bulk_histogram_counts_what_waits_before_it_grows_past_its_bound():
    bulk = BulkHistogram("sizes", "x", (1, 2, 4))
    for _ in range(BulkHistogram.FOLD_AT - 1):
        bulk.observe(3)
    assert len(bulk._pending) == BulkHistogram.FOLD_AT - 1  # nothing counted yet: a scrape would count it
    bulk.observe_many(np.array([1.0, 9.0]))
    assert not bulk._pending  # counted, and the list emptied
    registry = CollectorRegistry()
    registry.register(bulk)
    assert sample(registry, "sizes_count") == BulkHistogram.FOLD_AT + 1
    assert sample(registry, "sizes_bucket", {"le": "4.0"}) == BulkHistogram.FOLD_AT


def test_a_batch_moves_every_per_batch_metric():
    m = Metrics()
    m.batch(3, 0.004, 0.002, np.array([10.0, 20.0, 30.0]), (10, 12))  # latencies in milliseconds
    m.batch(2, 0.001, None, np.array([500.0, 600.0]), None)  # ran in pieces: no model time
    r = m.registry
    assert sample(r, "microbatch_batch_size_count") == 2
    assert sample(r, "microbatch_batch_size_sum") == 5
    assert sample(r, "microbatch_results_produced_total") == 5
    assert sample(r, "microbatch_inference_seconds_count") == 1
    assert sample(r, "microbatch_queue_wait_seconds_sum") == pytest.approx(0.005)
    assert sample(r, "microbatch_end_to_end_latency_seconds_count") == 5
    assert sample(r, "microbatch_end_to_end_latency_seconds_bucket", {"le": "0.025"}) == 2
    assert sample(r, "microbatch_tokens_total", {"kind": "padded"}) == 12


def test_lag_series_of_partitions_no_longer_assigned_disappear():
    m = Metrics()
    m.state(16, 5, 2, 0, {("in", 0): 7, ("in", 1): 0})
    assert sample(m.registry, "microbatch_consumer_lag", {"topic": "in", "partition": "0"}) == 7
    m.state(8, 0, 1, 1, {("in", 1): 3})
    assert sample(m.registry, "microbatch_consumer_lag", {"topic": "in", "partition": "0"}) is None
    assert sample(m.registry, "microbatch_consumer_lag", {"topic": "in", "partition": "1"}) == 3
    assert sample(m.registry, "microbatch_batch_target_size") == 8
    assert sample(m.registry, "microbatch_paused_partitions") == 1
    assert sample(m.registry, "microbatch_assigned_partitions") == 1


def test_each_metrics_object_has_its_own_registry():
    a, b = Metrics(), Metrics()
    a.consumed.inc(3)
    assert sample(b.registry, "microbatch_events_consumed_total") == 0


def test_every_batch_size_up_to_max_size_has_a_bucket_of_its_own_then_powers_of_two():
    assert size_buckets(16) == (*range(1, 17), 32, 64, 128, 256, 512, 1024, 2048, 4096)
    assert size_buckets(4)[:5] == (1, 2, 3, 4, 8)
    assert size_buckets(1000)[EXACT_SIZES - 1 :] == (EXACT_SIZES, 128, 256, 512, 1024, 2048, 4096)
    for max_size in (1, 5, 16, 17, 64, 100):
        buckets = size_buckets(max_size)
        assert list(buckets) == sorted(set(buckets)) and buckets[-1] == 4096


def test_batches_of_one_size_fall_in_their_own_bucket_only():
    """What makes ceil(histogram_quantile) exact: batches of 4 leave the bucket up to 3 empty."""
    m = Metrics(max_size=16)
    for _ in range(5):
        m.batch(4, 0.0, 0.0, np.zeros(4), None)
    assert sample(m.registry, "microbatch_batch_size_bucket", {"le": "3.0"}) == 0
    assert sample(m.registry, "microbatch_batch_size_bucket", {"le": "4.0"}) == 5


def test_every_dead_letter_reason_has_a_series_at_zero_from_the_start():
    m = Metrics()
    for reason in Reason:
        assert sample(m.registry, "microbatch_dead_letters_total", {"reason": reason.value}) == 0


def test_padding_efficiency_has_no_sample_until_a_model_padded():
    m = Metrics()
    text = generate_latest(m.registry).decode()
    assert "# TYPE microbatch_padding_efficiency gauge" in text
    assert sample(m.registry, "microbatch_padding_efficiency") is None
    m.padding.set(0.75)
    assert sample(m.registry, "microbatch_padding_efficiency") == 0.75


def test_commits_count_successes_and_failures_and_time_only_the_synchronous_ones():
    m = Metrics()
    assert sample(m.registry, "microbatch_last_commit_timestamp_seconds") == 0
    before = time.time()
    m.committed(True)  # an auto-commit
    m.committed(True, 0.004)  # a synchronous one
    m.committed(False)
    assert sample(m.registry, "microbatch_commits_total") == 2
    assert sample(m.registry, "microbatch_commit_failures_total") == 1
    assert sample(m.registry, "microbatch_commit_seconds_count") == 1
    assert before <= sample(m.registry, "microbatch_last_commit_timestamp_seconds") <= time.time()


def test_the_gpu_gauges_have_no_sample_on_cpu_and_read_the_device_at_each_scrape():
    m = Metrics()
    names = (
        "microbatch_gpu_memory_used_bytes",
        "microbatch_gpu_memory_total_bytes",
        "microbatch_gpu_utilization_ratio",
    )
    text = generate_latest(m.registry).decode()
    assert all(f"# TYPE {name} gauge" in text for name in names)
    assert [sample(m.registry, name) for name in names] == [None, None, None]
    in_use = {"bytes": 3 * 2**30}  # what NVML would answer now
    device = SimpleNamespace(total=80 * 2**30, used=lambda: in_use["bytes"], utilization=lambda: 0.25)
    m.attach_device(device)
    assert [sample(m.registry, name) for name in names] == [3 * 2**30, 80 * 2**30, 0.25]
    in_use["bytes"] = 5 * 2**30  # read again at the next scrape
    assert sample(m.registry, names[0]) == 5 * 2**30


def test_a_gauge_read_at_scrape_time_has_no_sample_while_its_reading_fails():
    m = Metrics()

    def nvml_gone() -> float:
        raise RuntimeError("NVML: GPU is lost")

    m.gpu_utilization.set_function(nvml_gone)
    assert sample(m.registry, "microbatch_gpu_utilization_ratio") is None
    assert generate_latest(m.registry)  # the scrape itself goes on
