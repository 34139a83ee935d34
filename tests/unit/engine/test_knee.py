"""service/engine/knee.py: the knee, the SLO and memory caps, and the stop rules, on hand-made
numbers."""

from __future__ import annotations

import pytest

from service.engine.knee import (
    Point,
    find_knee,
    memory_cap,
    recommend,
    slo_cap,
    stop_reason,
)
from service.errors import is_out_of_memory

GIB = 2**30


def curve(throughputs: dict[int, float], p99: dict[int, float] | None = None, memory=None) -> list[Point]:
    """Points from {size: items/s}; p99 defaults to 1 ms, memory to unmeasured."""
    p99 = p99 or {}
    memory = memory or {}
    return [
        Point(
            size,
            tput,
            p50_ms=p99.get(size, 1.0) / 2,
            p99_ms=p99.get(size, 1.0),
            memory_used_bytes=memory.get(size),
        )
        for size, tput in throughputs.items()
    ]


# -- the knee -------------------------------------------------------------------------------------------


def test_knee_is_where_doubling_stops_paying():
    # +100%, +80%, +50%, +20%, then +5% and +2%: doubling beyond 16 gains less than 10%.
    points = curve({1: 100, 2: 200, 4: 360, 8: 540, 16: 648, 32: 680, 64: 694})
    knee = find_knee(points, gain=0.10)
    assert (knee.size, knee.found) == (16, True)


def test_the_gain_threshold_moves_the_knee():
    points = curve({1: 100, 2: 200, 4: 360, 8: 540, 16: 648, 32: 680, 64: 694})
    assert find_knee(points, gain=0.30).size == 8  # 8 -> 16 is only +20%
    assert find_knee(points, gain=0.01).size == 64  # every step still gains over 1%


def test_a_curve_still_rising_at_the_end_has_no_knee_yet():
    points = curve({1: 100, 2: 190, 4: 350, 8: 600})
    knee = find_knee(points)
    assert (knee.size, knee.found) == (8, False)


def test_a_flat_curve_has_its_knee_at_the_smallest_size():
    knee = find_knee(curve({1: 500, 2: 505, 4: 498, 8: 510}))
    assert (knee.size, knee.found) == (1, True)


def test_a_curve_that_falls_after_a_peak_has_its_knee_at_the_peak():
    knee = find_knee(curve({1: 100, 2: 200, 4: 400, 8: 380, 16: 300}))
    assert (knee.size, knee.found) == (4, True)


def test_one_flat_step_does_not_hide_a_later_rise():
    # 2 -> 4 gains nothing (noise), but 4 -> 8 doubles: the knee is not at 2.
    knee = find_knee(curve({1: 100, 2: 200, 4: 200, 8: 400, 16: 410}))
    assert knee.size == 8


def test_sizes_that_do_not_double_are_judged_per_doubling():
    # 4 -> 16 is two doublings: +30% overall is about +14% per doubling, which pays at 10% ...
    assert find_knee(curve({4: 1000, 16: 1300, 64: 1320})).size == 16
    # ... while +15% overall is about +7% per doubling, which does not.
    assert find_knee(curve({4: 1000, 16: 1150, 64: 1160})).size == 4


def test_a_single_size_is_its_own_knee_but_not_a_found_one():
    knee = find_knee(curve({32: 1000}))
    assert (knee.size, knee.found) == (32, False)


@pytest.mark.parametrize(
    "points",
    [
        [],
        curve({4: 100, 2: 200}),  # not increasing
        [Point(2, 100, 1, 1), Point(2, 200, 1, 1)],  # duplicate size
        curve({0: 100, 1: 200}),  # size 0
        curve({1: 100, 2: 0}),  # no throughput
    ],
    ids=["empty", "decreasing", "duplicate", "zero-size", "zero-throughput"],
)
def test_malformed_sweeps_are_rejected(points):
    with pytest.raises(ValueError):
        find_knee(points)


def test_gain_must_be_positive():
    with pytest.raises(ValueError):
        find_knee(curve({1: 1, 2: 2}), gain=0)


# -- caps and the recommendation ------------------------------------------------------------------------


def test_without_caps_the_knee_is_recommended():
    points = curve({1: 100, 2: 200, 4: 360, 8: 540, 16: 648, 32: 680})
    rec = recommend(points)
    assert (rec.size, rec.knee.size, rec.slo_cap, rec.memory_cap) == (16, 16, None, None)
    assert rec.reason == "the knee"


def test_the_slo_caps_the_recommendation_below_the_knee():
    points = curve(
        {1: 100, 2: 200, 4: 360, 8: 540, 16: 648, 32: 680},
        p99={1: 1, 2: 2, 4: 3, 8: 6, 16: 12, 32: 25},
    )
    rec = recommend(points, slo_ms=10)
    assert (rec.size, rec.knee.size, rec.slo_cap) == (8, 16, 8)
    assert "SLO" in rec.reason


def test_an_slo_above_the_knee_leaves_the_knee():
    points = curve({1: 100, 2: 200, 4: 210, 8: 215}, p99={1: 1, 2: 2, 4: 4, 8: 8})
    rec = recommend(points, slo_ms=100)
    assert (rec.size, rec.slo_cap) == (2, 8)


