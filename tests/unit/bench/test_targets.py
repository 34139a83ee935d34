"""bench/targets.py and scenarios.py: ratios between systems and their verdicts."""

from __future__ import annotations

import pytest

from bench.scenarios import (
    BACKFILL,
    BATCH_LOOP,
    LOOP_BATCH,
    PASSTHROUGH,
    PLAIN,
    RAW_ORT_AT_BACKFILL,
    RAW_ORT_SORTED_AT_BACKFILL,
    SCENARIOS,
    SERVICE,
    SERVICE_EXACTLY_ONCE,
    SERVICE_KNEE,
    SERVICE_LOOP_SIZE,
    Ratio,
    selected,
)
from bench.targets import (
    LATENCY_SLACK_MS,
    LIGHT_CPU_VS_PLAIN,
    LIGHT_P99_VS_PLAIN,
    evaluate,
    latency_bound_ms,
    ratio,
)


def systems(service=None, passthrough=None, naive=None, p99=None, complete=True):
    """Result dicts shaped like the runner's, with only what the targets read."""

    def entry(rate):
        return {"throughput": {"events_per_s": rate, "complete": complete}, "latency": None}

    result = {"passthrough": entry(passthrough), "naive": entry(naive)}
    result[SERVICE] = entry(service) | {"latency": {"p99_ms": p99}}
    return result


RATIOS = (Ratio(SERVICE, "passthrough", 0.5), Ratio(SERVICE, "naive", 5.0), Ratio(SERVICE, "naive"))


def by_name(verdicts):
    return {v["name"]: v for v in verdicts}


def test_ratio_needs_both_figures_and_a_positive_denominator():
    assert ratio(30.0, 60.0) == 0.5
    assert ratio(None, 60.0) is None
    assert ratio(30.0, None) is None
    assert ratio(30.0, 0.0) is None


def test_latency_bound_is_one_window_two_batches_and_the_slack():
    assert latency_bound_ms(50.0, 4.0) == 50.0 + 8.0 + LATENCY_SLACK_MS
    assert latency_bound_ms(50.0, None) is None


def test_ratios_pass_and_fail_against_their_minimum():
    verdicts = evaluate(RATIOS[:2], systems(service=40.0, passthrough=100.0, naive=4.0), 50.0, 1.0)
    passthrough = by_name(verdicts)["service / passthrough throughput"]
    naive = by_name(verdicts)["service / naive throughput"]
    assert (passthrough["value"], passthrough["op"], passthrough["threshold"]) == (0.4, ">=", 0.5)
    assert passthrough["passed"] is False
    assert naive["value"] == 10.0
    assert naive["passed"] is True


def test_a_ratio_without_a_target_is_reported_but_not_judged():
    verdicts = evaluate(RATIOS[2:], systems(service=40.0, naive=4.0), 50.0, 1.0)
    assert verdicts[0]["value"] == 10.0
    assert verdicts[0]["threshold"] is None
    assert verdicts[0]["passed"] is None


def test_a_system_that_did_not_finish_gives_no_verdict():
    verdicts = evaluate(RATIOS[:1], systems(service=40.0, passthrough=100.0, complete=False), 50.0, 1.0)
    assert verdicts[0]["value"] is None
    assert verdicts[0]["passed"] is None


def test_latency_target_is_judged_on_the_service_p99():
    within = evaluate((), systems(p99=60.0), 50.0, 2.0)[-1]
    over = evaluate((), systems(p99=70.0), 50.0, 2.0)[-1]
    assert within["threshold"] == 64.0
    assert (within["op"], within["passed"]) == ("<=", True)
    assert over["passed"] is False


def test_latency_target_names_the_load_it_was_measured_at():
    assert "50% of its drain rate" in evaluate((), systems(p99=1.0), 50.0, 2.0)[-1]["name"]
    assert "25% of its drain rate" in evaluate((), systems(p99=1.0), 50.0, 2.0, load=0.25)[-1]["name"]


def test_latency_target_without_a_batch_time_or_a_latency_run_is_not_judged():
    assert evaluate((), systems(p99=60.0), 50.0, None)[-1]["passed"] is None
    assert evaluate((), systems(p99=None), 50.0, 2.0)[-1]["passed"] is None


def test_every_ratio_names_systems_of_its_own_scenario():
    for scenario in SCENARIOS.values():
        names = {s.name for s in scenario.systems}
        assert SERVICE in names
        for r in scenario.ratios:
            assert {r.numerator, r.denominator} <= names


def test_scenario_b_has_a_model_ceiling_for_the_batch_inference_time():
    assert any(not s.kafka for s in SCENARIOS["B"].systems)
    assert any(not s.kafka for s in SCENARIOS["A"].systems)


