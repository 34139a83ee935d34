"""bench/runner.py and the harness it runs on (service/tools/harness/runner.py): which rate each latency
run goes at, in which order the systems run, and the batch settings each one is started with. The phases
themselves (broker, processes) are replaced by recorders here; tests/integration/test_benchmark.py runs
them for real."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from bench import runner
from bench.runner import Bench, run_order
from bench.scenarios import (
    BACKFILL,
    PASSTHROUGH,
    PLAIN,
    RAW_ORT_AT_BACKFILL,
    RAW_ORT_SORTED_AT_BACKFILL,
    SCENARIOS,
    SERVICE,
    SERVICE_KNEE,
    SERVICE_STREAM,
    Scenario,
    System,
)
from service.backfill.command import backfill_settings
from service.backfill.plan import job_group
from service.config import load_settings
from service.tools.harness import kafka_io
from service.tools.harness import runner as harness
from service.tools.harness.measure import Output
from service.tools.harness.runner import Options, finish
from service.tools.processes import Child

DRAIN_RATES = {SERVICE: 80_000.0, SERVICE_STREAM: 50_000.0, SERVICE_KNEE: 90_000.0, BACKFILL: 120_000.0}
MEASURED = {SERVICE: 512, BACKFILL: 128}


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
        self.model_envs: dict[str, dict[str, str]] = {}

    def throughput_phase(self, scenario: Scenario, system: System, events: list) -> dict[str, Any]:
        self.calls.append(("drain", system.name, 0.0))
        rate = DRAIN_RATES.get(system.name, 10_000.0)
        return {
            "complete": True,
            "events_per_s": rate,
            "drain_ceiling": MEASURED.get(system.name),
        }

    def latency_phase(
        self, scenario: Scenario, system: System, pool: list, rate: float, log_name: str = "latency"
    ) -> dict[str, Any]:
        self.calls.append(("latency", system.name, rate))
        self.log_names.append(f"{system.name}-{log_name}")
        return {"p99_ms": 10.0, "rate_per_s": rate}

    def model_phase(self, scenario: Scenario, system: System) -> dict[str, Any]:
        self.calls.append(("model", system.name, 0.0))
        self.model_envs[system.name] = self.env(scenario, system, {})
        return {"complete": True, "events_per_s": 1e6, "batch_ms_p50": 0.1}


@pytest.fixture
def bench(tmp_path, monkeypatch) -> Recording:
    monkeypatch.setattr(harness, "TopicAdmin", lambda conf: None)  # no broker in the unit tier
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
    phases = ("latency", "light")
    prefixes = tuple(f"{SERVICE}-{phase}" for phase in phases)
    service_logs = [name for name in bench.log_names if name.startswith(prefixes)]
    assert service_logs == [f"{SERVICE}-{phase}-{i}" for phase in phases for i in (1, 2, 3)]


def test_other_systems_keep_half_their_own_drain_rate(bench):
    bench.run_scenario(SCENARIOS["A"])
    assert ("latency", PASSTHROUGH, 5_000.0) in bench.calls
    assert ("latency", PLAIN, 5_000.0) in bench.calls


def test_the_plain_loop_gets_as_many_light_runs_as_the_service_its_targets_judge(bench):
    result = bench.run_scenario(SCENARIOS["A"])
    light = [name for phase, name, rate in bench.calls if phase == "latency" and rate == 2_000.0]
    assert light.count(SERVICE) == light.count(PLAIN) == 3
    assert light.count(PASSTHROUGH) == 1  # reported, not judged
    assert result["systems"][PLAIN]["label"].startswith("plain consume-produce loop")
    assert result["systems"][PASSTHROUGH]["label"] == "service transport, no model"
    names = {t["name"] for t in result["targets"]}
    assert {"service / plain throughput", "passthrough / plain throughput"} <= names
    assert "service / plain p99 latency at 2,000/s" in names


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


def by_name(scenario: Scenario) -> dict[str, System]:
    return {s.name: s for s in scenario.systems}


def test_a_row_runs_after_the_rows_it_depends_on_and_the_rest_keep_their_order():
    for scenario in SCENARIOS.values():
        order = [s.name for s in run_order(scenario.systems)]
        assert sorted(order) == sorted(s.name for s in scenario.systems)
        for system in scenario.systems:
            for base in (system.load_of, system.pin_to):
                if base is not None:
                    assert order.index(base) < order.index(system.name), (scenario.key, system.name)
    a = [s.name for s in run_order(SCENARIOS["A"].systems)]
    assert a[:3] == [SERVICE_STREAM, SERVICE, SERVICE_KNEE]
    assert a.index(BACKFILL) < a.index(RAW_ORT_AT_BACKFILL)


def test_the_backfill_runs_the_defaults_and_its_raw_ort_row_is_pinned_at_the_size_it_cut(bench):
    scenario = SCENARIOS["A"]
    result = bench.run_scenario(scenario)
    backfill_env = bench.env(scenario, by_name(scenario)[BACKFILL], {})
    # Not the scenario's pinned 64: the backfill picks its own size, as a user's would.
    assert "MICROBATCH_BATCH__MAX_SIZE" not in backfill_env
    assert bench.model_envs[RAW_ORT_AT_BACKFILL]["MICROBATCH_BATCH__MAX_SIZE"] == "128"
    assert bench.model_envs["raw-ort"]["MICROBATCH_BATCH__MAX_SIZE"] == str(scenario.max_batch_size)
    assert (result["backfill_batch_size"], result["measured_knee"]) == (128, 512)
    assert not any(name == BACKFILL for phase, name, _ in bench.calls if phase == "latency")
    verdicts = {t["name"]: t for t in result["targets"]}
    assert verdicts["backfill / service throughput"]["value"] == 1.5
    assert verdicts[f"backfill / {RAW_ORT_AT_BACKFILL} throughput"]["threshold"] is None


def test_scenario_b_pins_the_sorted_ceiling_at_the_backfill_size(bench):
    bench.run_scenario(SCENARIOS["B"])
    env = bench.model_envs[RAW_ORT_SORTED_AT_BACKFILL]
    assert env["MICROBATCH_BATCH__MAX_SIZE"] == "128"


def test_the_job_group_is_the_one_the_backfill_commits_under():
    settings = load_settings()
    grouped = settings.model_copy(
        update={"kafka": settings.kafka.model_copy(update={"group_id": "bench.A.x.in.group"})}
    )
    job = "bench.A.backfill.throughput.0a1b2c3d.in"
    expected = backfill_settings(grouped, job, None).kafka.group_id
    assert job_group("bench.A.x.in.group", job) == expected


# -- a system that ends by itself, against fakes of the broker side ----------------------------------


class HeldUntilWaited:
    """A stand-in's process, held (reading its stdin) until someone waits for its exit: a runner that
    waits lets it finish; one that signalled it instead would find it still held, and stop it (143). No
    race against a sleep either way."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    def wait(self, timeout: float | None = None) -> int:
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            self._proc.stdin.close()
        return self._proc.wait(timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._proc, name)


