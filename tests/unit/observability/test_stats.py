"""service/observability/stats.py: counters and percentiles over a window measured by the injected clock."""

from __future__ import annotations

import numpy as np
import pytest

from service.observability.stats import Stats


def test_rates_are_per_second_of_the_window(clock):
    stats = Stats(clock)
    stats.events_in = 300
    stats.results_out = 290
    stats.batch(16, np.full(16, 5.0))
    stats.batch(4, np.full(4, 5.0))
    clock.advance(2.0)
    snap = stats.snapshot()
    assert snap["events_per_s"] == 150.0
    assert snap["results_per_s"] == 145.0
    assert snap["batches_per_s"] == 1.0
    assert snap["mean_batch_size"] == 10.0


def test_latency_percentiles_over_all_batches(clock):
    stats = Stats(clock)
    stats.batch(50, np.arange(1, 51, dtype=np.float64))
    stats.batch(50, np.arange(51, 101, dtype=np.float64))
    clock.advance(1.0)
    snap = stats.snapshot()
    assert snap["latency_p50_ms"] == pytest.approx(50.5, abs=0.1)  # the median of 1..100
    assert 99.0 <= snap["latency_p99_ms"] <= 100.0


def test_dead_letters_are_counted_by_reason(clock):
    stats = Stats(clock)
    for reason in ["invalid_json", "invalid_json", "empty_value"]:
        stats.rejected(reason)
    snap = stats.snapshot()
    assert snap["dlq"] == 3
    assert snap["dlq_reasons"] == {"invalid_json": 2, "empty_value": 1}


def test_snapshot_resets_the_window(clock):
    stats = Stats(clock)
    stats.events_in = 10
    stats.rejected("invalid_json")
    stats.batch(2, np.array([1.0, 2.0]))
    clock.advance(1.0)
    stats.snapshot()
    clock.advance(4.0)
    snap = stats.snapshot()
    assert snap["events_per_s"] == 0.0
    assert snap["dlq"] == 0
    assert snap["dlq_reasons"] == {}
    assert snap["mean_batch_size"] is None
    assert snap["latency_p50_ms"] is None
    assert snap["latency_p99_ms"] is None


def test_due_after_the_interval_since_the_last_snapshot(clock):
    stats = Stats(clock)
    clock.advance(9.5)
    assert not stats.due(10.0)
    clock.advance(0.5)
    assert stats.due(10.0)
    stats.snapshot()
    assert not stats.due(10.0)


def test_zero_length_window_does_not_divide_by_zero(clock):
    stats = Stats(clock)
    stats.events_in = 5
    snap = stats.snapshot()
    assert snap["events_per_s"] >= 0


def test_padding_efficiency_is_real_over_padded_cost_and_totals_survive_snapshots(clock):
    stats = Stats(clock)
    stats.batch(4, np.full(4, 1.0), padding=(30, 40))
    stats.batch(2, np.full(2, 1.0), padding=(10, 20))
    stats.events_in = 6
    assert stats.snapshot()["padding_efficiency"] == pytest.approx(40 / 60, abs=1e-3)
    stats.batch(2, np.full(2, 1.0), padding=(20, 20))
    stats.snapshot()
    totals = stats.summary()
    assert totals["batches"] == 3
    assert totals["events_in"] == 6
    assert totals["mean_batch_size"] == pytest.approx(8 / 3, abs=0.01)
    assert totals["padding_efficiency"] == pytest.approx(60 / 80, abs=1e-3)


def test_padding_efficiency_is_none_without_costs(clock):
    stats = Stats(clock)
    stats.batch(4, np.full(4, 1.0))
    assert stats.snapshot()["padding_efficiency"] is None
    assert stats.summary()["padding_efficiency"] is None