@pytest.mark.parametrize(("choice", "keys"), [("A", ["A"]), ("C", ["C"]), ("all", ["A", "B", "C"])])
def test_selected_scenarios(choice, keys):
    assert [s.key for s in selected(choice)] == keys


@pytest.mark.parametrize("model", ["metrics-anomaly", "log-classifier"])
def test_the_sweep_drains_each_model_as_the_first_bench_scenario_of_that_model_serves_it(model):
    """``microbatch sweep --pipeline`` (service/tools/sweep/pipeline.py) keeps its own copy of what it
    drained from the bench's scenarios when the bench was in the package: the event kind and the service's
    defaults row with its rate hint."""
    from service.tools.sweep.pipeline import scenario_for

    bench = next(s for s in SCENARIOS.values() if s.model == model)
    swept = scenario_for(model)
    assert swept.kind == bench.kind
    [service] = swept.systems
    benched = next(s for s in bench.systems if s.name == SERVICE)
    assert (service.argv, service.kafka, service.defaults) == (benched.argv, benched.kafka, benched.defaults)
    assert service.rate_hint == benched.rate_hint


def light_systems(service_p99, plain_p99, service_cpu, loop_cpu, plain_cpu=50.0):
    def entry(p99, cpu):
        return {
            "throughput": {"events_per_s": 1.0},
            "latency": None,
            "light": {"p99_ms": p99, "cpu_us_per_event": cpu},
        }

    return {
        SERVICE: entry(service_p99, service_cpu),
        PLAIN: entry(plain_p99, plain_cpu),
        BATCH_LOOP: entry(None, loop_cpu),
    }


def test_light_load_p99_is_judged_against_the_plain_loop_and_cpu_against_both_loops():
    verdicts = by_name(evaluate((), light_systems(15.0, 10.0, 90.0, 100.0), 50.0, 0.05, 0.5, 2000))
    p99 = verdicts["service / plain p99 latency at 2,000/s"]
    cpu = verdicts["service / batch-loop CPU per event at 2,000/s"]
    cpu_plain = verdicts["service / plain CPU per event at 2,000/s"]
    assert (p99["value"], p99["threshold"], p99["passed"]) == (1.5, LIGHT_P99_VS_PLAIN, True)
    assert (cpu["value"], cpu["passed"]) == (0.9, True)
    assert (cpu_plain["value"], cpu_plain["op"], cpu_plain["threshold"]) == (1.8, "<=", LIGHT_CPU_VS_PLAIN)
    assert cpu_plain["passed"] is True
    verdicts = by_name(evaluate((), light_systems(16.0, 10.0, 110.0, 100.0), 50.0, 0.05, 0.5, 2000))
    assert not verdicts["service / plain p99 latency at 2,000/s"]["passed"]
    assert not verdicts["service / batch-loop CPU per event at 2,000/s"]["passed"]
    assert not verdicts["service / plain CPU per event at 2,000/s"]["passed"]  # 2.2x


def test_the_service_transport_against_the_plain_loop_is_reported_without_a_target():
    rows = light_systems(15.0, 10.0, 90.0, 100.0)
    assert not any(PASSTHROUGH in name for name in by_name(evaluate((), rows, 50.0, 0.05, 0.5, 2000)))
    rows[PASSTHROUGH] = {"light": {"p99_ms": 9.0, "cpu_us_per_event": 75.0}}
    transport = by_name(evaluate((), rows, 50.0, 0.05, 0.5, 2000))[
        "passthrough / plain CPU per event at 2,000/s"
    ]
    assert (transport["value"], transport["threshold"], transport["passed"]) == (1.5, None, None)


def test_the_loop_s_batching_in_the_service_is_judged_against_the_loop_where_the_scenario_has_it():
    rows = light_systems(15.0, 10.0, 150.0, 100.0)
    assert len(evaluate((), rows, 50.0, 0.05, 0.5, 2000)) == 4  # no such row: no verdict for it
    rows[SERVICE_LOOP_SIZE] = {"light": {"cpu_us_per_event": 95.0}}
    verdicts = by_name(evaluate((), rows, 50.0, 0.05, 0.5, 2000))
    same_size = verdicts["service-loop-size / batch-loop CPU per event at 2,000/s"]
    assert (same_size["value"], same_size["threshold"], same_size["passed"]) == (0.95, 1.0, True)
    assert not verdicts["service / batch-loop CPU per event at 2,000/s"]["passed"]  # still judged
    rows[SERVICE_LOOP_SIZE]["light"]["cpu_us_per_event"] = 120.0
    assert not by_name(evaluate((), rows, 50.0, 0.05, 0.5, 2000))[same_size["name"]]["passed"]


