"""One system under test on the real broker: fresh topics, a fresh consumer group and a fresh process.

A Kafka run (:meth:`Harness.kafka_run`) loads its events into the input topic as a backlog and then starts
the system, or starts it and, once it answers a few warm-up events (its start-up is not latency), sends
them at a given rate; then it waits until every input is answered (or the system stalls), stops the system
and reads its outputs back. The throughput phase (:meth:`Harness.throughput_phase`) is a backlog drain:
events/s from the first to the last output timestamp, so process start-up, model loading and the group
join are not in it.

A system that ends by itself (``microbatch backfill``: it reads the backlog that is there when it starts,
then exits) runs as a fresh job named after its fresh topics; the harness waits for its exit, and anything
but 0 makes the phase incomplete.

``microbatch sweep --pipeline`` drains the service through it at each batch size; the bench of a source
checkout (``bench/runner.py``) runs its scenarios with it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from service.backfill.plan import job_group
from service.config import ENV_PREFIX, KafkaSettings, Settings
from service.errors import BrokerUnavailableError
from service.tools.harness import kafka_io, measure
from service.tools.harness.process import Sampler, child_env
from service.tools.harness.systems import Scenario, System
from service.tools.harness.workload import cycle
from service.tools.processes import Child, start
from service.tools.reader import Tail
from service.tools.topics import TopicAdmin, Watermarks

FIRST_OUTPUT_TIMEOUT_S = 120.0  # start-up: imports, model load and warm-up, group join
_STALL_TIMEOUT_S = 60.0  # no new output for this long: the system is stuck, stop waiting
_TAIL_TIMEOUT_S = 60.0  # after the stop: until the live reader saw every output read back
_EXIT_TIMEOUT_S = 60.0  # a system that ends by itself: from its last output to its exit (flush, commit)
POLL_S = 0.5
"""How often the output counts are asked for while a system runs."""
_WARM_UP_EVENTS = 20


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
    At light load, the plain loop (the other side of that target) gets as many."""
    light_rate: float
    """Events/s of the light-load runs; 0: none."""
    seed: int
    out: Path
    log_dir: Path


class Harness:
    """Runs systems on the broker at ``options.bootstrap``, one at a time; what did not finish is listed in
    ``incomplete``."""

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
        self.seen_latency = False
        """Time every latency run's results when a read_committed reader sees them (exactly-once runs
        always are), not when they were produced: to compare the two guarantees on one footing."""

    def check_broker(self) -> None:
        try:
            self.admin.check()
        except BrokerUnavailableError as exc:
            raise BrokerUnavailableError(f"at {self.options.bootstrap}: {exc} or pass --bootstrap") from None

    def batch_size(self, scenario: Scenario) -> int:
        """The scenario's ``BATCH__MAX_SIZE`` (of every system but the service's defaults row), unless the
        caller set one (``MICROBATCH_BATCH__MAX_SIZE``)."""
        if scenario.max_batch_size and "max_size" not in self.settings.batch.model_fields_set:
            return scenario.max_batch_size
        return self.settings.batch.max_size

    # -- phases -------------------------------------------------------------------------------------

    def throughput_phase(self, scenario: Scenario, system: System, events: list) -> dict[str, Any]:
        say(f"[{scenario.key}] {system.name}: draining a backlog of {len(events):,} events")
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
        env = self.env(scenario, system, {"KAFKA__GROUP_ID": group, **_topic_env(topics)})
        # Exactly-once results become visible at their transaction's commit, after they were produced:
        # their latency is timed when a read_committed reader sees them, not by their timestamps.
        tail = self._tail(env, client_conf, topics.output) if rate else None
        try:
            if not rate:
                sender.send(topics.input, events)
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
            timed = outputs if tail is None else _seen(tail, topics.output, len(outputs))
            dead = counter.count(topics.dlq, parts)
        finally:
            if tail is not None:
                tail.stop()
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
            "measured": [o for o in timed if (o.sent_us or 0) >= since_us],
            "dead_letters": dead,
            "samples": sampler.samples,
            "high_water_bytes": sampler.high_water_bytes,
            "sending_s": sending,
            "child": child,
        }

    def _tail(self, env: dict[str, str], client_conf: dict[str, Any], topic: str) -> Tail | None:
        """A reader following ``topic`` live (started), when the run's results are timed as seen:
        exactly-once runs (their results become visible at their transaction's commit, after they were
        produced), or every run with :attr:`seen_latency`."""
        if not (self.seen_latency or _exactly_once(env)):
            return None
        tail = Tail(client_conf, [topic])
        tail.start()
        return tail

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
                limit = _STALL_TIMEOUT_S if done else FIRST_OUTPUT_TIMEOUT_S
                if exited or now - changed_at > limit:
                    say(f"  {what}: {done} of {expected} answered; giving up (log {child.log_path})")
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
        say(f"  -> {', '.join(f'{k} {v}' for k, v in shown.items() if v is not None)}")


def finish(child: Child, ends: bool) -> int:
    """Stop ``child``; its exit code. One that ends by itself and has answered everything (``ends``) gets
    ``_EXIT_TIMEOUT_S`` to exit first: a signal would stop it early (a backfill then exits 1)."""
    if ends:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=_EXIT_TIMEOUT_S)
    return child.stop()


def _seen(tail: Tail, topic: str, count: int) -> list[measure.Output]:
    """The outputs ``tail`` read of ``topic``, timed when read, once it read ``count`` (or gave up)."""
    tail.wait_for(topic, count, _TAIL_TIMEOUT_S)
    return kafka_io.seen_outputs(tail, topic)


def _exactly_once(env: dict[str, str]) -> bool:
    return env.get(f"{ENV_PREFIX}DELIVERY__GUARANTEE") == "exactly-once"


def _topic_env(topics: kafka_io.Topics) -> dict[str, str]:
    return {"INPUT__TOPICS": topics.input, "OUTPUT__TOPIC": topics.output, "DLQ__TOPIC": topics.dlq}


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
