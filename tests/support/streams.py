"""A stream of events into a service under fault, and what the broker tests read back: the producer that
keeps going while brokers are away, a probe of watermarks and commits, the service's log as records, and
the verdict. Shared by tests/chaos/test_broker_faults.py (one broker) and test_cluster_faults.py."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from service.tools.processes import Child
from service.tools.verify import VerifyReport, format_report
from tests.support.harness import start_service

PARTITIONS = 4
"""Of the input and output topics of a stream."""


class LogWatch:
    """Reads a service's JSON log incrementally; keeps every parsed record."""

    def __init__(self, service: Child) -> None:
        self._path = service.log_path
        self._pos = 0
        self._partial = b""
        self.records: list[dict[str, Any]] = []

    def refresh(self) -> None:
        with self._path.open("rb") as f:
            f.seek(self._pos)
            chunk = f.read()
            self._pos = f.tell()
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if line.startswith(b"{"):
                try:
                    self.records.append(json.loads(line))
                except ValueError:
                    continue

    def events(self, name: str, **match: Any) -> list[dict[str, Any]]:
        self.refresh()
        return [
            r for r in self.records if r.get("event") == name and all(r.get(k) == v for k, v in match.items())
        ]


class Probe:
    """One long-lived client for watermarks and the service group's commits (cheap to poll often)."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self._consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        )

    def ends(self, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
        return {
            p: self._consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }

    def committed(self, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
        parts = self._consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {p.partition: p.offset for p in parts}

    def total(self, topic: str) -> int:
        """Records in ``topic`` now; -1 while the broker cannot answer."""
        try:
            return sum(self.ends(topic).values())
        except KafkaException:
            return -1

    def committed_or_none(self, topic: str) -> dict[int, int] | None:
        """Like :meth:`committed`; None while the broker cannot answer (e.g. coordinator still loading)."""
        try:
            return self.committed(topic)
        except KafkaException:
            return None

    def committed_total(self, topic: str) -> int:
        """Offsets the service group committed over all partitions; -1 while the broker cannot answer."""
        try:
            return sum(max(o, 0) for o in self.committed(topic).values())
        except KafkaException:
            return -1

    def lag(self, topic: str) -> int:
        """Inputs not yet committed by the service group; -1 while the broker cannot answer."""
        try:
            ends, commits = self.ends(topic), self.committed(topic)
        except KafkaException:
            return -1
        return sum(e - max(commits[p], 0) for p, e in ends.items())

    def drained(self, topic: str) -> bool:
        """Every input offset committed by the service group."""
        try:
            return self.committed(topic) == self.ends(topic)
        except KafkaException:
            return False

    def close(self) -> None:
        self._consumer.close()


class StreamProducer:
    """Produces ``items`` at ``rate`` events/s from a thread until :meth:`finish`. It keeps producing while
    the broker is away: records wait in the local queue (message.timeout.ms far above any outage) and go
    out when it is back. Not idempotent on purpose: the test's own producer must not die of a fatal
    idempotence error across a SIGKILLed broker; a duplicated input just needs one more answer."""

    def __init__(self, bootstrap: str, topic: str, items: list[tuple[bytes, bytes]], rate: float) -> None:
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": False,
                "linger.ms": 5,
                "message.timeout.ms": 240_000,
            }
        )
        self._topic, self._items, self._rate = topic, items, rate
        self._stop = threading.Event()
        self.produced = 0
        self.errors: list[KafkaError] = []
        self._thread = threading.Thread(target=self._run, name="stream-producer", daemon=True)
        self._thread.start()

    def _on_delivery(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self.errors.append(err)

    def _run(self) -> None:
        start = time.monotonic()
        for i, (key, value) in enumerate(self._items):
            if i % 25 == 0 and self._stop.wait(max(0.0, start + i / self._rate - time.monotonic())):
                return
            while True:
                try:
                    self._producer.produce(self._topic, value, key, on_delivery=self._on_delivery)
                    break
                except BufferError:
                    self._producer.poll(0.1)
            self._producer.poll(0)
            self.produced += 1

    def cancel(self) -> None:
        self._stop.set()

    def finish(self, flush_timeout_s: float = 120) -> int:
        """Stop producing, deliver everything queued; return how many records were produced."""
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "stream producer thread did not stop"
        left = self._producer.flush(flush_timeout_s)
        assert left == 0, f"{left} input records still undelivered after {flush_timeout_s}s"
        assert self.errors == [], f"input deliveries failed: {self.errors[:5]}"
        return self.produced


def stream_topics(
    fault_topic_factory, *, output: str | None = None, dlq: str | None = None
) -> dict[str, str]:
    """Input and output with PARTITIONS each, DLQ with one; ``output``/``dlq`` name a topic that must not
    exist yet instead."""
    return {
        "in": fault_topic_factory(partitions=PARTITIONS, prefix="in"),
        "out": output or fault_topic_factory(partitions=PARTITIONS, prefix="out"),
        "dlq": dlq or fault_topic_factory(partitions=1, prefix="dlq"),
    }


def start_streamed(tmp_path: Path, bootstrap: str, group: str, topics: dict[str, str], **extra: str) -> Child:
    settings = {
        "kafka__bootstrap_servers": bootstrap,
        "kafka__group_id": group,
        "kafka__session_timeout_ms": "6000",
        "kafka__startup_timeout_s": "60",
        "input__topics": topics["in"],
        "output__topic": topics["out"],
        "dlq__topic": topics["dlq"],
        "model__name": "metrics-anomaly",
        "log__stats_interval_s": "1",
    }
    return start_service(tmp_path, **(settings | extra))


def stop_service(service: Child) -> int | None:
    """SIGTERM and wait (the service drains and commits); SIGKILL only if that hangs. Never raises."""
    try:
        return service.stop(signal.SIGTERM, timeout_s=60)
    except Exception:
        if service.proc.poll() is None:
            service.proc.kill()
            service.proc.wait(timeout=30)
        return None


def alive(service: Child) -> bool:
    assert service.proc.poll() is None, f"service exited with {service.proc.returncode}:\n{tail(service)}"
    return True


def tail(service: Child, lines: int = 40) -> str:
    return "\n".join(service.log().splitlines()[-lines:])


def hold(seconds: float, service: Child, also: Callable[[], None] | None = None) -> None:
    """Keep a fault in place for ``seconds`` (the scenario's duration, not a wait for a condition),
    checking twice a second that the service is still alive."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        alive(service)
        if also is not None:
            also()
        time.sleep(min(0.5, left))


def check_report(report: VerifyReport, duplicates_bound: int) -> None:
    print()
    print(format_report(report))
    print("summary:", report.summary())
    assert report.total("inputs") > 0
    assert report.total("lost") == 0, format_report(report)
    assert report.total("duplicates") <= duplicates_bound, report.summary()
