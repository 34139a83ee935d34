"""service/tools/bench/runner.py: which rate each latency run goes at, in which order the systems run, and
the batch settings each one is started with. The phases themselves (broker, processes) are replaced by
recorders here; tests/integration/test_benchmark.py runs them for real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from service.config import load_settings
from service.tools.bench import runner
from service.tools.bench.runner import Bench, Options
from service.tools.bench.scenarios import (
    SCENARIOS,
    SERVICE,
    SERVICE_KNEE,
    SERVICE_STREAM,
    Scenario,
    System,
)

DRAIN_RATES = {SERVICE: 80_000.0, SERVICE_STREAM: 50_000.0, SERVICE_KNEE: 90_000.0}


def options(tmp_path: Path) -> Options:
    return Options(
        scenario="A",
        quick=False,
        bootstrap="127.0.0.1:1",
        partitions=4,
        drain_s=12.0,
        latency_s=15.0,
        settle_s=2.0,
        latency_load=0.5,
        latency_repeats=3,
        light_rate=2000.0,
        seed=1,
        out=tmp_path / "out.json",
        log_dir=tmp_path / "logs",
    )


class Recording(Bench):
    """A Bench whose phases only record what they were asked to do."""

    def __init__(self, opts: Options) -> None:
        super().__init__(opts, load_settings())
        self.calls: list[tuple[str, str, float]] = []
        self.log_names: list[str] = []

    def throughput_phase(self, scenario: Scenario, system: System, events: list) -> dict[str, Any]:
        self.calls.append(("drain", system.name, 0.0))
        rate = DRAIN_RATES.get(system.name, 10_000.0)
        return {
            "complete": True,
            "events_per_s": rate,
            "drain_ceiling": 512 if system.name == SERVICE else None,
        }

    def latency_phase(
        self, scenario: Scenario, system: System, pool: list, rate: float, log_name: str = "latency"
    ) -> dict[str, Any]:
        self.calls.append(("latency", system.name, rate))
        self.log_names.append(f"{system.name}-{log_name}")
        return {"p99_ms": 10.0, "rate_per_s": rate}

    def model_phase(self, scenario: Scenario, system: System) -> dict[str, Any]:
        self.calls.append(("model", system.name, 0.0))
        return {"complete": True, "events_per_s": 1e6, "batch_ms_p50": 0.1}


@pytest.fixture
def bench(tmp_path, monkeypatch) -> Recording:
    monkeypatch.setattr(runner, "TopicAdmin", lambda conf: None)  # no broker in the unit tier
    monkeypatch.setattr(runner, "make_events", lambda kind, size, seed, per=1: [b"{}"] * 4)
    return Recording(options(tmp_path))


def test_the_service_latency_runs_go_at_half_its_stream_regime_capacity(bench):
    result = bench.run_scenario(SCENARIOS["A"])
    service_rates = {rate for phase, name, rate in bench.calls if phase == "latency" and name == SERVICE}
    # Three half-load runs at half of service-stream's 50,000/s, and the light runs at the fixed rate.
    assert service_rates == {25_000.0, 2_000.0}
    half_load = [c for c in bench.calls if c == ("latency", SERVICE, 25_000.0)]
    assert len(half_load) == 3
    assert result["systems"][SERVICE]["latency_load_of"] == SERVICE_STREAM
    verdict = next(t for t in result["targets"] if "p99 latency at 50%" in t["name"])
    assert f"of {SERVICE_STREAM}'s drain rate" in verdict["name"]


def test_the_stream_row_drains_first_and_the_report_keeps_the_declared_order(bench):
    scenario = SCENARIOS["A"]
    result = bench.run_scenario(scenario)
    drains = [name for phase, name, _ in bench.calls if phase == "drain"]
    assert drains[0] == SERVICE_STREAM
    assert drains.index(SERVICE) < drains.index(SERVICE_KNEE)  # the knee is the defaults row's
    assert list(result["systems"]) == [s.name for s in scenario.systems]
    assert not any(name == SERVICE_STREAM for phase, name, _ in bench.calls if phase == "latency")


def test_every_latency_run_has_a_log_of_its_own(bench):
    bench.run_scenario(SCENARIOS["A"])
    service_logs = [name for name in bench.log_names if name.startswith(f"{SERVICE}-")]
    assert service_logs == [f"{SERVICE}-{phase}-{i}" for phase in ("latency", "light") for i in (1, 2, 3)]


def test_other_systems_keep_half_their_own_drain_rate(bench):
    bench.run_scenario(SCENARIOS["A"])
    assert ("latency", "passthrough", 5_000.0) in bench.calls


def test_the_stream_row_runs_the_defaults_with_the_drain_regime_off(bench):
    scenario = SCENARIOS["A"]
    by_name = {s.name: s for s in scenario.systems}
    stream = bench.env(scenario, by_name[SERVICE_STREAM], {})
    defaults = bench.env(scenario, by_name[SERVICE], {})
    max_size = str(load_settings().batch.max_size)
    assert stream["MICROBATCH_BATCH__DRAIN_MAX_SIZE"] == max_size
    assert "MICROBATCH_BATCH__MAX_SIZE" not in stream
    assert "MICROBATCH_BATCH__DRAIN_MAX_SIZE" not in defaults


def test_a_pinned_row_keeps_its_drain_regime_setting_alone(bench):
    scenario = SCENARIOS["A"]
    swept = next(s for s in scenario.systems if s.name == "service-swept")
    env = bench.env(scenario, swept, {})
    assert env["MICROBATCH_BATCH__MAX_SIZE"] == str(scenario.max_batch_size)
    assert "MICROBATCH_BATCH__DRAIN_MAX_SIZE" not in env
