"""bench/command.py: the command line, and the environment each system under test is
started with."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import command as benchmark
from service.tools.harness.process import child_env
from service.tools.harness.workload import cycle


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    benchmark.add_arguments(parser)
    return parser.parse_args(argv)


@pytest.fixture
def captured(monkeypatch):
    """Replace the runner by a recorder of the options it would get."""
    seen = {}

    def fake_run_bench(options, settings):
        seen["options"] = options
        return 0

    monkeypatch.setattr(benchmark, "run_bench", fake_run_bench)
    return seen


# run() reads only the default bootstrap servers from the settings.
_Settings = SimpleNamespace(kafka=SimpleNamespace(bootstrap_servers="broker:9092"))


def test_defaults_run_every_scenario_at_full_length(captured):
    assert benchmark.run(parse(), _Settings) == 0
    options = captured["options"]
    assert (options.scenario, options.quick, options.bootstrap) == ("all", False, "broker:9092")
    assert (options.drain_s, options.latency_s, options.settle_s, options.latency_load) == (
        12.0,
        15.0,
        2.0,
        0.5,
    )
    assert options.latency_repeats == 3
    assert options.out.parent == Path("bench/results")
    assert options.out.name.startswith("bench-") and options.out.suffix == ".json"


def test_quick_shortens_everything_and_flags_win(captured):
    benchmark.run(
        parse("--quick", "--scenario", "A", "--bootstrap", "h:1", "--settle-seconds", "0"), _Settings
    )
    options = captured["options"]
    assert (options.scenario, options.quick, options.bootstrap) == ("A", True, "h:1")
    assert options.drain_s < 12.0 and options.latency_s < 15.0
    assert options.settle_s == 0.0
    assert options.latency_repeats == 1
    benchmark.run(parse("--quick", "--latency-repeats", "5"), _Settings)
    assert captured["options"].latency_repeats == 5


def test_unknown_scenario_is_a_usage_error():
    with pytest.raises(SystemExit):
        parse("--scenario", "Z")


def test_child_env_keeps_shared_settings_and_drops_the_callers_model_choice():
    base = {
        "PATH": "/bin",
        "MICROBATCH_BATCH__MAX_SIZE": "32",
        "MICROBATCH_MODEL__PATH": "/my/model.onnx",
        "MICROBATCH_MODEL__FEATURES": "a,b",
        "MICROBATCH_KAFKA__GROUP_ID": "theirs",
    }
    env = child_env(base, {"MODEL__NAME": "metrics-anomaly", "KAFKA__GROUP_ID": "bench-1"})
    assert env["PATH"] == "/bin"
    assert env["MICROBATCH_BATCH__MAX_SIZE"] == "32"
    assert env["MICROBATCH_MODEL__NAME"] == "metrics-anomaly"
    assert env["MICROBATCH_KAFKA__GROUP_ID"] == "bench-1"
    assert "MICROBATCH_MODEL__PATH" not in env
    assert "MICROBATCH_MODEL__FEATURES" not in env


def test_cycle_repeats_the_pool_end_to_end():
    assert cycle([1, 2, 3], 7) == [1, 2, 3, 1, 2, 3, 1]
    with pytest.raises(ValueError, match="empty"):
        cycle([], 1)
