"""service/tools/harness/measure.py: throughput, latency, CPU and memory figures from recorded values."""

from __future__ import annotations

import numpy as np
import pytest

from service.tools.harness.measure import (
    Output,
    Sample,
    cpu_per_event_us,
    cpu_percent,
    drain_ceiling,
    latencies_ms,
    mean_batch_size,
    median_run,
    most_common_size,
    padding_efficiency,
    peak_rss_mib,
    percentiles,
    summary,
    tensor_padding_efficiency,
    throughput,
)


def test_throughput_counts_intervals_between_first_and_last_timestamp():
    # 5 records over 2 s: 4 intervals, the first record only opens the window.
    rate, window = throughput([1000, 1500, 2000, 2500, 3000])
    assert window == 2.0
    assert rate == 2.0


def test_throughput_does_not_depend_on_the_order_of_the_timestamps():
    assert throughput([3000, 1000, 2000]) == throughput([1000, 2000, 3000])


@pytest.mark.parametrize("stamps", [[], [1000], [1000, 1000, 1000]])
def test_throughput_is_none_without_a_window(stamps):
    assert throughput(stamps) is None


def test_latency_is_output_timestamp_minus_send_time():
    outputs = [Output(1_000_010, 1_000_000_000, 16), Output(1_000_025, 1_000_005_000, 16)]
    assert latencies_ms(outputs).tolist() == [10.0, 20.0]


def test_latency_floors_both_ends_so_rounding_never_makes_it_negative():
    # Sent at 1000.9 ms, produced 0.05 ms later: CreateTime is floored to 1000 ms by Kafka.
    assert latencies_ms([Output(1000, 1_000_900, None)]).tolist() == [0.0]


def test_outputs_without_a_send_time_are_not_latency_samples():
    assert latencies_ms([Output(1000, None, 1)]).size == 0


def test_percentiles_are_named_and_interpolated():
    result = percentiles(np.arange(1, 101, dtype=np.float64))
    assert set(result) == {"p50_ms", "p95_ms", "p99_ms"}
    assert result["p50_ms"] == 50.5
    assert result["p50_ms"] <= result["p95_ms"] <= result["p99_ms"] <= 100


def test_percentiles_of_nothing_is_empty():
    assert percentiles([]) == {}


def test_mean_batch_size_is_event_weighted_and_skips_values_without_one():
    outputs = [Output(0, None, 16)] * 16 + [Output(0, None, 1), Output(0, None, None)]
    assert mean_batch_size(outputs) == round((16 * 16 + 1) / 17, 2)


def test_mean_batch_size_is_none_when_no_output_reports_one():
    assert mean_batch_size([Output(0, None, None)]) is None


def test_cpu_percent_uses_the_samples_bracketing_the_window():
    samples = [Sample(0.0, 0.0, 0), Sample(1.0, 0.5, 0), Sample(3.0, 2.5, 0), Sample(4.0, 2.6, 0)]
    # Window [1.5, 2.5] is covered by the samples at 1.0 and 3.0: 2.0 CPU seconds in 2.0 s.
    assert cpu_percent(samples, 1.5, 2.5) == 100.0


def test_cpu_percent_can_exceed_one_core():
    samples = [Sample(0.0, 0.0, 0), Sample(2.0, 3.0, 0)]
    assert cpu_percent(samples, 0.0, 2.0) == 150.0


def test_cpu_percent_falls_back_to_the_samples_it_has():
    samples = [Sample(5.0, 1.0, 0), Sample(6.0, 1.5, 0)]
    assert cpu_percent(samples, 0.0, 100.0) == 50.0


@pytest.mark.parametrize(
    ("samples", "window"),
    [([], (0.0, 1.0)), ([Sample(0.0, 0.0, 0)], (0.0, 1.0)), ([Sample(0.0, 0.0, 0)] * 2, (0.0, 1.0))],
)
def test_cpu_percent_is_none_without_a_measurable_span(samples, window):
    assert cpu_percent(samples, *window) is None


def test_peak_rss_takes_the_high_water_mark_when_it_is_higher():
    samples = [Sample(0, 0, 100 * 2**20), Sample(1, 0, 120 * 2**20)]
    assert peak_rss_mib(samples) == 120.0
    assert peak_rss_mib(samples, 150 * 2**20) == 150.0
    assert peak_rss_mib([]) is None


