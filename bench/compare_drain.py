"""Drain throughput of the service under several settings, side by side (not a test).

    .venv/bin/python bench/compare_drain.py KIND MODEL EVENTS REPEATS 'VAR=VALUE ...' ['VAR=VALUE ...' ...]

Loads EVENTS generated events (``logs`` or ``metrics``) into a fresh 4-partition topic, then runs the
service once per setting string per repeat, interleaved (so background load hits every setting alike), each
into its own output topic, and prints events/s per run and the median per setting. Throughput is measured
from the output records' timestamps, from the 1st percentile (start-up left out) to the last. An empty
string runs the defaults. Needs the local broker (``make kafka-up``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from statistics import median

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BOOTSTRAP = os.environ.get("MICROBATCH_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:9092")
PARTITIONS = 4
BIN = os.path.join(os.path.dirname(sys.executable), "microbatch")


def create(admin: AdminClient, *topics: str) -> None:
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).values():
        future.result()


def end_offsets(consumer: Consumer, topic: str) -> int:
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in range(4))
    except Exception:  # a topic this new may not have a leader yet
        return 0


def output_timestamps(topic: str, count: int) -> list[int]:
    reader = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": f"read-{topic}"})
    reader.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    stamps: list[int] = []
    while len(stamps) < count:
        stamps += [m.timestamp()[1] for m in reader.consume(10_000, 2.0) if m.error() is None]
    reader.close()
    return sorted(stamps)


def service_env(topic: str, out: str, model: str, setting: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MICROBATCH_")}
    env |= {
        "MICROBATCH_KAFKA__BOOTSTRAP_SERVERS": BOOTSTRAP,
        "MICROBATCH_INPUT__TOPICS": topic,
        "MICROBATCH_OUTPUT__TOPIC": out,
        "MICROBATCH_DLQ__TOPIC": out + "-dlq",
        "MICROBATCH_MODEL__NAME": model,
        "MICROBATCH_KAFKA__GROUP_ID": out,
        "MICROBATCH_LOG__FORMAT": "json",
        "MICROBATCH_METRICS__PORT": "0",
    }
    env |= dict(pair.split("=", 1) for pair in setting.split())
    return env


def drain(admin: AdminClient, probe: Consumer, topic: str, events: int, model: str, setting: str) -> float:
    out = f"{topic}-{uuid.uuid4().hex[:4]}"
    create(admin, out, out + "-dlq")
    with open(f"/tmp/{out}.log", "w") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "service", "run"],
            env=service_env(topic, out, model, setting),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 600
        while end_offsets(probe, out) < events and time.monotonic() < deadline:
            time.sleep(0.2)
        child.terminate()
        child.wait()
    stamps = output_timestamps(out, events)
    first = len(stamps) // 100
    admin.delete_topics([out, out + "-dlq"])
    return (len(stamps) - first) / max((stamps[-1] - stamps[first]) / 1000, 1e-3)


def main(argv: list[str]) -> int:
    kind, model, events, repeats, settings = argv[0], argv[1], int(argv[2]), int(argv[3]), argv[4:] or [""]
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    probe = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "compare-drain-probe"})
    topic = f"drain-{uuid.uuid4().hex[:6]}"
    create(admin, topic)
    produce = [BIN, "produce", "--kind", kind, "--topic", topic, "--count", str(events), "--seed", "3"]
    subprocess.run(produce, check=True, capture_output=True)
    rates: dict[str, list[float]] = {s: [] for s in settings}
    for _ in range(repeats):
        for setting in settings:
            rates[setting].append(drain(admin, probe, topic, events, model, setting))
            print(f"{setting or '(defaults)'}: {rates[setting][-1]:,.0f} events/s", flush=True)
    admin.delete_topics([topic])
    for setting, values in rates.items():
        runs = [round(v) for v in values]
        print(f"median {median(values):>10,.0f} events/s  {setting or '(defaults)'}  {runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
