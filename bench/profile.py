"""``python -m bench.profile``: where each microsecond of an event goes in the real service, stage by stage.

    python -m bench.profile [--model metrics-anomaly] [--model log-classifier] [--bootstrap HOST:PORT]
                            [--out FILE] [--doc docs/BENCHMARKS.md]
    python -m bench.profile --render bench/results/profile-<UTC>.json [...] [--doc docs/BENCHMARKS.md]

For each model, ``python -m service run`` (its own process, default settings) runs twice on fresh topics of
the broker, as the bench's harness runs it (``service/tools/harness``):

1. drain: a backlog of generated events is loaded first; once the first results come out (and
   ``--skip-seconds`` more), one window of ``--window-seconds`` is measured while the backlog lasts;
2. light load: after a few warm-up events, events are sent at ``--light-rate`` per second; after
   ``--settle-seconds`` one window is measured while they are still being sent.

Over each window: py-spy samples the service's Python threads (``--rate`` per second, busy samples only: a
thread blocked in a system call or waiting for the GIL is not sampled; the process is paused for each
sample at light load only, see :func:`sample`), while the service's threads run at nice -20
(:func:`schedule`); the kernel's CPU counts of the process and of each of its threads are read before and
after, and the service's own Prometheus metrics (results produced, batches) scraped. How samples
become stages and microseconds: ``bench/stages.py``. The results go to ``--out`` as JSON and the table to
stdout (:func:`bench.stages.render`); ``--doc`` replaces the text between the ``<!-- profile:begin -->`` and
``<!-- profile:end -->`` markers of that file with it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import stages
from service.config import KafkaSettings, Settings
from service.tools.harness import kafka_io
from service.tools.harness.runner import FIRST_OUTPUT_TIMEOUT_S, POLL_S, Harness, Options, finish, say
from service.tools.harness.systems import SERVICE, Scenario, System
from service.tools.harness.workload import Event, cycle, make_events
from service.tools.processes import Child, start
from service.tools.topics import Watermarks

RESULTS_DIR = Path("bench/results")
MODELS = {"metrics-anomaly": ("metrics", 600_000), "log-classifier": ("logs", 80_000)}
"""Per model: the event kind it reads, and the default backlog: several seconds of draining on a small
machine, so that the window sits inside the drain."""
_POOL_EVENTS = 50_000  # distinct events generated; longer inputs repeat them
_PY_SPY_SLACK_S = 60.0  # attaching, and writing the profile out
_TAIL_S = 3.0  # light load: events sent after the window, so that it ends before the sending does
_SERVICE = System(SERVICE, "service, default settings", ("service", "run"), True, 0.0, defaults=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        action="append",
        choices=tuple(MODELS),
        default=None,
        help="model to profile; repeat for several (default metrics-anomaly)",
    )
    parser.add_argument(
        "--bootstrap", default=None, help=f"brokers (default {KafkaSettings.env('bootstrap_servers')})"
    )
    parser.add_argument("--partitions", type=int, default=4, help="partitions of each input topic (4)")
    parser.add_argument(
        "--drain-events",
        type=int,
        default=None,
        help="backlog (metrics-anomaly 600,000; log-classifier 80,000)",
    )
    parser.add_argument("--skip-seconds", type=float, default=1.5, help="drain: first result to window (1.5)")
    parser.add_argument("--window-seconds", type=int, default=3, help="drain: the window (3)")
    parser.add_argument("--light-rate", type=float, default=2000.0, help="light load: events/s (2000)")
    parser.add_argument(
        "--settle-seconds", type=float, default=3.0, help="light load: sent before window (3)"
    )
    parser.add_argument("--light-window-seconds", type=int, default=20, help="light load: the window (20)")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second (250)")
    parser.add_argument("--paused-rate", type=int, default=100, help="py-spy samples/s when pausing (100)")
    parser.add_argument(
        "--light-nonblocking", action="store_true", help="light load: sample without pausing the service"
    )
    parser.add_argument(
        "--no-priority",
        action="store_true",
        help="leave the service at nice 0 in the windows (more of the samples are then run-queue waits)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the generated events")
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/profile-<UTC>.json")
    parser.add_argument("--log-dir", type=Path, default=Path(".local/profile"), help="logs and raw profiles")
    parser.add_argument("--doc", type=Path, default=None, help="replace the profile block of this file")
    parser.add_argument(
        "--render", type=Path, nargs="+", default=None, help="only render these results files"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.render:
        results = [json.loads(path.read_text()) for path in args.render]
    else:
        from service.config import load_settings

        result = run(args, load_settings())
        results = [result]
        out = args.out or RESULTS_DIR / f"profile-{result['run']['id']}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        say(f"results: {out}")
    text = stages.render(results)
    sys.stdout.write(text)
    if args.doc is not None:
        args.doc.write_text(stages.replace_block(args.doc.read_text(), text))
    return 0


@dataclass(frozen=True, slots=True)
class Plan:
    """How each phase is measured (the command's options)."""

    skip_s: float
    window_s: int
    light_rate: float
    settle_s: float
    light_window_s: int
    rate_hz: int
    py_spy: str
    paused_rate_hz: int
    """py-spy's rate when it pauses the process: each pause costs the service CPU."""
    pause_light: bool
    """py-spy pauses the process for each sample at light load (:func:`sample`)."""
    raise_priority: bool
    """The service's threads at nice -20 during each window (:func:`schedule`)."""


def run(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    """Profile each model: both phases, each on fresh topics with a fresh service process."""
    from bench import machine

    plan = Plan(
        skip_s=args.skip_seconds,
        window_s=args.window_seconds,
        light_rate=args.light_rate,
        settle_s=args.settle_seconds,
        light_window_s=args.light_window_seconds,
        rate_hz=args.rate,
        py_spy=py_spy_path(),
        paused_rate_hz=args.paused_rate,
        pause_light=not args.light_nonblocking,
        raise_priority=not args.no_priority,
    )
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    options = Options(
        scenario="profile",
        quick=False,
        bootstrap=args.bootstrap or settings.kafka.bootstrap_servers,
        partitions=args.partitions,
        drain_s=0.0,
        latency_s=float(args.light_window_seconds),
        settle_s=args.settle_seconds,
        latency_load=0.0,
        latency_repeats=1,
        light_rate=args.light_rate,
        seed=args.seed,
        out=args.out or RESULTS_DIR / f"profile-{stamp}.json",
        log_dir=args.log_dir,
    )
    profiler = Profiler(options, settings, plan)
    profiler.check_broker()
    started = time.monotonic()
    result: dict[str, Any] = {
        "run": {"id": profiler.run_id, "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")},
        "machine": machine.describe(),
        "settings": {"bootstrap": options.bootstrap, "partitions": options.partitions, **asdict(plan)},
        "models": {},
    }
    for model in args.model or ["metrics-anomaly"]:
        kind, backlog = MODELS[model]
        result["models"][model] = profiler.profile(model, kind, args.drain_events or backlog)
    result["run"]["duration_s"] = round(time.monotonic() - started, 1)
    return result


class Profiler(Harness):
    """The harness's service runs (fresh topics, group and process; its environment and warm-up), with one
    measured window in each."""

    def __init__(self, options: Options, settings: Settings, plan: Plan) -> None:
        super().__init__(options, settings)
        self.plan = plan

    def profile(self, model: str, kind: str, backlog: int) -> dict[str, Any]:
        """Both phases of ``model``, reading events of ``kind``: a drain of ``backlog`` events, then light
        load."""
        scenario = Scenario(
            key=model, title="profile", model=model, kind=kind, systems=(_SERVICE,), ratios=()
        )
        pool = make_events(kind, min(backlog, _POOL_EVENTS), self.options.seed)
        say(f"[{model}] draining a backlog of {backlog:,} events")
        drain = self.phase(scenario, "drain", cycle(pool, backlog), 0.0)
        plan = self.plan
        light = None
        if plan.light_rate:
            count = round(plan.light_rate * (plan.settle_s + plan.light_window_s + _TAIL_S))
            say(f"[{model}] {count:,} events at {plan.light_rate:,.0f}/s")
            light = self.phase(scenario, "light", cycle(pool, count), plan.light_rate)
        return {"drain": drain, "light": light}

    def phase(self, scenario: Scenario, name: str, events: list[Event], rate: float) -> dict[str, Any]:
        """One service process on fresh topics: ``rate`` 0, a backlog of ``events`` drained; else
        ``events`` sent at ``rate``. One window measured in it; then every input waited for."""
        topics = kafka_io.Topics.fresh(f"profile.{scenario.key}.{name}")
        parts = self.options.partitions
        self.admin.create(topics.all(), parts)
        counter = Watermarks(self.kafka.client_config())
        sender = kafka_io.Sender(self.kafka.producer_config())
        group = f"{topics.input}.group"
        run_dir = self.options.log_dir / self.run_id
        try:
            if not rate:
                sender.send(topics.input, events)
            env = self.env(scenario, _SERVICE, _service_env(topics, group))
            child = start(_SERVICE.argv, env, run_dir / f"{scenario.key}-{name}.log")
            try:
                port = _metrics_port(child)
                expected = len(events)
                sending: Future[float] | None = None
                if rate:
                    expected += self._warm_up(child, counter, sender, topics, events, _SERVICE)
                    sending = _in_background(sender.send, topics.input, events, rate)
                    time.sleep(self.plan.settle_s)
                    seconds = self.plan.light_window_s
                else:
                    self._first_output(child, counter, topics)
                    time.sleep(self.plan.skip_s)
                    seconds = self.plan.window_s
                raw = run_dir / f"{scenario.key}-{name}.raw.txt"
                figures = self.window(child.pid, port, seconds, raw, len(events) if not rate else None)
                if sending is not None:
                    sending.result()
                complete = self._wait_answered(child, counter, topics, expected, f"service {name}")
            finally:
                exit_code = finish(child, False)
            dead = counter.count(topics.dlq, parts)
        finally:
            counter.close()
            self.admin.delete(topics.all())
            self.admin.delete_group(group)
        run = {"complete": complete and exit_code == 0, "exit_code": exit_code, "dead_letters": dead}
        return {"rate_per_s": rate or None, **figures, **run, "log": str(child.log_path)}

    def window(self, pid: int, port: int, seconds: int, raw: Path, backlog: int | None) -> dict[str, Any]:
        """Sample ``pid`` for ``seconds`` and read its CPU and metrics around that. ``backlog``: the drain's
        input count, to tell whether the backlog lasted the whole window; None at light load, where py-spy
        pauses the process for each sample (:func:`sample`)."""
        pause = backlog is None and self.plan.pause_light
        load = os.getloadavg()[0]
        raised = self.plan.raise_priority and schedule(pid, raised=True)
        before = scrape(port)
        cpu0, threads0 = read_cpu(pid)
        waits0 = read_waits(pid)
        began = time.monotonic()
        rate_hz = self.plan.paused_rate_hz if pause else self.plan.rate_hz
        spy = sample(self.plan.py_spy, pid, seconds, rate_hz, raw, pause)
        elapsed = time.monotonic() - began
        cpu1, threads1 = read_cpu(pid)
        waits1 = read_waits(pid)
        after = scrape(port)
        if raised:
            schedule(pid, raised=False)
        counts = stages.counted(before, after)
        stacks = stages.parse_raw(raw.read_text())
        samples = stages.tally(stacks)
        thread_cpu = stages.thread_deltas(threads0, threads1)
        window = stages.Window(elapsed, samples, thread_cpu, cpu1 - cpu0, counts["events"])
        consumed = after.get(stages.COUNTERS["consumed"], 0.0)
        threads = stages.threads_table(stacks, thread_cpu, stages.waited(waits0, waits1))
        return {
            "window_s": round(elapsed, 3),
            **counts,
            "events_per_s": round(counts["events"] / elapsed, 1) if elapsed else None,
            "inside": consumed < backlog if backlog is not None else None,
            "load_average_1m": [round(load, 2), round(os.getloadavg()[0], 2)],
            "py_spy": {"rate_hz": rate_hz, **spy, "raw": str(raw)},
            **stages.apportion(window),
            "priority_raised": raised,
            "paused_sampling": pause,
            "run_queue_wait_share": stages.wait_share(threads, rate_hz),
            "threads": threads,
        }

    def _first_output(self, child: Child, counter: Watermarks, topics: kafka_io.Topics) -> None:
        """Until the service's first result is out: start-up, the group join and model loading are over."""
        deadline = time.monotonic() + FIRST_OUTPUT_TIMEOUT_S
        while not counter.count(topics.output, self.options.partitions):
            if not child.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the service produced nothing; see {child.log_path}")
            time.sleep(POLL_S / 5)


def _service_env(topics: kafka_io.Topics, group: str) -> dict[str, str]:
    return {
        "KAFKA__GROUP_ID": group,
        "INPUT__TOPICS": topics.input,
        "OUTPUT__TOPIC": topics.output,
        "DLQ__TOPIC": topics.dlq,
        # The harness asks for a stats line every 2 s (it reads them); the default (10 s) is profiled.
        "LOG__STATS_INTERVAL_S": "10",
    }


def _metrics_port(child: Child) -> int:
    """The metrics port the service bound (its ``started`` log line). Raises RuntimeError when it exits or
    does not start in time."""
    deadline = time.monotonic() + FIRST_OUTPUT_TIMEOUT_S
    while time.monotonic() < deadline and child.alive():
        for line in child.events("started"):
            if line.get("metrics_port"):
                return int(line["metrics_port"])
        time.sleep(POLL_S / 5)
    raise RuntimeError(f"the service did not start; see {child.log_path}")


def _in_background(send: Any, *args: Any) -> Future[float]:
    """``send(*args)`` on a thread of its own; ``result()`` waits for it and re-raises its error."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="profile-sender")
    future = pool.submit(send, *args)
    pool.shutdown(wait=False)
    return future


# -- measuring ------------------------------------------------------------------------------------------


def py_spy_path() -> str:
    """The py-spy beside this Python (the ``bench`` extra installs it), else the one on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.is_file() else shutil.which("py-spy")
    if found is None:
        raise SystemExit("py-spy not found: pip install 'microbatch[bench]'")
    return found


def sample(py_spy: str, pid: int, seconds: int, rate_hz: int, raw: Path, pause: bool) -> dict[str, Any]:
    """py-spy on ``pid`` for ``seconds``, its raw stacks (with thread ids) to ``raw``; what it said of its
    sampling. Idle threads are left out (no ``--idle``). ``pause``: stop the process for each sample.

    Without pausing (``--nonblocking``) py-spy reads a thread's state and its stack at different moments.
    That is right for a thread busy for long stretches (a drain: its busy samples came to 95% of its CPU
    time), and wrong for one that wakes up ~900 times a second for ~200 us each (2,000 events/s): there
    its busy samples came to 58% of its CPU time, three quarters of them on the consume call it had gone
    back to sleep in. Paused, they came to 90%, at the price of CPU (each pause costs the service some:
    a lower rate, ``--paused-rate``) and of idle threads now and then counted busy (left out by
    :func:`bench.stages.waiting`). Raises RuntimeError when it fails, e.g. when ptrace is not allowed."""
    argv = [py_spy, "record", "--format", "raw", "--threads", "--rate", str(rate_hz)]
    argv += [] if pause else ["--nonblocking"]
    argv += ["--duration", str(seconds), "--pid", str(pid), "--output", str(raw)]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=seconds + _PY_SPY_SLACK_S, check=False
    )
    if done.returncode != 0 or not raw.is_file():
        raise RuntimeError(f"py-spy failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return stages.py_spy_summary(done.stdout + done.stderr)


def schedule(pid: int, raised: bool) -> bool:
    """Every thread of ``pid`` to nice -20 (``raised``) or back to 0; whether it could. Needs CAP_SYS_NICE
    (root). Why: py-spy counts a runnable thread as busy, and on a small machine shared with the broker a
    thread that wakes up often waits for a CPU first (at 2,000 events/s, 60% of the loop thread's samples
    were such waits, at the calls it woke up in). The scheduler runs a thread of the highest weight soon
    after it wakes, so fewer of its samples are waits; the share that still are is measured
    (``run_queue_wait_share``). Not real-time priority: that starved py-spy and librdkafka's threads."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.setpriority(os.PRIO_PROCESS, int(task.name), -20 if raised else 0)
        except PermissionError:
            say("  (not allowed to raise the service's priority: busy samples include more run-queue waits)")
            return False
        except OSError:  # the thread ended meanwhile
            continue
    return True


def read_waits(pid: int) -> dict[int, float]:
    """Seconds each live thread of ``pid`` has spent runnable but waiting for a CPU (the run queue,
    ``/proc/<pid>/task/<tid>/schedstat``). py-spy counts a runnable thread as busy, so this much of its
    samples was no CPU at all; on a loaded machine it lands mostly where the thread woke up."""
    waits: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            waits[int(task.name)] = int((task / "schedstat").read_text().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            continue
    return waits


def read_cpu(pid: int) -> tuple[float, dict[int, tuple[str, float]]]:
    """CPU seconds (user + system) of process ``pid`` so far, and of each of its live threads with its
    name. Linux only (``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    _name, process = stages.parse_task_stat(Path(f"/proc/{pid}/stat").read_text())
    threads: dict[int, tuple[str, float]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name, ticks = stages.parse_task_stat((task / "stat").read_text())
        except OSError:  # ended meanwhile
            continue
        threads[int(task.name)] = (name, ticks / tick)
    return process / tick, threads


def scrape(port: int) -> dict[str, float]:
    """The service's metrics, each summed over its labels: ``{"microbatch_results_produced_total": ...}``."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        body = response.read().decode()
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            sums[s.name] = sums.get(s.name, 0.0) + s.value
    return sums


if __name__ == "__main__":
    raise SystemExit(main())