def test_padding_efficiency_weights_windows_by_events_and_ignores_other_lines():
    lines = [
        {"event": "started"},
        {"event": "stats", "padding_efficiency": 0.5, "events_per_s": 100.0},
        {"event": "stats", "padding_efficiency": 1.0, "events_per_s": 300.0},
        {"event": "stats", "padding_efficiency": None, "events_per_s": 0.0},
        {"event": "other", "padding_efficiency": 0.1},
        {"event": "stopped", "padding_efficiency": 0.9},
    ]
    # (0.5 * 100 + 1.0 * 300 + 0.9 * 1) / 401: a line without a rate weighs as one event.
    assert padding_efficiency(lines) == round((50 + 300 + 0.9) / 401, 4)


def test_padding_efficiency_is_none_when_the_service_does_not_report_it():
    assert padding_efficiency([{"event": "stats", "events_per_s": 10.0}]) is None


def test_tensor_padding_efficiency_counts_real_tokens_over_padded_ones():
    masks = [np.array([[1, 1, 0, 0], [1, 1, 1, 1]]), np.array([[1, 0]])]
    assert tensor_padding_efficiency(masks) == round(7 / 10, 4)
    assert tensor_padding_efficiency([]) is None


def test_padding_efficiency_prefers_the_exact_totals_of_the_stopped_line():
    lines = [
        {"event": "stats", "padding_efficiency": 0.5, "events_per_s": 100.0},
        {"event": "stopped", "padding_efficiency": 0.9, "totals": {"padding_efficiency": 0.61}},
    ]
    assert padding_efficiency(lines) == 0.61


def test_padding_efficiency_falls_back_to_windows_when_totals_have_none():
    lines = [
        {"event": "stats", "padding_efficiency": 0.5, "events_per_s": 100.0},
        {"event": "stopped", "padding_efficiency": None, "totals": {"padding_efficiency": None}},
    ]
    assert padding_efficiency(lines) == 0.5


def test_median_run_picks_the_run_with_the_middle_p99_and_skips_runs_without_one():
    runs = [
        {"p99_ms": 90.0, "id": 1},
        {"p99_ms": None, "id": 2},
        {"p99_ms": 20.0, "id": 3},
        {"p99_ms": 40.0, "id": 4},
    ]
    assert median_run(runs)["id"] == 4
    assert median_run(runs[:1] + runs[2:3])["id"] == 3  # even count: the lower middle
    assert median_run([{"p99_ms": None}]) is None
    assert median_run([]) is None


def test_the_drain_ceiling_comes_from_the_batch_sizes_line():
    lines = [{"event": "started"}, {"event": "batch_sizes", "max_size": 16, "drain_max_size": 256}]
    assert drain_ceiling(lines) == 256
    assert drain_ceiling([{"event": "started"}]) is None


def test_a_backfill_reports_the_size_it_cut_its_batches_at_and_its_summary():
    summary_line = {"job": "j", "done": True, "events": 300, "batch_sizes": {"44": 1, "128": 2}}
    lines = [
        {"event": "backfill_range", "offsets": 300},
        {"event": "backfill_batch_size", "drain_max_size": 128, "from": "knee"},
        {"event": "backfill_done", "job": "j", "events": 300},
        summary_line,
    ]
    assert drain_ceiling(lines) == 128
    assert summary(lines) == summary_line  # the stdout line, not the log line of the same name
    assert summary(lines[:3]) is None
    assert most_common_size(summary_line["batch_sizes"]) == 128


def test_the_most_common_batch_size_takes_the_larger_of_a_tie():
    assert most_common_size({"64": 3, "128": 3, "7": 1}) == 128
    assert most_common_size({}) is None


def test_cpu_per_event_is_cpu_seconds_per_event_in_microseconds():
    assert cpu_per_event_us(20.0, 2000.0) == 100.0  # a fifth of a core for 2,000 events/s
    assert cpu_per_event_us(None, 2000.0) is None
    assert cpu_per_event_us(20.0, 0.0) is None
