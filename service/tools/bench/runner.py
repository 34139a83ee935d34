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
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from tqdm import tqdm

from service.backfill.plan import job_group
from service.config import KafkaSettings, Settings, private_option
from service.errors import BrokerUnavailableError
from service.tools.bench import kafka_io, machine, measure
from service.tools.bench.process import Sampler, child_env
from service.tools.bench.scenarios import (
    BACKFILL,
    PASSTHROUGH,
    RAW_ORT,
    SERVICE,
    Scenario,
    System,
    selected,
)
from service.tools.bench.targets import evaluate
from service.tools.bench.workload import cycle, make_events
from service.tools.processes import Child, start
from service.tools.topics import TopicAdmin, Watermarks

_FIRST_OUTPUT_TIMEOUT_S = 120.0  # start-up: imports, model load and warm-up, group join
_STALL_TIMEOUT_S = 60.0  # no new output for this long: the system is stuck, stop waiting
_EXIT_TIMEOUT_S = 60.0  # a system that ends by itself: from its last output to its exit (flush, commit)
POLL_S = 0.5
"""How often the output counts are asked for while a system runs."""
_MIN_EVENTS = 200
_WARM_UP_EVENTS = 20
# Distinct events per scenario; longer inputs repeat them. Enough for variety, small enough to hold.
_POOL_EVENTS = 50_000


@dataclass(frozen=True, slots=True)
class Options:
    scenario: str
    quick: bool
    bootstrap: str
    partitions: int
    drain_s: float
    latency_s: float
    settle_s: float
    """Seconds at the latency run's rate before measuring starts (new shapes, queues and batch sizes)."""
    latency_load: float
    """The latency run's rate as a share of the rate the same system drained its backlog at."""
    latency_repeats: int
    """Latency runs of the service (the figure with a target); the one with the median p99 is reported.
    At light load, the passthrough (the other side of that target) gets as many."""
    light_rate: float
    """Events/s of the light-load runs; 0: none."""
    seed: int
    out: Path
    log_dir: Path


