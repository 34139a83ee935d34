"""Helpers that run the real service as a process and read the real topics back. No mocks anywhere."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import msgspec
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from service.generate import EventGenerator

ROOT = Path(__file__).resolve().parents[2]

Coord = tuple[int, int]  # (partition, offset) of an input record
SERVICE_PARTITIONS = 4  # input and output partitions of the `topics` fixture


@dataclass
class ServiceProcess:
    """One `python -m service run` child, logging JSON to ``log_path``."""

    proc: subprocess.Popen
    log_path: Path

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_service(log_dir: Path, **settings: str) -> ServiceProcess:
    """Start the service with ``MICROBATCH_<KEY>`` variables from ``settings`` (``batch__max_size=...``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MICROBATCH_")}
    # Port 0: several services run at once in some tests; the bound port is in the `started` line.
    env |= {
        "MICROBATCH_LOG__FORMAT": "json",
        "MICROBATCH_MODEL__INTRA_OP_THREADS": "1",
        "MICROBATCH_METRICS__PORT": "0",
    }
    env |= {f"MICROBATCH_{k.upper()}": str(v) for k, v in settings.items()}
    log_path = log_dir / f"service-{uuid.uuid4().hex[:6]}.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "run"], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
    )
    return ServiceProcess(proc, log_path)


def start_on_topics(tmp_path, kafka_bootstrap, topics, group_id, model="metrics-anomaly", **extra):
    """The service on the `topics` fixture's topics, as group ``group_id``, serving ``model``."""
    return start_service(
        tmp_path,
        kafka__bootstrap_servers=kafka_bootstrap,
        kafka__group_id=group_id,
        input__topics=topics["in"],
        output__topic=topics["out"],
        dlq__topic=topics["dlq"],
        model__name=model,
        **extra,
    )


def produce(bootstrap: str, topic: str, items: list[tuple[bytes | None, bytes | None]]) -> list[Coord]:
    """Send (key, value) pairs in order; return each one's (partition, offset) from its delivery report."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    coords: list[Coord | None] = [None] * len(items)

    def delivered(index: int, err, msg) -> None:
        assert err is None, err
        coords[index] = (msg.partition(), msg.offset())

    for i, (key, value) in enumerate(items):
        headers = [("trace-id", f"t-{i}".encode())]
        producer.produce(topic, value, key, headers=headers, on_delivery=lambda e, m, i=i: delivered(i, e, m))
        producer.poll(0)
    assert producer.flush(30) == 0
    assert all(c is not None for c in coords)
    return coords  # type: ignore[return-value]


@dataclass(frozen=True)
class Output:
    """One record read from an output or dead-letter topic; ``header_list`` keeps order and repeats."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    header_list: list[tuple[str, bytes | None]]

    @property
    def headers(self) -> dict[str, bytes | None]:
        return dict(self.header_list)

    def header(self, name: str) -> bytes | None:
        """The first header called ``name``."""
        return next(v for k, v in self.header_list if k == name)


def read_topic(bootstrap: str, topic: str, expected: int, timeout: float = 60) -> list[Output]:
    """Read ``topic`` from the start until ``expected`` records arrived or ``timeout`` passed, then 1 s
    more so that surplus records (duplicates) are seen too."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    out: list[Output] = []
    deadline = time.monotonic() + timeout
    settle: float | None = None
    try:
        while time.monotonic() < (settle or deadline):
            for msg in consumer.consume(500, 0.2):
                if msg.error():
                    continue
                out.append(Output(msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers() or []))
            if settle is None and len(out) >= expected:
                settle = time.monotonic() + 1.0
    finally:
        consumer.close()
    return out


def source_of(output: Output) -> Coord:
    value = msgspec.json.decode(output.value)
    return (value["source"]["partition"], value["source"]["offset"])


def dlq_source_of(output: Output) -> Coord:
    return (int(output.headers["source.partition"]), int(output.headers["source.offset"]))


def counts(coords: list[Coord]) -> Counter[Coord]:
    return Counter(coords)


def assert_order_per_partition(outputs: list[Output]) -> None:
    """Within each output partition, results of any one input partition appear in input-offset order."""
    seen: dict[tuple[int, int], int] = defaultdict(lambda: -1)
    for out in sorted(outputs, key=lambda o: (o.partition, o.offset)):
        src_partition, src_offset = source_of(out)
        lane = (out.partition, src_partition)
        assert src_offset > seen[lane], f"out of order in {lane}: {src_offset} after {seen[lane]}"
        seen[lane] = src_offset


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        parts = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {p.partition: p.offset for p in parts}
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"w-{uuid.uuid4().hex}"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def wait_for(predicate, timeout: float, what: str) -> None:
    """Poll ``predicate`` (bounded) — integration tests wait on real processes, never on fixed sleeps."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def free_port() -> int:
    """A local TCP port nobody listens on right now (the OS's pick), for a service's metrics port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_get(port: int, path: str, timeout: float = 5) -> tuple[int, str]:
    """(status, body) of GET http://127.0.0.1:port/path; (0, why) when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def scrape(port: int) -> dict[str, float]:
    """Every sample of the service's /metrics: ``{'name{label="v",...}': value}`` (labels sorted)."""
    status, body = http_get(port, "/metrics")
    assert status == 200, body
    samples = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            samples[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return samples


def metrics_events(n: int, seed: int, anomaly_ratio: float = 0.05) -> list[tuple[bytes, bytes]]:
    """``n`` generated monitoring events as (key, value) pairs, keyed by host like ``microbatch produce``."""
    return [
        (e["host"].encode(), msgspec.json.encode(e)) for e in EventGenerator(seed).metrics(n, anomaly_ratio)
    ]
