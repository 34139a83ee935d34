"""``python -m bench --quick`` end to end on the real broker: every system runs, nothing is lost, and the
results file holds every figure and ratio. Speed is never asserted: the quick figures mean nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from bench.scenarios import (
    BACKFILL,
    PASSTHROUGH,
    PLAIN,
    RAW_ORT_AT_BACKFILL,
    RAW_ORT_SORTED_AT_BACKFILL,
    SCENARIOS,
    SERVICE,
    SERVICE_LOOP_SIZE,
)

ROOT = Path(__file__).resolve().parents[2]
BENCH_TIMEOUT_S = 240
BACKFILL_CEILINGS = {"A": RAW_ORT_AT_BACKFILL, "B": RAW_ORT_SORTED_AT_BACKFILL}
"""The raw ONNX Runtime row pinned at the backfill's batch size, per scenario with a backfill row."""


def bench_topics(admin: AdminClient) -> set[str]:
    return {t for t in admin.list_topics(timeout=10).topics if t.startswith("bench.")}


@pytest.fixture(scope="module")
def quick_run(kafka_bootstrap, tmp_path_factory):
    """One quick run of every scenario, shared by the tests of this module."""
    tmp = tmp_path_factory.mktemp("bench")
    out = tmp / "bench-quick.json"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    before = bench_topics(admin)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MICROBATCH_")}
    # The bench is a package of the source checkout, not of the installed service: found from its root.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    command = [sys.executable, "-m", "bench", "--quick", "--scenario", "all"]
    command += ["--bootstrap", kafka_bootstrap, "--out", str(out), "--log-dir", str(tmp / "logs")]
    proc = subprocess.run(
        command,
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=BENCH_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-4000:]}"
    return json.loads(out.read_text()), proc.stdout, bench_topics(admin) - before


def kafka_systems(result):
    for key, scenario in result["scenarios"].items():
        for system in SCENARIOS[key].systems:
            if system.kafka:
                yield key, system.name, scenario["systems"][system.name]


def test_every_scenario_and_system_is_present(quick_run):
    result, _stdout, _left = quick_run
    assert set(result["scenarios"]) == set(SCENARIOS)
    for key, scenario in result["scenarios"].items():
        assert set(scenario["systems"]) == {s.name for s in SCENARIOS[key].systems}
    assert result["run"]["incomplete"] == []


def test_every_input_has_an_output_in_every_kafka_run(quick_run):
    result, _stdout, _left = quick_run
    for key, name, system in kafka_systems(result):
        spec = next(s for s in SCENARIOS[key].systems if s.name == name)
        phases = ["throughput"] + ["latency"] * spec.latency + ["light"] * spec.light
        for phase in phases:
            figures = system[phase]
            where = f"{key}/{name}/{phase}"
            assert figures["complete"], where
            assert figures["outputs"] == figures["inputs"] > 0, where
            assert figures["dead_letters"] == 0, where
            assert figures["exit_code"] == 0, where


def test_figures_are_measured_and_latencies_are_not_negative(quick_run):
    result, _stdout, _left = quick_run
    for key, name, system in kafka_systems(result):
        where = f"{key}/{name}"
        assert system["throughput"]["events_per_s"] > 0, where
        assert system["throughput"]["peak_rss_mib"] > 0, where
        spec = next(s for s in SCENARIOS[key].systems if s.name == name)
        runs = [system["latency"]] if spec.latency else []
        runs += [system["light"]] if spec.light else []
        assert system["latency"] is None or spec.latency, where
        for latency in runs:
            assert latency["measured"] > 0, where
            assert 0 <= latency["min_ms"] <= latency["p50_ms"] <= latency["p95_ms"] <= latency["p99_ms"], (
                where
            )
            assert latency["cpu_us_per_event"] > 0, where
    assert result["scenarios"]["A"]["systems"]["service"]["throughput"]["mean_batch_size"] >= 1
    for key, scenario in result["scenarios"].items():
        for system in SCENARIOS[key].systems:
            if not system.kafka:
                figures = scenario["systems"][system.name]["throughput"]
                assert figures["complete"] and figures["events_per_s"] > 0, f"{key}/{system.name}"


def test_the_service_half_load_is_half_of_its_stream_regime(quick_run):
    """The defaults row's half-load runs go at half the drain rate of the same defaults with the drain
    regime off, and that row never batched past MAX_SIZE."""
    result, _stdout, _left = quick_run
    max_size = result["settings"]["batch"]["max_size"]
    for key in ("A", "B"):
        systems = result["scenarios"][key]["systems"]
        stream = systems["service-stream"]["throughput"]
        half = 0.5 * stream["events_per_s"]
        assert systems["service"]["latency"]["rate_per_s"] == pytest.approx(half, rel=0.01), key
        assert systems["service"]["latency_load_of"] == "service-stream", key
        assert 1 <= stream["mean_batch_size"] <= max_size, key


