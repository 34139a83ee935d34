"""Helpers that run the real service as a process and read the real topics back. No mocks anywhere.

Processes, topic reading and topic admin are the tools' own (``service.tools.processes``, ``reader``,
``topics``); what is here is the tests' view of them.
"""

from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest
from confluent_kafka import Message
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from prometheus_client.parser import text_string_to_metric_families

from service.tools.generate import EventGenerator
from service.tools.harness.measure import summary
from service.tools.processes import Child
from service.tools.processes import start_service as start_child
from service.tools.produce import Deliveries
from service.tools.reader import read_at_least
from service.tools.topics import TopicAdmin, Watermarks

ROOT = Path(__file__).resolve().parents[2]

Coord = tuple[int, int]  # (partition, offset) of an input record
SERVICE_PARTITIONS = 4  # input and output partitions of the `topics` fixture


def needs_installed(missing: str | None) -> None:
    """Skip the test when a Debian package it drives is missing (``missing``: why, with the install line),
    except in CI, which installs them (``.ci/run``): there the test must run, so it fails instead."""
    if missing:
        assert not os.environ.get("CI"), missing
        pytest.skip(missing)


def start_service(log_dir: Path, **settings: str) -> Child:
    """Start the service with ``MICROBATCH_<KEY>`` variables from ``settings`` (``batch__max_size=...``),
    none of the caller's, from the repository root (so ``tests.support.faulty`` can be loaded)."""
    return start_child(log_dir, cwd=ROOT, **settings)


def start_on_topics(tmp_path, kafka_bootstrap, topics, group_id, model="metrics-anomaly", **extra):
    """The service on the `topics` fixture's topics, as group ``group_id``, serving the reference ``model``
    (None: the model the settings in ``extra`` choose, e.g. ``model__path``)."""
    return start_service(
        tmp_path,
        kafka__bootstrap_servers=kafka_bootstrap,
        kafka__group_id=group_id,
        input__topics=topics["in"],
        output__topic=topics["out"],
        dlq__topic=topics["dlq"],
        **({"model__name": model} if model else {}),
        **extra,
    )


def start_backfill(
    log_dir: Path, bootstrap: str, topics: dict[str, str], job: str, *flags: str, **settings: object
) -> Child:
    """``microbatch backfill --job job *flags`` on the `topics` fixture's topics, with the test defaults of
    ``start_service`` and ``settings`` over them (``model__name`` defaults to metrics-anomaly)."""
    on_topics = {
        "model__name": "metrics-anomaly",
        "kafka__bootstrap_servers": bootstrap,
        "input__topics": topics["in"],
        "output__topic": topics["out"],
        "dlq__topic": topics["dlq"],
    }
    command = ("backfill", "--job", job, *flags)
    return start_child(log_dir, cwd=ROOT, name=f"backfill-{job}", command=command, **(on_topics | settings))


def summary_of(child: Child) -> dict[str, Any]:
    """The JSON summary a backfill prints last on stdout."""
    found = summary(child.log_lines())
    assert found is not None, child.log()[-3000:]
    return found


def produce(bootstrap: str, topic: str, items: list[tuple[bytes | None, bytes | None]]) -> list[Coord]:
    """Send (key, value) pairs in order; return each one's (partition, offset) from its delivery report."""
    out = Deliveries({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    coords: list[Coord | None] = [None] * len(items)

    def delivered(index: int, msg: Message) -> None:
        coords[index] = (msg.partition(), msg.offset())

    for i, (key, value) in enumerate(items):
        out.send(topic, value, key, [("trace-id", f"t-{i}".encode())], partial(delivered, i))
    out.flush(f"producing the test input to {topic}", 30)
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
    messages = read_at_least({"bootstrap.servers": bootstrap}, topic, expected, timeout)
    return [Output(r.partition, r.offset, r.key, r.value, r.headers or []) for r in messages]


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
    return TopicAdmin({"bootstrap.servers": bootstrap}).committed(group, topic, partitions)


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    watermarks = Watermarks({"bootstrap.servers": bootstrap})
    try:
        return watermarks.end_offsets(topic, partitions)
    finally:
        watermarks.close()


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
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


def share_group_configs(bootstrap: str, group: str, **configs: str) -> None:
    """Set a share group's configs (``share_delivery_count_limit="2"``: ``share.delivery.count.limit``)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [
        ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
        for name, value in configs.items()
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result()
