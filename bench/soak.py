"""Soak benchmark (not a test): run the service for a long time at about half its sustainable rate and
record memory, lag and latency over time.

    .venv/bin/python bench/soak.py [--duration 600] [--rate auto|N] [--model metrics-anomaly]

Needs a broker (``make kafka-up``). ``--rate auto`` first measures the sustainable rate by letting the
service drain a backlog, then soaks at half of it. Writes ``bench/results/soak-<model>.json`` and prints a
table; the figures go in docs/RELIABILITY.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
import uuid
from pathlib import Path

import msgspec
import psutil

from service.tools.processes import start_service
from service.tools.produce import EventProducer
from service.tools.topics import TopicAdmin, Watermarks
from service.tools.verify import verify

ROOT = Path(__file__).resolve().parents[1]

PARTITIONS = 4
SAMPLE_EVERY_S = 10.0


def rss_mib(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def lag(bootstrap: str, group: str, topic: str) -> int:
    """Inputs the service group has not committed yet."""
    conf = {"bootstrap.servers": bootstrap}
    committed = TopicAdmin(conf).committed(group, topic, PARTITIONS)
    watermarks = Watermarks(conf)
    try:
        ends = watermarks.end_offsets(topic, PARTITIONS)
    finally:
        watermarks.close()
    return sum(end - max(committed.get(p, 0), 0) for p, end in ends.items())


def stats_lines(log_path: Path, since: int) -> tuple[list[dict], int]:
    data = log_path.read_bytes()
    lines = [json.loads(line) for line in data[since:].splitlines() if b'"event": "stats"' in line]
    return lines, len(data)


def measure_sustainable(bootstrap: str, admin: TopicAdmin, model: str, kind: str, log_dir: Path) -> float:
    """Drain a backlog of events and return results per second."""
    run = uuid.uuid4().hex[:6]
    topics = {"in": f"soak.cap.in.{run}", "out": f"soak.cap.out.{run}", "dlq": f"soak.cap.dlq.{run}"}
    admin.create(topics.values(), PARTITIONS)
    count = 30_000
    EventProducer({"bootstrap.servers": bootstrap}).send(topics["in"], kind, count, seed=1)
    service = start_service(
        log_dir,
        kafka__bootstrap_servers=bootstrap,
        kafka__group_id=f"soak-cap-{run}",
        input__topics=topics["in"],
        output__topic=topics["out"],
        dlq__topic=topics["dlq"],
        model__name=model,
        model__intra_op_threads="0",
    )
    try:
        start = time.monotonic()
        while lag(bootstrap, f"soak-cap-{run}", topics["in"]) > 0 and time.monotonic() - start < 300:
            time.sleep(1.0)
        return count / (time.monotonic() - start)
    finally:
        service.stop()
        admin.delete(topics.values())


def summarize(samples: list[dict]) -> dict:
    """Memory growth, worst lag and steady-state latency (the first sample includes the warm-up)."""
    steady = [s for s in samples if s["p99_ms"] is not None][1:]
    return {
        "rss_mib_first": samples[0]["rss_mib"],
        "rss_mib_last": samples[-1]["rss_mib"],
        "rss_mib_max": max(s["rss_mib"] for s in samples),
        "lag_max": max(s["lag"] for s in samples),
        "p99_ms_max_steady": max((s["p99_ms"] for s in steady), default=None),
        "p50_ms_median_steady": sorted(s["p50_ms"] for s in steady)[len(steady) // 2] if steady else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    broker = os.environ.get("MICROBATCH_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:9092")  # make soak sets it
    parser.add_argument("--bootstrap", default=broker)
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--rate", default="auto")
    parser.add_argument("--model", default="metrics-anomaly", choices=("metrics-anomaly", "log-classifier"))
    args = parser.parse_args()
    kind = "metrics" if args.model == "metrics-anomaly" else "logs"
    admin = TopicAdmin({"bootstrap.servers": args.bootstrap})
    log_dir = ROOT / ".local" / "soak"
    log_dir.mkdir(parents=True, exist_ok=True)

    sustainable = None
    if args.rate == "auto":
        sustainable = measure_sustainable(args.bootstrap, admin, args.model, kind, log_dir)
        rate: float = round(sustainable / 2)
        print(f"sustainable ~{sustainable:.0f} events/s (backlog drain); soaking at {rate}/s")
    else:
        rate = float(args.rate)

    run = uuid.uuid4().hex[:6]
    topics = {"in": f"soak.in.{run}", "out": f"soak.out.{run}", "dlq": f"soak.dlq.{run}"}
    admin.create(topics.values(), PARTITIONS)
    group = f"soak-{run}"
    service = start_service(
        log_dir,
        kafka__bootstrap_servers=args.bootstrap,
        kafka__group_id=group,
        input__topics=topics["in"],
        output__topic=topics["out"],
        dlq__topic=topics["dlq"],
        model__name=args.model,
        log__stats_interval_s=str(SAMPLE_EVERY_S),
    )
    count = int(rate * args.duration)
    producer = threading.Thread(
        target=EventProducer({"bootstrap.servers": args.bootstrap}).send,
        args=(topics["in"], kind, count, rate, 0.001, 2, None),
        daemon=True,
    )
    samples = []
    offset = 0
    try:
        time.sleep(3.0)  # let it join the group before traffic starts
        producer.start()
        start = time.monotonic()
        while producer.is_alive() and time.monotonic() - start < args.duration + 60:
            time.sleep(SAMPLE_EVERY_S)
            lines, offset = stats_lines(service.log_path, offset)
            last = lines[-1] if lines else {}
            samples.append(
                {
                    "t_s": round(time.monotonic() - start),
                    "rss_mib": round(rss_mib(service.proc.pid), 1),
                    "lag": lag(args.bootstrap, group, topics["in"]),
                    "events_per_s": last.get("events_per_s"),
                    "p50_ms": last.get("latency_p50_ms"),
                    "p99_ms": last.get("latency_p99_ms"),
                    "mean_batch": last.get("mean_batch_size"),
                }
            )
            print(samples[-1], flush=True)
        producer.join(timeout=60)
        deadline = time.monotonic() + 60
        while lag(args.bootstrap, group, topics["in"]) > 0 and time.monotonic() < deadline:
            time.sleep(1.0)
    finally:
        exit_code = service.stop()
    report = verify({"bootstrap.servers": args.bootstrap}, topics["in"], topics["out"], topics["dlq"])
    admin.delete(topics.values())
    result = summarize(samples) | {
        "model": args.model,
        "duration_s": args.duration,
        "rate_per_s": rate,
        "sustainable_per_s": round(sustainable) if sustainable else None,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "verify": report.summary(),
        "service_exit_code": exit_code,
        "samples": samples,
    }
    out = ROOT / "bench" / "results" / f"soak-{args.model}.json"
    out.write_bytes(msgspec.json.format(msgspec.json.encode(result)))
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
    return 0 if report.ok and exit_code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
