"""``microbatch demo``: both reference models, real broker, generated traffic, then a summary.

It creates its own topics, runs one service process per model, produces traffic (with a little poison),
waits until every input has an output, stops the services with SIGTERM, reads the output topics back and
prints what happened. It leaves no process running and, unless asked, no topics behind.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from service.config import Settings
from service.produce import ProduceReport, produce_events
from service.verify import VerifyReport, read_to_end, verify

MODELS = {"metrics-anomaly": "metrics", "log-classifier": "logs"}
_DEMO_MAX_VALUE_BYTES = 65_536


@dataclass
class ModelRun:
    """One model's topics, process and what came out of it."""

    model: str
    kind: str
    topics: dict[str, str]
    log_path: Path
    process: subprocess.Popen | None = None
    report: ProduceReport = field(default_factory=ProduceReport)
    results: list[dict] = field(default_factory=list)
    dead: Counter[str] = field(default_factory=Counter)
    verdict: VerifyReport | None = None
    exit_code: int | None = None


def run_demo(settings: Settings, args: argparse.Namespace) -> int:
    bootstrap = settings.kafka.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.list_topics(timeout=10)
    except KafkaException:
        print(f"no Kafka broker answers at {bootstrap}; start one with `make kafka-up`", file=sys.stderr)
        return 1
    run_id = uuid.uuid4().hex[:8]
    log_dir = Path(".local/demo")
    log_dir.mkdir(parents=True, exist_ok=True)
    runs = [
        ModelRun(
            model,
            kind,
            {r: f"demo.{kind}.{r}.{run_id}" for r in ("in", "results", "dlq")},
            log_dir / f"{model}.{run_id}.log",
        )
        for model, kind in MODELS.items()
    ]
    all_topics = [t for r in runs for t in r.topics.values()]
    _create_topics(admin, all_topics, args.partitions)
    print(f"demo {run_id}: {args.duration:.0f}s at {args.rate:.0f} events/s per model, broker {bootstrap}")
    try:
        for run in runs:
            run.process = _start_service(run, bootstrap, run_id)
        for run in runs:
            _wait_until_assigned(run, timeout_s=60)
        _produce_all(runs, settings, args)
        _wait_for_outputs(runs, {"bootstrap.servers": bootstrap}, timeout_s=60)
    finally:
        for run in runs:
            run.exit_code = _stop_service(run.process)
        if not args.keep_topics:
            admin.delete_topics(all_topics, operation_timeout=10)
    for run in runs:
        _print_summary(run)
    ok = all(r.exit_code == 0 and r.verdict is not None and r.verdict.ok for r in runs)
    print("demo finished: " + ("every input has a result or a dead letter" if ok else "PROBLEMS, see above"))
    return 0 if ok else 1


def _create_topics(admin: AdminClient, topics: list[str], partitions: int) -> None:
    futures = admin.create_topics([NewTopic(t, partitions, 1) for t in topics], operation_timeout=10)
    for future in futures.values():
        future.result(timeout=30)


def _start_service(run: ModelRun, bootstrap: str, run_id: str) -> subprocess.Popen:
    env = os.environ | {
        "MICROBATCH_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "MICROBATCH_KAFKA__GROUP_ID": f"demo-{run.model}-{run_id}",
        "MICROBATCH_INPUT__TOPICS": run.topics["in"],
        "MICROBATCH_INPUT__MAX_VALUE_BYTES": str(_DEMO_MAX_VALUE_BYTES),
        "MICROBATCH_OUTPUT__TOPIC": run.topics["results"],
        "MICROBATCH_DLQ__TOPIC": run.topics["dlq"],
        "MICROBATCH_MODEL__NAME": run.model,
        "MICROBATCH_LOG__FORMAT": "json",
        "MICROBATCH_METRICS__PORT": "0",  # two services at once; each logs its port in `started`
        "MICROBATCH_LOG__STATS_INTERVAL_S": "5",
        # Two services and a broker share the cores; one inference thread each avoids oversubscription.
        "MICROBATCH_MODEL__INTRA_OP_THREADS": "1",
    }
    log = run.log_path.open("wb")
    return subprocess.Popen([sys.executable, "-m", "service", "run"], env=env, stderr=log, stdout=log)