class Bench:
    """Runs the scenarios and collects one JSON-able result dict."""

    def __init__(self, options: Options, settings: Settings) -> None:
        self.options = options
        self.settings = settings
        self.kafka: KafkaSettings = settings.kafka.model_copy(update={"bootstrap_servers": options.bootstrap})
        self.admin = TopicAdmin(self.kafka.client_config())
        self.run_id = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:4]
        self.incomplete: list[str] = []
        self.sizes: dict[tuple[str, str], int] = {}
        """Per scenario and system: the batch size it measured at warm-up (the defaults row's drain ceiling,
        the backfill's batch size); the rows pinned to it (``pin_to``) run at that size."""

    def check_broker(self) -> None:
        try:
            self.admin.check()
        except BrokerUnavailableError as exc:
            raise BrokerUnavailableError(f"at {self.options.bootstrap}: {exc} or pass --bootstrap") from None

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
                    _say(f"[{scenario.key}] {scenario.title}: {size:,} distinct {kind} messages")
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
                    light = self.options.latency_repeats if system.name in (SERVICE, PASSTHROUGH) else 1
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

    def batch_size(self, scenario: Scenario) -> int:
        """The scenario's ``BATCH__MAX_SIZE`` (of every system but the service's defaults row), unless the
        caller set one (``MICROBATCH_BATCH__MAX_SIZE``)."""
        if scenario.max_batch_size and "max_size" not in self.settings.batch.model_fields_set:
            return scenario.max_batch_size
        return self.settings.batch.max_size

    def backlog_size(self, system: System) -> int:
        """Items (not messages) to drain: about ``drain_s`` seconds of work at the system's hinted rate."""
        return max(_MIN_EVENTS, round(system.rate_hint * self.options.drain_s))

    # -- phases -------------------------------------------------------------------------------------

    def throughput_phase(self, scenario: Scenario, system: System, events: list) -> dict[str, Any]:
        _say(f"[{scenario.key}] {system.name}: draining a backlog of {len(events):,} events")
        run = self.kafka_run(scenario, system, events, rate=0.0)
        outputs: list[measure.Output] = run["measured"]
        drain = measure.throughput([o.timestamp_ms for o in outputs])
        figures: dict[str, Any] = {
            "complete": run["complete"],
            "inputs": run["inputs"],
            "outputs": run["outputs"],
            "dead_letters": run["dead_letters"],
            "events_per_s": None,
            "window_s": None,
            "cpu_percent": None,
        }
        if drain:
            rate, window = drain
            first = min(o.timestamp_ms for o in outputs) / 1000
            figures |= {
                "events_per_s": round(rate, 1),
                "window_s": round(window, 3),
                "cpu_percent": measure.cpu_percent(run["samples"], first, first + window),
            }
        figures |= self._common(system, run, outputs)
        if system.ends:
            summary = measure.summary(run["child"].log_lines())
            figures["summary"] = summary
            if figures["drain_ceiling"] is None and summary:
                figures["drain_ceiling"] = measure.most_common_size(summary.get("batch_sizes") or {})
        self._check(scenario, system, "throughput", figures)
        return figures

    def latency_phase(
        self, scenario: Scenario, system: System, pool: list, rate: float, log_name: str = "latency"
    ) -> dict[str, Any]:
        """One latency run at ``rate``; ``log_name`` names its log (``latency-2``: the second half-load
        run)."""
        settle_s, seconds = self.options.settle_s, self.options.latency_s
        per = system.items_per_message
        count = max(_MIN_EVENTS // 4, round(rate * (settle_s + seconds))) // per
        _say(f"[{scenario.key}] {system.name}: {count:,} messages at {rate:,.0f} items/s for latency")
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
        _say(f"[{scenario.key}] {system.name}: timing the model alone for {seconds:g}s")
        log_dir = self.options.log_dir / self.run_id
        out = log_dir / f"{scenario.key}-{system.name}.json"
        kind = system.kind or scenario.kind
        extra = ["--kind", kind, "--seconds", str(seconds), "--seed", str(self.options.seed)]
        env = self.env(scenario, system, {})
        log_path = log_dir / f"{scenario.key}-{system.name}.log"
        child = start([*system.argv, *extra, "--out", str(out)], env, log_path)
        try:
            with Sampler(child.pid) as sampler:
                child.proc.wait(timeout=seconds + _FIRST_OUTPUT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _say(f"  {system.name} did not finish in time; stopping it (log {child.log_path})")
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

    def kafka_run(
        self,
        scenario: Scenario,
        system: System,
        events: list,
        rate: float,
        settle_s: float = 0.0,
        log_name: str | None = None,
    ) -> dict[str, Any]:
        """Fresh topics and group. ``rate`` 0: load ``events`` as a backlog, then start the system. Else:
        start it, let it answer a few warm-up events, then send ``events`` at ``rate`` messages per
        second; ``inputs`` count items (``items_per_message`` per message); ``measured`` are the outputs
        of those sent after the first ``settle_s`` seconds. Then wait until every input is answered (or
        the system stalls), stop the system and read its outputs back. ``log_name`` (default: the phase)
        names the system's log."""
        phase = "latency" if rate else "throughput"
        topics = kafka_io.Topics.fresh(f"bench.{scenario.key}.{system.name}.{phase}")
        parts = self.options.partitions
        client_conf = self.kafka.client_config()
        self.admin.create(topics.all(), parts)
        counter = Watermarks(client_conf)
        sender = kafka_io.Sender(self.kafka.producer_config())
        per = system.items_per_message
        inputs = len(events) * per
        sending = (0.0, time.time())
        group = f"{topics.input}.group"
        # A system that ends by itself is a backfill: a new job per run (named after its fresh input
        # topic), else it would resume the last run's job and find nothing to do.
        job = topics.input
        groups = [group, job_group(group, job)] if system.ends else [group]
        argv = [*system.argv, "--job", job] if system.ends else list(system.argv)
        try:
            if not rate:
                sender.send(topics.input, events)
            env = self.env(scenario, system, {"KAFKA__GROUP_ID": group, **_topic_env(topics)})
            log = f"{scenario.key}-{system.name}-{log_name or phase}.log"
            log_path = self.options.log_dir / self.run_id / log
            child = start(argv, env, log_path)
            complete = False
            try:
                with Sampler(child.pid) as sampler:
                    if rate:
                        inputs += self._warm_up(child, counter, sender, topics, events, system)
                        began = time.time()
                        sender.send(topics.input, events, rate)
                        sending = (began + settle_s, time.time())
                    complete = self._wait_answered(child, counter, topics, inputs, f"{system.name} {phase}")
            finally:
                exit_code = finish(child, system.ends and complete)
            outputs = kafka_io.read_outputs(client_conf, topics.output)
            dead = counter.count(topics.dlq, parts)
        finally:
            counter.close()
            self.admin.delete(topics.all())
            for name in groups:
                self.admin.delete_group(name)
        since_us = int(sending[0] * 1_000_000)
        return {
            "complete": complete and exit_code == 0 and len(outputs) == inputs,
            "exit_code": exit_code,
            "inputs": inputs,
            "outputs": len(outputs),
            "measured": [o for o in outputs if (o.sent_us or 0) >= since_us],
            "dead_letters": dead,
            "samples": sampler.samples,
            "high_water_bytes": sampler.high_water_bytes,
            "sending_s": sending,
            "child": child,
        }

    def _warm_up(
        self,
        child: Child,
        counter: Watermarks,
        sender: kafka_io.Sender,
        topics: kafka_io.Topics,
        events: list,
        system: System,
    ) -> int:
        """Until a first few inputs are answered the system is still joining its group, looking up its
        offsets and initialising its producer (and the bench its own): start-up, not latency. Returns the
        items sent."""
        warm = cycle(events, max(1, _WARM_UP_EVENTS // system.items_per_message))
        items = len(warm) * system.items_per_message
        sender.send(topics.input, warm)
        if not self._wait_answered(child, counter, topics, items, f"{system.name} warm-up"):
            raise RuntimeError(f"{system.name} did not answer its warm-up events; see {child.log_path}")
        return items

    def _wait_answered(
        self, child: Child, counter: Watermarks, topics: kafka_io.Topics, expected: int, what: str
    ) -> bool:
        """Until outputs + dead letters reach ``expected``: True; False if the system exited first or
        stalled. A system that exits right after its last output (one that ends by itself) has answered:
        its exit is seen before the count that finds every answer."""
        parts = self.options.partitions
        done = last_change = 0
        changed_at = time.monotonic()
        with tqdm(total=expected, desc=what, unit="ev", disable=None, leave=False, file=sys.stderr) as bar:
            while done < expected:
                time.sleep(POLL_S)
                exited = not child.alive()
                done = counter.count(topics.output, parts) + counter.count(topics.dlq, parts)
                bar.update(done - bar.n)
                if done >= expected:
                    break
                now = time.monotonic()
                if done != last_change:
                    last_change, changed_at = done, now
                limit = _STALL_TIMEOUT_S if done else _FIRST_OUTPUT_TIMEOUT_S
                if exited or now - changed_at > limit:
                    _say(f"  {what}: {done} of {expected} answered; giving up (log {child.log_path})")
                    return False
        return True

    def env(self, scenario: Scenario, system: System, overrides: dict[str, str]) -> dict[str, str]:
        size = self.sizes.get((scenario.key, system.pin_to)) if system.pin_to else None
        max_size = self.settings.batch.max_size if system.defaults else (size or self.batch_size(scenario))
        sized = {} if system.defaults else {"BATCH__MAX_SIZE": str(max_size)}
        if not system.drain_regime:
            sized["BATCH__DRAIN_MAX_SIZE"] = str(max_size)
        return child_env(
            os.environ,
            {
                "KAFKA__BOOTSTRAP_SERVERS": self.options.bootstrap,
                "MODEL__NAME": scenario.model,
                **sized,
                "LOG__FORMAT": "json",
                "METRICS__PORT": "0",  # served as in production, on a free port
                # Frequent stats lines: the service's padding efficiency is read from them.
                "LOG__STATS_INTERVAL_S": "2",
                **overrides,
                **dict(scenario.env),
                **dict(system.env),
            },
        )

    # -- helpers ------------------------------------------------------------------------------------

    def _common(self, system: System, run: dict[str, Any], outputs: list[measure.Output]) -> dict[str, Any]:
        child: Child = run["child"]
        is_service = system.argv[0] == "service"
        lines = child.log_lines() if is_service else []
        return {
            "mean_batch_size": measure.mean_batch_size(outputs),
            "padding_efficiency": measure.padding_efficiency(lines) if is_service else None,
            "drain_ceiling": measure.drain_ceiling(lines),
            "peak_rss_mib": measure.peak_rss_mib(run["samples"], run["high_water_bytes"]),
            "exit_code": run["exit_code"],
            "log": str(child.log_path),
        }

    def _check(self, scenario: Scenario, system: System, phase: str, figures: dict[str, Any]) -> None:
        if not figures["complete"]:
            self.incomplete.append(f"{scenario.key}/{system.name}/{phase}")
        shown = {k: figures.get(k) for k in ("events_per_s", "p50_ms", "p99_ms", "outputs", "inputs")}
        _say(f"  -> {', '.join(f'{k} {v}' for k, v in shown.items() if v is not None)}")


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


def finish(child: Child, ends: bool) -> int:
    """Stop ``child``; its exit code. One that ends by itself and has answered everything (``ends``) gets
    ``_EXIT_TIMEOUT_S`` to exit first: a signal would stop it early (a backfill then exits 1)."""
    if ends:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=_EXIT_TIMEOUT_S)
    return child.stop()


def _drain_rate(entry: dict[str, Any]) -> float | None:
    """A system's drain rate, if its throughput phase answered every input."""
    throughput = entry.get("throughput") or {}
    return throughput.get("events_per_s") if throughput.get("complete") else None


def _topic_env(topics: kafka_io.Topics) -> dict[str, str]:
    return {"INPUT__TOPICS": topics.input, "OUTPUT__TOPIC": topics.output, "DLQ__TOPIC": topics.dlq}


def _public(conf: dict[str, Any]) -> dict[str, Any]:
    """Client options fit for a results file: no credentials, no callables."""
    return {
        k: v for k, v in conf.items() if not private_option(k) and isinstance(v, str | int | float | bool)
    }


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