def test_slo_cap_is_the_unbroken_run_from_the_smallest_size():
    # A noisy small size missing the SLO ends the run, even if a larger size happens to meet it.
    points = curve({1: 1, 2: 2, 4: 4, 8: 8}, p99={1: 1, 2: 20, 4: 3, 8: 4})
    assert slo_cap(points, 10) == 1
    assert slo_cap(points, None) is None


def test_no_size_meets_the_slo_means_no_recommendation():
    points = curve({1: 100, 2: 200}, p99={1: 30, 2: 60})
    rec = recommend(points, slo_ms=10)
    assert rec.size is None
    assert rec.slo_cap == 0
    assert "SLO" in rec.reason


def test_memory_caps_the_recommendation_at_70_percent_of_the_device():
    points = curve(
        {1: 100, 2: 200, 4: 400, 8: 800, 16: 1600, 32: 1700},
        memory={1: 2 * GIB, 2: 3 * GIB, 4: 5 * GIB, 8: 7 * GIB, 16: 8 * GIB, 32: 9 * GIB},
    )
    rec = recommend(points, memory_total_bytes=10 * GIB)
    assert (rec.knee.size, rec.memory_cap, rec.size) == (16, 8, 8)
    assert "memory" in rec.reason


def test_memory_fraction_is_a_parameter():
    points = curve({1: 100, 2: 200}, memory={1: 1 * GIB, 2: 9 * GIB})
    assert memory_cap(points, 10 * GIB, fraction=0.95) == 2
    assert memory_cap(points, 10 * GIB) == 1


def test_memory_is_no_cap_when_unmeasured():
    points = curve({1: 100, 2: 200}, memory={1: GIB})  # size 2 lacks a figure
    assert memory_cap(points, 10 * GIB) is None
    assert memory_cap(curve({1: 100}, memory={1: GIB}), None) is None


def test_no_size_under_the_memory_cap_means_no_recommendation():
    rec = recommend(curve({1: 100}, memory={1: 8 * GIB}), memory_total_bytes=10 * GIB)
    assert (rec.size, rec.memory_cap) == (None, 0)


def test_the_tighter_of_both_caps_wins():
    points = curve(
        {1: 100, 2: 200, 4: 400, 8: 800, 16: 1600},
        p99={1: 1, 2: 1, 4: 1, 8: 1, 16: 50},
        memory={1: GIB, 2: GIB, 4: 8 * GIB, 8: 8 * GIB, 16: 8 * GIB},
    )
    rec = recommend(points, slo_ms=10, memory_total_bytes=10 * GIB)
    assert (rec.slo_cap, rec.memory_cap, rec.size) == (8, 2, 2)


def test_single_size_is_recommended_when_it_fits():
    rec = recommend(curve({8: 1000}, p99={8: 5}), slo_ms=10)
    assert (rec.size, rec.knee.found) == (8, False)


# -- stop rules -----------------------------------------------------------------------------------------


def test_stop_after_a_size_over_the_slo():
    assert stop_reason(Point(64, 1000, 5, 12.5), slo_ms=10) is not None
    assert "64" in stop_reason(Point(64, 1000, 5, 12.5), slo_ms=10)
    assert stop_reason(Point(64, 1000, 5, 10.0), slo_ms=10) is None  # at the SLO is within it
    assert stop_reason(Point(64, 1000, 5, 1e9), slo_ms=None) is None


@pytest.mark.parametrize(
    "message",
    [
        "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running MatMul"
        " node. Name:'/MatMul' Status Message: Failed to allocate memory for requested buffer of size 85899",
        "CUDA failure 2: out of memory ; GPU=0 ; hostname=gpu-01 ; file=cuda_allocator.cc ; line=47",
        "CUDA error cudaErrorMemoryAllocation:out of memory",
        "std::bad_alloc",
    ],
)
def test_out_of_memory_errors_are_recognised(message):
    assert is_out_of_memory(message)


@pytest.mark.parametrize(
    "message",
    [
        "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for input: features",
        "Unexpected input data type. Actual: (tensor(double)) , expected: (tensor(float))",
    ],
)
def test_other_errors_are_not_out_of_memory(message):
    assert not is_out_of_memory(message)


def test_an_oom_stop_keeps_the_sizes_before_it():
    # The sweep stops before the size that ran out of memory; the analysis sees only what was measured,
    # and a curve cut short by memory may not show its knee.
    measured = curve({1: 100, 2: 200, 4: 400})  # 8 ran out of memory
    rec = recommend(measured)
    assert (rec.size, rec.knee.found) == (4, False)


def test_the_knee_can_come_from_another_curve_while_the_caps_stay_on_the_engines():
    engine = curve({1: 100, 2: 101, 4: 102, 8: 103}, p99={1: 1, 2: 1, 4: 1, 8: 50})
    service = curve({1: 10, 2: 20, 4: 40, 8: 80})  # still doubling: no knee up to 8
    assert recommend(engine).size == 1
    rec = recommend(engine, throughput=service)
    assert (rec.knee.size, rec.knee.found, rec.size) == (8, False, 8)
    capped = recommend(engine, throughput=service, slo_ms=10)
    assert (capped.size, capped.slo_cap) == (4, 4)
    assert (
        recommend(engine, throughput=curve({1: 10, 2: 20, 4: 21, 8: 22})).reason == "the whole service's knee"
    )
