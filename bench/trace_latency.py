"""Where a result's latency goes, segment by segment, at a fixed rate (not a test).

    .venv/bin/python bench/trace_latency.py KIND MODEL RATE SECONDS ['VAR=VALUE ...'] [--passthrough]

The input topic is created with ``message.timestamp.type=LogAppendTime``, so every result carries four
clocks: the send time (the bench's ``bench.sent_us`` header, passed through), the broker's append time
(the result's ``timestamps.event_ms``), and the service's own ``consumed_ms`` and ``produced_ms``; the
result record's timestamp closes the chain. Prints p50/p99/max per segment, what the slowest 1% spent in
each, and the process CPU of the service, the bench and the broker while sending. ``--passthrough`` runs
the transport baseline instead (only the total is known then). The first 5 s are left out. Needs the local
broker (``make kafka-up``), whose pid file it reads for the broker's CPU.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import msgspec
import numpy as np
import psutil

from service.tools.harness.kafka_io import SENT_HEADER, Sender
from service.tools.harness.workload import cycle, make_events
from service.tools.processes import start
from service.tools.reader import read_at_least
from service.tools.topics import TopicAdmin

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run by path: the repository root
from bench.compare_drain import BOOTSTRAP, CLIENT, PARTITIONS, service_env

SKIP_MS = 5000
BROKER_PID = Path(".local/kafka/kafka.pid")
SEGMENTS = ("sent->append", "append->consumed", "consumed->produced", "produced->record", "total")


def main(argv: list[str]) -> int:
    passthrough = "--passthrough" in argv
    args = [a for a in argv if a != "--passthrough"]
    kind, model, rate, seconds = args[0], args[1], float(args[2]), float(args[3])
    setting = args[4] if len(args) > 4 else ""
    admin = TopicAdmin(CLIENT)
    topic = f"trace-{uuid.uuid4().hex[:6]}"
    admin.create([topic], PARTITIONS, config={"message.timestamp.type": "LogAppendTime"})
    admin.create([topic + "-out", topic + "-out-dlq"], PARTITIONS)
    argv_child = ("bench.baselines", "passthrough") if passthrough else ("service", "run")
    env = service_env(topic, topic + "-out", model, setting)
    child = start(argv_child, env, Path(f"/tmp/{topic}.log"))
    try:
        sender = Sender({"bootstrap.servers": BOOTSTRAP, "linger.ms": 5, "compression.type": "lz4"})
        pool = make_events(kind, 20_000, 7)
        time.sleep(6)  # start-up: model load, warm-up, group join
        sender.send(topic, pool[:50])
        procs = {"service": psutil.Process(child.pid), "bench": psutil.Process()}
        if BROKER_PID.is_file():
            procs["broker"] = psutil.Process(int(BROKER_PID.read_text().split()[0]))
        for proc in procs.values():
            proc.cpu_percent()
        count = int(rate * seconds)
        sender.send(topic, cycle(pool, count), rate)
        cpu = {name: round(proc.cpu_percent()) for name, proc in procs.items()}
        rows = read_rows(topic + "-out", count + 50, passthrough)
    finally:
        child.stop()
    admin.delete([topic, topic + "-out", topic + "-out-dlq"])
    report(np.array(sorted(rows)), f"{'passthrough' if passthrough else 'service'} {setting}", rate, cpu)
    return 0


def read_rows(topic: str, count: int, passthrough: bool) -> list[tuple[float, ...]]:
    """(sent, appended, consumed, produced, record, batch size) in ms per result with a send time."""
    rows: list[tuple[float, ...]] = []
    for msg in read_at_least(CLIENT, topic, count, timeout_s=60, settle_s=0):
        sent = dict(msg.headers or []).get(SENT_HEADER)
        if sent is None:
            continue
        record = msg.timestamp_ms or 0
        if passthrough:
            rows.append((int(sent) / 1000, record, record, record, record, 1))
            continue
        value = msgspec.json.decode(msg.value or b"")
        ts = value["timestamps"]
        rows.append(
            (
                int(sent) / 1000,
                ts["event_ms"],
                ts["consumed_ms"],
                ts["produced_ms"],
                record,
                value["batch_size"],
            )
        )
    return rows


def report(rows: np.ndarray, title: str, rate: float, cpu: dict[str, int]) -> None:
    rows = rows[rows[:, 0] >= rows[0, 0] + SKIP_MS]
    sent, appended, consumed, produced, record, sizes = rows.T
    segments = dict(
        zip(
            SEGMENTS,
            (appended - sent, consumed - appended, produced - consumed, record - produced, record - sent),
            strict=True,
        )
    )
    print(f"{title.strip()}: {len(rows)} results at {rate:g}/s, mean batch {sizes.mean():.1f}, CPU % {cpu}")
    worst = segments["total"] >= np.percentile(segments["total"], 99)
    for name, values in segments.items():
        p50, p99 = np.percentile(values, [50, 99])
        print(
            f"  {name:20} p50 {p50:7.1f}  p99 {p99:7.1f}  max {values.max():7.1f}  "
            f"slowest 1%: {values[worst].mean():7.1f} ms"
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
