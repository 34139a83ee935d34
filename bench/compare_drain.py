"""Drain throughput of the service under several settings, side by side (not a test).

    .venv/bin/python bench/compare_drain.py KIND MODEL EVENTS REPEATS 'VAR=VALUE ...' ['VAR=VALUE ...' ...]

Loads EVENTS generated events (``logs`` or ``metrics``) into a fresh 4-partition topic, then runs the
service once per setting string per repeat, interleaved (so background load hits every setting alike), each
into its own output topic, and prints events/s per run and the median per setting. Throughput is measured
from the output records' timestamps, from the 1st percentile (start-up left out) to the last. An empty
string runs the defaults; ``COMMAND=backfill`` in a setting runs ``microbatch backfill`` over the whole topic
instead of the service. ``INSTANCES=N`` runs N replicas in one group (a consumer group, or a share group
with ``MICROBATCH_KAFKA__GROUP_TYPE=share``) on a fresh input topic of its own, started first: the events
are produced once every replica logged ``started`` and the group settled, so that no replica's start-up
(its model's warm-up) competes with the others' drain; ``PIN=1`` holds replica i to CPU i (a pod with
one CPU each), so that replicas scale by cores rather than share them. ``DRAIN_PARTITIONS``
(environment, default 4): the input topics' partitions. Needs the local broker (``make kafka-up``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from statistics import median

from service.config import KafkaSettings
from service.tools.processes import settings_env, start
from service.tools.reader import read_at_least
from service.tools.topics import TopicAdmin, Watermarks

BOOTSTRAP = os.environ.get(KafkaSettings.env("bootstrap_servers"), "127.0.0.1:9092")
CLIENT = {"bootstrap.servers": BOOTSTRAP}
PARTITIONS = int(os.environ.get("DRAIN_PARTITIONS", "4"))
SETTLE_S = 5.0  # after the last replica started: its members join, the group assigns
PSEUDO = ("COMMAND", "INSTANCES", "PIN")  # settings of this script, not of the service
BIN = os.path.join(os.path.dirname(sys.executable), "microbatch")


def service_env(topic: str, out: str, model: str, setting: str) -> dict[str, str]:
    """The service on ``topic`` -> ``out`` serving ``model``, plus the ``VAR=VALUE ...`` of ``setting``."""
    env = settings_env(
        {
            "kafka__bootstrap_servers": BOOTSTRAP,
            "input__topics": topic,
            "output__topic": out,
            "dlq__topic": out + "-dlq",
            "model__name": model,
            "kafka__group_id": out,
            "log__format": "json",
            "metrics__port": 0,
        }
    )
    return env | {k: v for k, v in _pairs(setting).items() if k not in PSEUDO}


def _pairs(setting: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in setting.split())


def drain(admin: TopicAdmin, topic: str, events: int, model: str, setting: str, kind: str) -> float:
    out = f"{topic}-{uuid.uuid4().hex[:4]}"
    admin.create([out, out + "-dlq"], PARTITIONS)
    offline = _pairs(setting).get("COMMAND") == "backfill"
    command = ("service", "backfill", "--job", out) if offline else ("service", "run")
    replicas = _pairs(setting).get("INSTANCES")
    if replicas is not None:  # started first, on a topic of their own
        topic = f"{out}-in"
        admin.create([topic], PARTITIONS)
    env = service_env(topic, out, model, setting)
    children = [start(command, env, Path(f"/tmp/{out}-{i}.log")) for i in range(int(replicas or 1))]
    if _pairs(setting).get("PIN") == "1":
        cpus = sorted(os.sched_getaffinity(0))
        for i, child in enumerate(children):  # before its threads start: they inherit it
            os.sched_setaffinity(child.pid, {cpus[i % len(cpus)]})
    if replicas is not None:
        while not all(child.events("started") for child in children):
            time.sleep(0.2)
        time.sleep(SETTLE_S)
        _produce(kind, topic, events)
    watermarks = Watermarks(CLIENT)
    try:
        while watermarks.count(out, PARTITIONS) < events and any(child.alive() for child in children):
            time.sleep(0.2)
    finally:
        watermarks.close()
        for child in children:
            child.stop()
    outputs = read_at_least(CLIENT, out, events, timeout_s=600, settle_s=0)
    stamps = sorted(r.timestamp_ms or 0 for r in outputs)
    first = len(stamps) // 100
    admin.delete([out, out + "-dlq", *([topic] if replicas is not None else [])])
    return (len(stamps) - first) / max((stamps[-1] - stamps[first]) / 1000, 1e-3)


def _produce(kind: str, topic: str, events: int) -> None:
    produce = [BIN, "produce", "--kind", kind, "--topic", topic, "--count", str(events), "--seed", "3"]
    subprocess.run(produce, check=True, capture_output=True)


def main(argv: list[str]) -> int:
    kind, model, events, repeats, settings = argv[0], argv[1], int(argv[2]), int(argv[3]), argv[4:] or [""]
    admin = TopicAdmin(CLIENT)
    topic = f"drain-{uuid.uuid4().hex[:6]}"
    admin.create([topic], PARTITIONS)
    _produce(kind, topic, events)
    rates: dict[str, list[float]] = {s: [] for s in settings}
    for _ in range(repeats):
        for setting in settings:
            rates[setting].append(drain(admin, topic, events, model, setting, kind))
            print(f"{setting or '(defaults)'}: {rates[setting][-1]:,.0f} events/s", flush=True)
    admin.delete([topic])
    for setting, values in rates.items():
        runs = [round(v) for v in values]
        print(f"median {median(values):>10,.0f} events/s  {setting or '(defaults)'}  {runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