def python_child(code: str, log_path: Path) -> Child:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT
        )
    return Child(HeldUntilWaited(proc), log_path)  # type: ignore[arg-type]


def backfill_code(exit_code: int, sizes: Mapping[str, int], size_line: bool = True) -> str:
    """A stand-in for ``microbatch backfill``: its size line (cut at 128), its work (held until its exit
    is waited for: ``HeldUntilWaited``), its summary, its exit. Stopped by a signal instead, it exits 143."""
    size_event = "backfill_batch_size" if size_line else "backfill_range"
    sized = {"event": size_event, "drain_max_size": 128}
    summary = {"job": "j", "done": exit_code == 0, "events": 4, "batch_sizes": sizes}
    return (
        "import json, signal, sys\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))\n"
        f"print(json.dumps({sized!r}), flush=True)\n"
        "sys.stdin.read()\n"
        f"print(json.dumps({summary!r}), flush=True)\n"
        f"sys.exit({exit_code})\n"
    )


class Broker:
    """The broker side of one kafka run: topics, groups, the counts, the bench's producer, the outputs.
    Every input is answered at once; the system under test is a plain process."""

    def __init__(self, code: str) -> None:
        self.code = code
        self.created: list[str] = []
        self.deleted_groups: list[str] = []
        self.argvs: list[list[str]] = []
        self.envs: list[dict[str, str]] = []
        self.sent: dict[str, int] = {}

    # TopicAdmin
    def create(self, names: Sequence[str], partitions: int) -> None:
        self.created += names

    def delete(self, names: Sequence[str]) -> list[str]:
        return list(names)

    def delete_group(self, group: str) -> None:
        self.deleted_groups.append(group)

    # service.tools.processes.start
    def start(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> Child:
        self.argvs.append(list(argv))
        self.envs.append(dict(env))
        return python_child(self.code, log_path)

    def watermarks(self, _conf: Any) -> Broker:
        return self

    # Watermarks
    def count(self, topic: str, _partitions: int) -> int:
        return self.sent.get(topic.removesuffix(".out") + ".in", 0) if topic.endswith(".out") else 0

    def close(self) -> None:
        pass

    # kafka_io.Sender
    def sender(self, _conf: Any) -> Broker:
        return self

    def send(self, topic: str, events: Sequence[Any], rate: float = 0.0) -> float:
        self.sent[topic] = self.sent.get(topic, 0) + len(events)
        return 0.0

    def read_outputs(self, conf: Any, topic: str) -> list[Output]:
        return [Output(1_000 + 10 * i, None, 128) for i in range(self.count(topic, 4))]


def broker(monkeypatch, code: str, tmp_path: Path) -> tuple[Bench, Broker]:
    fake = Broker(code)
    monkeypatch.setattr(harness, "TopicAdmin", lambda conf: fake)
    monkeypatch.setattr(harness, "Watermarks", fake.watermarks)
    monkeypatch.setattr(harness, "start", fake.start)
    monkeypatch.setattr(harness, "POLL_S", 0.01)
    monkeypatch.setattr(kafka_io, "Sender", fake.sender)
    monkeypatch.setattr(kafka_io, "read_outputs", fake.read_outputs)
    return Bench(options(tmp_path), load_settings()), fake


def test_a_backfill_is_a_fresh_job_each_run_left_to_exit_by_itself(monkeypatch, tmp_path):
    bench, fake = broker(monkeypatch, backfill_code(0, {"128": 1}), tmp_path)
    scenario = SCENARIOS["A"]
    backfill = by_name(scenario)[BACKFILL]
    figures = [bench.throughput_phase(scenario, backfill, [(None, b"{}")] * 4) for _ in range(2)]
    jobs = [argv[argv.index("--job") + 1] for argv in fake.argvs]
    assert [argv[:2] for argv in fake.argvs] == [["service", "backfill"]] * 2
    assert len(set(jobs)) == 2  # never the last run's job: it would find nothing to do
    for job, env in zip(jobs, fake.envs, strict=True):
        group = env["MICROBATCH_KAFKA__GROUP_ID"]
        assert env["MICROBATCH_INPUT__TOPICS"] == job  # named after its fresh input topic
        assert {group, job_group(group, job)} <= set(fake.deleted_groups)
    for run in figures:
        assert run["complete"] and run["exit_code"] == 0  # not stopped by a signal (143)
        assert run["drain_ceiling"] == 128
        assert run["summary"]["events"] == 4
        assert run["events_per_s"] > 0
    assert bench.incomplete == []


def test_a_backfill_that_exits_non_zero_is_incomplete(monkeypatch, tmp_path):
    bench, _fake = broker(monkeypatch, backfill_code(1, {"128": 1}), tmp_path)
    scenario = SCENARIOS["B"]
    figures = bench.throughput_phase(scenario, by_name(scenario)[BACKFILL], [(None, b"{}")] * 4)
    assert figures["exit_code"] == 1
    assert figures["complete"] is False
    assert figures["outputs"] == figures["inputs"] == 4
    assert bench.incomplete == ["B/backfill/throughput"]


def test_a_backfill_size_missing_from_its_log_comes_from_its_summary(monkeypatch, tmp_path):
    bench, _fake = broker(monkeypatch, backfill_code(0, {"100": 1, "256": 9}, size_line=False), tmp_path)
    scenario = SCENARIOS["A"]
    figures = bench.throughput_phase(scenario, by_name(scenario)[BACKFILL], [(None, b"{}")] * 4)
    assert figures["drain_ceiling"] == 256


def test_finish_leaves_a_self_ending_process_to_exit_and_stops_one_that_does_not(tmp_path):
    ends = python_child(backfill_code(0, {}), tmp_path / "ends.log")
    assert finish(ends, True) == 0
    stays = python_child(backfill_code(0, {}), tmp_path / "stays.log")
    assert finish(stays, False) in {143, -15}  # signalled while held (before or after its handler was set)
    assert json.loads(ends.log().splitlines()[-1])["done"] is True