def test_the_backfill_drains_the_backlog_as_a_fresh_job_and_exits_by_itself(quick_run):
    """``microbatch backfill`` read the whole backlog as a new job (nothing resumed), picked its own batch
    size with the default settings, printed its summary and exited 0 without being stopped; the raw
    ONNX Runtime row it is compared with ran at that same size."""
    result, _stdout, _left = quick_run
    for key, ceiling in BACKFILL_CEILINGS.items():
        scenario = result["scenarios"][key]
        figures = scenario["systems"][BACKFILL]["throughput"]
        assert figures["complete"] and figures["exit_code"] == 0, key
        assert figures["events_per_s"] > 0, key
        summary = figures["summary"]
        assert summary["done"] is True and summary["resumed"] is False, key
        assert summary["events"] == summary["results"] == summary["range_offsets"] == figures["inputs"], key
        size = scenario["backfill_batch_size"]
        assert size == figures["drain_ceiling"] >= result["settings"]["batch"]["max_size"], key
        assert 1 <= figures["mean_batch_size"] <= size, key
        pinned = scenario["systems"][ceiling]["throughput"]
        assert pinned["batch_size"] == size and pinned["pinned_to"] == BACKFILL, key
        assert scenario["systems"][BACKFILL]["latency"] is None, key  # no latency target, no latency run
    assert result["scenarios"]["B"]["systems"][RAW_ORT_SORTED_AT_BACKFILL]["throughput"]["order"] == "length"


def test_ratios_and_targets_are_computed(quick_run):
    result, _stdout, _left = quick_run
    for key, scenario in result["scenarios"].items():
        assert scenario["batch_inference_ms"] > 0, key
        targets = scenario["targets"]
        names = {system.name for system in SCENARIOS[key].systems}
        light = any(system.light for system in SCENARIOS[key].systems)
        # At light load: p99 and CPU (against the plain loop and the consume(32) loop) of the defaults,
        # CPU of the loop's batching and of the service's transport where they run.
        light_targets = (3 + (SERVICE_LOOP_SIZE in names) + (PASSTHROUGH in names)) if light else 0
        assert len(targets) == len(SCENARIOS[key].ratios) + 1 + light_targets
        for target in targets:
            assert target["value"] is not None, (key, target)
            if target["threshold"] is not None:
                assert isinstance(target["passed"], bool), (key, target)
    thresholds = {
        (key, target["name"]): target["threshold"]
        for key, scenario in result["scenarios"].items()
        for target in scenario["targets"]
    }
    assert thresholds["A", f"{BACKFILL} / {SERVICE} throughput"] == 1.3
    assert thresholds["A", f"{SERVICE} / {PLAIN} throughput"] == 0.8
    assert thresholds["A", f"{PASSTHROUGH} / {PLAIN} throughput"] is None
    assert thresholds["A", f"{BACKFILL} / {RAW_ORT_AT_BACKFILL} throughput"] is None
    assert thresholds["B", f"{BACKFILL} / {RAW_ORT_SORTED_AT_BACKFILL} throughput"] == 0.9


def test_results_describe_the_machine_and_the_settings(quick_run):
    result, _stdout, _left = quick_run
    machine = result["machine"]
    for field in ("cpu_model", "cores", "memory_gib", "os", "python", "librdkafka", "onnxruntime"):
        assert machine[field], field
    assert result["settings"]["batch"]["max_size"] >= 1
    assert result["run"]["quick"] is True


def test_tables_are_printed_and_no_topic_is_left_behind(quick_run):
    _result, stdout, left = quick_run
    assert "| system | events/s |" in stdout
    assert "| ratio or target |" in stdout
    assert f"| {BACKFILL}: " in stdout
    assert f"| {BACKFILL} / {SERVICE} throughput |" in stdout
    assert left == set()


def test_sweep_pipeline_drains_the_real_service_at_each_size(kafka_bootstrap, tmp_path):
    """``microbatch sweep --pipeline``: the service, pinned to each batch size, drains a backlog on the real
    broker; every drain finishes with every input answered, in batches of exactly that size."""
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    before = bench_topics(admin)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MICROBATCH_")}
    command = [sys.executable, "-m", "service", "sweep", "--model", "log-classifier", "--sizes", "2,8"]
    command += ["--seconds", "0.1", "--no-plot", "--pipeline", "--drain-seconds", "0.5"]
    command += ["--bootstrap", kafka_bootstrap, "--out", str(tmp_path)]
    proc = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S, check=False
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-4000:]}"
    report = json.loads((tmp_path / "sweep-log-classifier.json").read_text())
    for row in report["rows"]:
        service = row["pipeline"]
        assert service["complete"] is True, row
        assert service["events_per_s"] > 0
        assert service["mean_batch_size"] == pytest.approx(row["size"], abs=0.5)  # pinned, not adapted
    assert report["settings"]["pipeline"]["bootstrap"] == kafka_bootstrap
    assert report["pipeline_knee"]["size"] in {2, 8}
    assert "service/s" in proc.stdout
    assert bench_topics(admin) == before  # every drain's topics were deleted