def _wait_until_assigned(run: ModelRun, timeout_s: float) -> None:
    """Traffic starts only once the service owns its partitions, so start-up is not counted as latency."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if b'"partitions_assigned"' in run.log_path.read_bytes():
            return
        if run.process is not None and run.process.poll() is not None:
            raise RuntimeError(f"{run.model} service exited early; see {run.log_path}")
        time.sleep(0.2)
    raise RuntimeError(f"{run.model} service got no partitions within {timeout_s:.0f}s; see {run.log_path}")


def _produce_all(runs: list[ModelRun], settings: Settings, args: argparse.Namespace) -> None:
    count = int(args.rate * args.duration)
    errors: list[BaseException] = []

    def produce(run: ModelRun) -> None:
        try:
            run.report = produce_events(
                settings.kafka.producer_config(),
                run.topics["in"],
                run.kind,
                count,
                args.rate,
                args.poison_ratio,
                seed=sorted(MODELS).index(run.model) + 1,
                too_large_bytes=_DEMO_MAX_VALUE_BYTES + 1024,
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(run,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _wait_for_outputs(runs: list[ModelRun], client_conf: dict, timeout_s: float) -> None:
    """Poll the verifier until no input is missing an answer (or ``timeout_s``), then read what came out."""
    deadline = time.monotonic() + timeout_s
    for run in runs:
        while True:
            run.verdict = verify(client_conf, run.topics["in"], run.topics["results"], run.topics["dlq"])
            if run.verdict.total("lost") == 0 or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        decoder = msgspec.json.Decoder()
        run.results = [decoder.decode(m.value()) for m in read_to_end(client_conf, run.topics["results"])]
        for msg in read_to_end(client_conf, run.topics["dlq"]):
            run.dead[dict(msg.headers() or []).get("error.reason", b"?").decode()] += 1


def _missing(run: ModelRun) -> int:
    return run.verdict.total("lost") if run.verdict else run.report.sent


def _stop_service(process: subprocess.Popen | None) -> int | None:
    if process is None:
        return None
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()
    return process.returncode


def _print_summary(run: ModelRun) -> None:
    results = run.results
    print(f"\n== {run.model} ({run.kind})  service exit code {run.exit_code}  log {run.log_path}")
    print(
        f"events in {run.report.sent}   results {len(results)}   dead letters {sum(run.dead.values())}"
        f"   missing {_missing(run)}   duplicates {run.verdict.total('duplicates') if run.verdict else '?'}"
    )
    if run.dead:
        print(f"dead letters by reason: {dict(sorted(run.dead.items()))}")
    if not results:
        return
    stamps = np.array([[r["timestamps"]["event_ms"], r["timestamps"]["produced_ms"]] for r in results])
    latency = stamps[:, 1] - stamps[:, 0]
    span_s = max((stamps[:, 1].max() - stamps[:, 1].min()) / 1000, 1e-3)
    p50, p99 = np.percentile(latency, [50, 99])
    print(
        f"throughput {len(results) / span_s:.0f} results/s   end-to-end latency p50 {p50:.0f} ms"
        f"   p99 {p99:.0f} ms   provider {results[0]['model']['provider']}"
    )
    sizes = Counter(r["batch_size"] for r in results)
    print("batch sizes (items per batch size): " + "  ".join(f"{k}:{v}" for k, v in sorted(sizes.items())))
    _print_result_breakdown(run.model, results)


def _print_result_breakdown(model: str, results: list[dict]) -> None:
    if model == "log-classifier":
        labels = Counter(r["result"].get("label") for r in results)
        print("labels: " + "  ".join(f"{k}:{v}" for k, v in labels.most_common()))
    else:
        flagged = sum(bool(r["result"].get("is_anomaly")) for r in results)
        print(f"anomalies flagged: {flagged} of {len(results)} ({100 * flagged / len(results):.1f}%)")
