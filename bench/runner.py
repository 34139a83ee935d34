"""One benchmark run: every scenario, every system, one after the other on the same broker.

For each Kafka system (the service and the Kafka baselines) two phases, each on fresh topics and a fresh
consumer group, each with a fresh process:

1. throughput: N events are loaded into the input topic first, then the system starts and drains them;
   events/s is taken from the first to the last output timestamp, so process start-up, model loading and
   the group join are not in it. N is sized from the system's rate hint to give about ``drain_s`` seconds
   of work.
2. latency: the system starts on an empty topic and answers a few warm-up events (its start-up is not
   latency); then events are sent at ``latency_load`` (half) of the rate it just drained at (or, for a
   system with ``load_of``, the rate that system drained at: the service's stream regime), for
   ``settle_s`` seconds unmeasured and ``latency_s`` seconds measured; each output's timestamp minus its
   input's send time (a header the system passes through) is one sample.
3. light load (the systems marked ``light``): the same, at the fixed ``light_rate`` events/s, the same
   for every system, so that latency and CPU per event compare at one modest rate.

A system that ends by itself (``microbatch backfill``: it reads the backlog that is there when it starts,
then exits) gets the throughput phase only, as a fresh job named after its fresh topics; the runner waits
for its exit, and anything but 0 makes the phase incomplete.

The in-process model baselines (``raw-ort``) are timed by themselves and report their own figures; the
median batch time of ``raw-ort`` at the service's maximum batch size is the batch inference time of the
latency target. A row pinned to another's batch size (``pin_to``) runs after it, at the size that row
measured at its warm-up. Nothing here asserts a target: ratios and verdicts go into the results for people
to read.

The Kafka runs themselves (fresh topics, the process, the drain) are the harness's,
``service/tools/harness/runner.py``, which ``microbatch sweep --pipeline`` drains the service through too.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import time
from collections.abc import Sequence
from typing import Any

import msgspec

from bench import machine
from bench.scenarios import BACKFILL, PLAIN, RAW_ORT, selected
from bench.targets import evaluate
from service.config import private_option
from service.tools.harness import measure
from service.tools.harness.process import Sampler
from service.tools.harness.runner import FIRST_OUTPUT_TIMEOUT_S, Harness, say
from service.tools.harness.systems import SERVICE, Scenario, System
from service.tools.harness.workload import cycle, make_events
from service.tools.processes import start

_MIN_EVENTS = 200
# Distinct events per scenario; longer inputs repeat them. Enough for variety, small enough to hold.
_POOL_EVENTS = 50_000


class Bench(Harness):
    """Runs the scenarios and collects one JSON-able result dict."""

    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        result: dict[str, Any] = {
            "run": {
                "id": self.run_id,
                "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "quick": self.options.quick,
            },
            "machine": machine.describe(),
            "settings": self.describe_settings(),
            "scenarios": {},
        }
        for scenario in selected(self.options.scenario):
            result["scenarios"][scenario.key] = self.run_scenario(scenario)
        result["run"]["duration_s"] = round(time.monotonic() - started, 1)
        result["run"]["incomplete"] = self.incomplete
        return result

    def describe_settings(self) -> dict[str, Any]:
        batch = self.settings.batch
        return {
            "bootstrap": self.options.bootstrap,
            "partitions": self.options.partitions,
            "drain_seconds": self.options.drain_s,
            "latency_seconds": self.options.latency_s,
            "settle_seconds": self.options.settle_s,
            "latency_load": self.options.latency_load,
            "latency_repeats": self.options.latency_repeats,
            "light_rate": self.options.light_rate,
            "seed": self.options.seed,
            "batch": batch.model_dump(),
            "intra_op_threads": self.settings.model.intra_op_threads,
            "providers": self.settings.model.providers,
            "consumer_config": _public(self.kafka.consumer_config()),
            "producer_config": _public(self.kafka.producer_config()),
        }

    # -- scenarios ----------------------------------------------------------------------------------

    def run_scenario(self, scenario: Scenario) -> dict[str, Any]:
        backlog = {s.name: self.backlog_size(s) for s in scenario.systems if s.kafka}
        pools: dict[tuple[str, int], list] = {}
        entries: dict[str, dict[str, Any]] = {}
        for system in run_order(scenario.systems):
            entry: dict[str, Any] = {"label": system.label}
            if system.kafka:
                kind, per = system.kind or scenario.kind, system.items_per_message
                if (kind, per) not in pools:
                    size = min(max(backlog.values()), _POOL_EVENTS) // per
                    say(f"[{scenario.key}] {scenario.title}: {size:,} distinct {kind} messages")
                    pools[kind, per] = make_events(kind, size, self.options.seed, per)
                pool = pools[kind, per]
                entry["throughput"] = self.throughput_phase(
                    scenario, system, cycle(pool, backlog[system.name] // per)
                )
                if size := entry["throughput"].get("drain_ceiling"):
                    self.sizes[scenario.key, system.name] = size
                drained = _drain_rate(entry)
                basis = entries.get(system.load_of, {}) if system.load_of else entry
                rate = _drain_rate(basis) if drained else None
                if system.load_of:
                    entry["latency_load_of"] = system.load_of
                repeats = self.options.latency_repeats if system.name == SERVICE else 1
                half = (rate or 0.0) * self.options.latency_load
                count = repeats if rate and system.latency else 0
                entry |= self.latency_runs("latency", scenario, system, pool, half, count)
                if system.light and self.options.light_rate:
                    # The service and the ceiling its light-load p99 is judged against get the repeats.
                    light = self.options.latency_repeats if system.name in (SERVICE, PLAIN) else 1
                    count = light if drained else 0
                    entry |= self.latency_runs(
                        "light", scenario, system, pool, self.options.light_rate, count
                    )
            else:
                entry["throughput"] = self.model_phase(scenario, system)
                entry["latency"] = None
            entries[system.name] = entry
        systems = {s.name: entries[s.name] for s in scenario.systems}
        batch_ms = ((systems.get(RAW_ORT) or {}).get("throughput") or {}).get("batch_ms_p50")
        max_wait_ms = self.settings.batch.max_wait_ms
        return {
            "title": scenario.title,
            "model": scenario.model,
            "kind": scenario.kind,
            "batch_size": self.batch_size(scenario),
            "measured_knee": self.sizes.get((scenario.key, SERVICE)),
            "backfill_batch_size": self.sizes.get((scenario.key, BACKFILL)),
            "max_wait_ms": max_wait_ms,
            "batch_inference_ms": batch_ms,
            "systems": systems,
            "targets": evaluate(
                scenario.ratios,
                systems,
                max_wait_ms,
                batch_ms,
                self.options.latency_load,
                self.options.light_rate,
            ),
        }

    def latency_runs(
        self, phase: str, scenario: Scenario, system: System, pool: list, rate: float, repeats: int
    ) -> dict[str, Any]:
        """``repeats`` latency runs at ``rate``: ``{phase: the run with the median p99, phase +
        "_p99_runs_ms": every run's p99}``."""
        runs = [self.latency_phase(scenario, system, pool, rate, f"{phase}-{i + 1}") for i in range(repeats)]
        return {phase: measure.median_run(runs), f"{phase}_p99_runs_ms": [run.get("p99_ms") for run in runs]}

    def backlog_size(self, system: System) -> int:
        """Items (not messages) to drain: about ``drain_s`` seconds of work at the system's hinted rate."""
        return max(_MIN_EVENTS, round(system.rate_hint * self.options.drain_s))

    # -- phases -------------------------------------------------------------------------------------

    def latency_phase(
        self, scenario: Scenario, system: System, pool: list, rate: float, log_name: str = "latency"
    ) -> dict[str, Any]:
        """One latency run at ``rate``; ``log_name`` names its log (``latency-2``: the second half-load
        run)."""
        settle_s, seconds = self.options.settle_s, self.options.latency_s
        per = system.items_per_message
        count = max(_MIN_EVENTS // 4, round(rate * (settle_s + seconds))) // per
        say(f"[{scenario.key}] {system.name}: {count:,} messages at {rate:,.0f} items/s for latency")
        run = self.kafka_run(scenario, system, cycle(pool, count), rate / per, settle_s, log_name)
        measured: list[measure.Output] = run["measured"]
        latencies = measure.latencies_ms(measured)
        sent_from, sent_to = run["sending_s"]
        figures: dict[str, Any] = {
            "complete": run["complete"],
            "rate_per_s": round(rate, 1),
            "sent_rate_per_s": round(len(measured) / max(sent_to - sent_from, 1e-9), 1),
            "settle_s": settle_s,
            "inputs": run["inputs"],
            "outputs": run["outputs"],
            "measured": len(measured),
            "dead_letters": run["dead_letters"],
            **measure.percentiles(latencies),
            "max_ms": float(latencies.max()) if latencies.size else None,
            "min_ms": float(latencies.min()) if latencies.size else None,
            "cpu_percent": measure.cpu_percent(run["samples"], sent_from, sent_to),
        }
        figures["cpu_us_per_event"] = measure.cpu_per_event_us(
            figures["cpu_percent"], figures["sent_rate_per_s"]
        )
        figures |= self._common(system, run, measured)
        self._check(scenario, system, "latency", figures)
        return figures

    def model_phase(self, scenario: Scenario, system: System) -> dict[str, Any]:
        seconds = self.options.drain_s
        say(f"[{scenario.key}] {system.name}: timing the model alone for {seconds:g}s")
        log_dir = self.options.log_dir / self.run_id
        out = log_dir / f"{scenario.key}-{system.name}.json"
        kind = system.kind or scenario.kind
        extra = ["--kind", kind, "--seconds", str(seconds), "--seed", str(self.options.seed)]
        env = self.env(scenario, system, {})
        log_path = log_dir / f"{scenario.key}-{system.name}.log"
        child = start([*system.argv, *extra, "--out", str(out)], env, log_path)
        try:
            with Sampler(child.pid) as sampler:
                child.proc.wait(timeout=seconds + FIRST_OUTPUT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            say(f"  {system.name} did not finish in time; stopping it (log {child.log_path})")
        finally:
            code = child.stop()
        figures: dict[str, Any] = {"complete": code == 0 and out.is_file(), "exit_code": code}
        if system.pin_to:
            figures["pinned_to"] = system.pin_to
        if figures["complete"]:
            reported = msgspec.json.decode(out.read_bytes())
            window = reported.pop("window_s")
            figures |= reported | {"cpu_percent": measure.cpu_percent(sampler.samples, *window)}
        figures["peak_rss_mib"] = measure.peak_rss_mib(sampler.samples, sampler.high_water_bytes)
        figures["log"] = str(child.log_path)
        self._check(scenario, system, "throughput", figures)
        return figures


def run_order(systems: Sequence[System]) -> list[System]:
    """The declared order, except that a system runs after those it depends on: the one whose drain rate
    sets its latency load (``load_of``) and the one whose batch size it is pinned to (``pin_to``)."""
    by_name = {s.name: s for s in systems}
    order: list[System] = []

    def visit(system: System) -> None:
        if system in order:
            return
        for name in (system.load_of, system.pin_to):
            if name is not None and name in by_name:
                visit(by_name[name])
        order.append(system)

    for system in systems:
        visit(system)
    return order


def _drain_rate(entry: dict[str, Any]) -> float | None:
    """A system's drain rate, if its throughput phase answered every input."""
    throughput = entry.get("throughput") or {}
    return throughput.get("events_per_s") if throughput.get("complete") else None


def _public(conf: dict[str, Any]) -> dict[str, Any]:
    """Client options fit for a results file: no credentials, no callables."""
    return {
        k: v for k, v in conf.items() if not private_option(k) and isinstance(v, str | int | float | bool)
    }
