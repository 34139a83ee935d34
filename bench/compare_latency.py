"""End-to-end latency of the service at a fixed rate under several settings, one after another (not a test).

    .venv/bin/python bench/compare_latency.py KIND MODEL RATE SECONDS 'VAR=VALUE ...' ['VAR=VALUE ...' ...]

For each setting string: a fresh topic, the service started on it, then ``microbatch produce`` at RATE
events/s for SECONDS. Latency per result = the result record's Kafka timestamp minus the input's
(``timestamps.event_ms``); the first 2 s of events are left out (the producer's own start-up). Prints
p50/p95/p99 and the mean batch size. An empty string runs the defaults. Needs the local broker.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import msgspec
import numpy as np

from service.tools.processes import start
from service.tools.reader import read_at_least
from service.tools.topics import TopicAdmin

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run by path: the repository root
from bench.compare_drain import BIN, CLIENT, PARTITIONS, service_env

SKIP_MS = 2000


def run(admin: TopicAdmin, kind: str, model: str, rate: float, seconds: float, setting: str) -> str:
    topic = f"latency-{uuid.uuid4().hex[:6]}"
    admin.create([topic, topic + "-out", topic + "-out-dlq"], PARTITIONS)
    count = int(rate * seconds)
    child = start(
        ("service", "run"), service_env(topic, topic + "-out", model, setting), Path(f"/tmp/{topic}.log")
    )
    try:
        time.sleep(6)  # start-up: model load, warm-up, group join
        produce = [BIN, "produce", "--kind", kind, "--topic", topic, "--count", str(count)]
        subprocess.run([*produce, "--rate", str(rate), "--seed", "5"], check=True, capture_output=True)
        samples = read_results(topic + "-out", count)
    finally:
        child.stop()
    admin.delete([topic, topic + "-out", topic + "-out-dlq"])
    samples.sort()
    start_ms = samples[0][0] + SKIP_MS
    latency = np.array([lat for event, lat, _ in samples if event >= start_ms])
    sizes = np.array([size for event, _, size in samples if event >= start_ms])
    p50, p95, p99 = np.percentile(latency, [50, 95, 99])
    return f"n={len(latency)} p50={p50:.0f} p95={p95:.0f} p99={p99:.0f} ms mean_batch={sizes.mean():.1f}"


def read_results(topic: str, count: int) -> list[tuple[int, int, int]]:
    """(event_ms, latency_ms, batch_size) of every result, waiting up to a minute for all of them."""
    samples: list[tuple[int, int, int]] = []
    for record in read_at_least(CLIENT, topic, count, timeout_s=60, settle_s=0):
        value = msgspec.json.decode(record.value or b"")
        event = value["timestamps"]["event_ms"]
        samples.append((event, (record.timestamp_ms or 0) - event, value["batch_size"]))
    return samples


def main(argv: list[str]) -> int:
    kind, model, rate, seconds, settings = argv[0], argv[1], float(argv[2]), float(argv[3]), argv[4:] or [""]
    admin = TopicAdmin(CLIENT)
    for setting in settings:
        print(f"{setting or '(defaults)':60} {run(admin, kind, model, rate, seconds, setting)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
