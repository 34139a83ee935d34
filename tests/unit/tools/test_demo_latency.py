"""service/tools/demo_latency.py: the two latency measures of the timed traffic, and when the broker has
warmed up (a fake clock: no sleep)."""

from __future__ import annotations

import math

import msgspec

from service.tools.demo_latency import Settle, Timing, latency, timing, warm_up

T0 = 1_700_000_000_000


def stamped(event_ms: int, service_ms: int, broker_ms: int) -> Timing:
    """A result whose input took ``broker_ms`` to reach the service and as long again back to the demo."""
    consumed = event_ms + broker_ms
    produced = consumed + service_ms
    return Timing(event_ms, consumed, produced, produced + broker_ms)


def test_a_result_value_gives_its_times_read_when_it_was_read():
    value = msgspec.json.encode(
        {"result": {}, "timestamps": {"event_ms": T0, "consumed_ms": T0 + 4, "produced_ms": T0 + 6}}
    )
    got = timing(value, T0 + 9)
    assert got == Timing(T0, T0 + 4, T0 + 6, T0 + 9)
    assert (got.service_ms, got.end_to_end_ms) == (2, 9)


def test_values_that_are_no_result_or_have_no_input_time_give_none():
    no_time = msgspec.json.encode({"timestamps": {"event_ms": None, "consumed_ms": 1, "produced_ms": 2}})
    assert timing(no_time, T0) is None
    assert timing(b"not json", T0) is None
    assert timing(None, T0) is None


def test_service_and_end_to_end_are_apart_and_results_before_the_traffic_are_left_out():
    timings = [stamped(T0 - 500, 1, 400)]  # a warm-up result: slow broker, not counted
    timings += [stamped(T0 + i, service_ms=i % 3, broker_ms=5) for i in range(100)]
    figures = latency(timings, T0)
    assert figures is not None
    assert figures.count == 100
    assert figures.service == (1.0, 2.0)
    assert figures.end_to_end[0] == 11.0  # two trips of 5 ms and the service's 1
    assert figures.end_to_end[1] == 12.0


def test_no_results_of_the_traffic_give_no_figures():
    assert latency([], T0) is None
    assert latency([stamped(T0 - 1, 1, 1)], T0) is None


def test_settled_after_three_seconds_alike_not_on_a_quiet_second_between_spikes():
    rule = Settle(quiet=3, tolerance=0.5, slack_ms=5.0)
    seconds = [[66.0], [13.0], [12.0], [151.0], [11.0], [11.0]]
    assert [rule.add(s) for s in seconds] == [False, False, False, False, False, False]
    assert rule.add([13.0])  # 11, 11, 13: within 50 % and 5 ms of the lowest


def test_a_falling_round_trip_has_not_settled():
    rule = Settle()
    assert not any(rule.add([p99]) for p99 in (400.0, 300.0, 200.0, 100.0))


def test_a_second_without_results_counts_as_slow():
    rule = Settle()
    assert [rule.add(s) for s in ([10.0], [], [10.0], [10.0])] == [False, False, False, False]
    assert math.isinf(rule.p99s[1])
    assert rule.add([10.0])


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


def test_warm_up_samples_once_a_second_until_settled():
    clock = FakeClock()
    p99s = iter([66.0, 13.0, 151.0, 11.0, 11.0, 12.0, 9.0])
    done = warm_up(lambda: [next(p99s)], Settle(), 30.0, clock, clock.sleep)
    assert done.settled
    assert done.seconds == 6.0
    assert done.p99s == [66.0, 13.0, 151.0, 11.0, 11.0, 12.0]


def test_warm_up_gives_up_after_its_bound():
    clock = FakeClock()
    p99s = iter([10.0, 500.0] * 10)
    done = warm_up(lambda: [next(p99s)], Settle(), 5.0, clock, clock.sleep)
    assert not done.settled
    assert done.seconds == 5.0
    assert len(done.p99s) == 5


def test_a_slow_sample_does_not_shift_the_next_second():
    clock = FakeClock()
    times: list[float] = []

    def sample() -> list[float]:
        times.append(clock.now)
        clock.now += 0.3  # the sample itself takes time
        return [10.0]

    warm_up(sample, Settle(), 30.0, clock, clock.sleep)
    assert times == [101.0, 102.0, 103.0]
