"""service/tools/bench/targets.py and scenarios.py: ratios between systems and their verdicts."""

from __future__ import annotations

import pytest

from service.tools.bench.scenarios import SCENARIOS, SERVICE, Ratio, selected
from service.tools.bench.targets import LATENCY_SLACK_MS, evaluate, latency_bound_ms, ratio


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
