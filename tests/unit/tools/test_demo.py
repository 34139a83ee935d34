"""service/tools/demo.py: the summary's latency split between the start-up period and the steady state."""

from __future__ import annotations

from service.tools.demo import START_UP_S, latency_split

T0 = 1_700_000_000_000


def result(event_ms: int, latency_ms: int) -> dict:
    return {"timestamps": {"event_ms": event_ms, "produced_ms": event_ms + latency_ms}}


def test_results_of_the_first_seconds_are_start_up_the_rest_steady_and_the_warm_up_neither():
    start_up_ms = int(START_UP_S * 1000)
    results = [
        result(T0 - 500, 900),  # a warm-up event, sent before the traffic
        result(T0, 400),
        result(T0 + start_up_ms - 1, 300),
        result(T0 + start_up_ms, 20),
        result(T0 + start_up_ms + 5000, 30),
    ]
    split = latency_split(results, T0)
    assert split["start-up"].tolist() == [400, 300]
    assert split["steady"].tolist() == [20, 30]


def test_no_results_give_empty_phases():
    split = latency_split([], T0)
    assert split["start-up"].size == 0
    assert split["steady"].size == 0