def test_the_loop_s_batching_in_the_service_is_the_loop_s_size_cut_full_or_at_the_window():
    systems = {s.name: s for s in SCENARIOS["A"].systems}
    same_size, loop = systems[SERVICE_LOOP_SIZE], systems[BATCH_LOOP]
    assert loop.argv[-2:] == ("--consume-batch", str(LOOP_BATCH))
    assert dict(same_size.env) == {
        "BATCH__MAX_SIZE": str(LOOP_BATCH),
        "BATCH__ADAPTIVE": "false",
        "BATCH__NATURAL": "false",
    }
    assert same_size.light and loop.light and not same_size.latency and not same_size.defaults
    assert SERVICE_LOOP_SIZE not in {s.name for s in SCENARIOS["B"].systems}


def test_no_light_load_run_no_light_targets():
    assert len(evaluate(RATIOS, systems(100.0, 200.0, 10.0, 20.0), 50.0, 0.05)) == len(RATIOS) + 1


def test_scenario_a_holds_the_defaults_and_the_pinned_knee_to_the_plain_loop():
    ratios = {(r.numerator, r.denominator): r.minimum for r in SCENARIOS["A"].ratios}
    assert ratios[SERVICE, SERVICE_KNEE] == 0.9
    assert ratios[SERVICE_KNEE, PLAIN] == 0.8
    assert ratios[SERVICE, PLAIN] == 0.8
    assert ratios[PASSTHROUGH, PLAIN] is None  # what the service's transport costs: reported only
    assert not any(r.denominator == PASSTHROUGH for r in SCENARIOS["A"].ratios)
    assert {r.numerator for r in SCENARIOS["B"].ratios} == {SERVICE, BACKFILL, SERVICE_EXACTLY_ONCE}
    for key in "AB":  # exactly-once drains at 0.8x at-least-once at least
        assert {(r.numerator, r.denominator): r.minimum for r in SCENARIOS[key].ratios}[
            SERVICE_EXACTLY_ONCE, SERVICE
        ] == 0.8
    assert (
        dict(((r.numerator, r.denominator), r.minimum) for r in SCENARIOS["B"].ratios)[
            SERVICE, "raw-ort-sorted"
        ]
        == 0.8
    )
    defaults = next(s for s in SCENARIOS["A"].systems if s.name == SERVICE)
    knee = next(s for s in SCENARIOS["A"].systems if s.name == SERVICE_KNEE)
    assert defaults.defaults and not defaults.env
    assert not knee.defaults and knee.pin_to == SERVICE and ("BATCH__ADAPTIVE", "false") in knee.env


def test_the_backfill_is_held_to_the_service_in_a_and_to_the_sorted_ceiling_at_its_size_in_b():
    a = {(r.numerator, r.denominator): r.minimum for r in SCENARIOS["A"].ratios}
    b = {(r.numerator, r.denominator): r.minimum for r in SCENARIOS["B"].ratios}
    assert a[BACKFILL, SERVICE] == 1.3
    assert a[BACKFILL, RAW_ORT_AT_BACKFILL] is None  # reported only
    assert b[BACKFILL, RAW_ORT_SORTED_AT_BACKFILL] == 0.9
    for key, ceiling in (("A", RAW_ORT_AT_BACKFILL), ("B", RAW_ORT_SORTED_AT_BACKFILL)):
        systems = {s.name: s for s in SCENARIOS[key].systems}
        backfill = systems[BACKFILL]
        assert backfill.kafka and backfill.defaults and backfill.ends
        assert backfill.argv == ("service", "backfill")
        assert not backfill.latency and not backfill.light and not backfill.env
        assert backfill.rate_hint == systems[SERVICE].rate_hint  # a backlog of the same size
        assert not systems[ceiling].kafka and systems[ceiling].pin_to == BACKFILL
    sorted_row = next(s for s in SCENARIOS["B"].systems if s.name == RAW_ORT_SORTED_AT_BACKFILL)
    assert sorted_row.argv[-2:] == ("--order", "length")


def test_a_verdict_names_the_backfill_ratio():
    rows = {
        BACKFILL: {"throughput": {"events_per_s": 130.0, "complete": True}},
        SERVICE: {"throughput": {"events_per_s": 100.0, "complete": True}},
    }
    verdict = evaluate((Ratio(BACKFILL, SERVICE, 1.3),), rows, 50.0, 1.0)[0]
    assert verdict["name"] == "backfill / service throughput"
    assert (verdict["value"], verdict["passed"]) == (1.3, True)
    rows[BACKFILL]["throughput"]["complete"] = False  # exited non-zero, or lost inputs
    assert evaluate((Ratio(BACKFILL, SERVICE, 1.3),), rows, 50.0, 1.0)[0]["passed"] is None
