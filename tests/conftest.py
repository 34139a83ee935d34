"""Fixtures for tests against a real Kafka broker (never a mock): integration and chaos tiers.

The broker is the single-node KRaft broker of ``deploy/kafka-local/kafka.sh``, started once per
session unless ``KAFKA_BOOTSTRAP_SERVERS`` points at one already. A broker this session started
is stopped at the end; one that was already running is left running.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
TIER_MARKERS = {"integration": pytest.mark.integration, "chaos": pytest.mark.chaos}
KAFKA_SH = REPO_ROOT / "deploy" / "kafka-local" / "kafka.sh"

# Cold start fetches the jars with Maven; warm start takes a few seconds.
KAFKA_UP_TIMEOUT_S = 240
KAFKA_DOWN_TIMEOUT_S = 60
TOPIC_READY_TIMEOUT_S = 30.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/integration with ``integration``, under tests/chaos with ``chaos``."""
    for item in items:
        path = Path(str(item.path)).resolve()
        for tier, marker in TIER_MARKERS.items():
            if path.is_relative_to(TESTS_DIR / tier):
                item.add_marker(marker)


def _kafka_sh(command: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(KAFKA_SH), command],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers of a running broker, e.g. ``"127.0.0.1:9092"``."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if external:
        yield external
        return

    port = os.environ.get("KAFKA_PORT", "9092")
    env = {**os.environ, "KAFKA_PORT": port}
    # status: 0 running and answering, 1 running but not answering yet, 3 stopped.
    was_stopped = _kafka_sh("status", env, timeout=30).returncode == 3
    up = _kafka_sh("up", env, timeout=KAFKA_UP_TIMEOUT_S)
    if up.returncode != 0:
        pytest.fail(
            f"{KAFKA_SH} up failed (exit {up.returncode}):\n{up.stderr}{up.stdout}",
            pytrace=False,
        )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        if was_stopped:
            down = _kafka_sh("down", env, timeout=KAFKA_DOWN_TIMEOUT_S)
            if down.returncode != 0:
                warnings.warn(f"{KAFKA_SH} down failed: {down.stderr}", stacklevel=1)


@pytest.fixture(scope="session")
def admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


def _wait_topic_ready(admin: AdminClient, topic: str, partitions: int, timeout: float) -> None:
    """Wait until metadata shows every partition of ``topic`` with a leader."""
    deadline = time.monotonic() + timeout
    last = "no metadata yet"
    while True:
        try:
            md = admin.list_topics(topic=topic, timeout=5)
            tmd = md.topics.get(topic)
            if tmd is None:
                last = "topic missing from metadata"
            elif tmd.error is not None:
                last = f"topic error {tmd.error}"
            elif len(tmd.partitions) != partitions:
                last = f"{len(tmd.partitions)}/{partitions} partitions in metadata"
            elif any(p.leader < 0 or p.error is not None for p in tmd.partitions.values()):
                last = "a partition has no leader yet"
            else:
                return
        except KafkaException as exc:
            last = f"metadata request failed: {exc}"
        if time.monotonic() >= deadline:
            raise TimeoutError(f"topic {topic!r} not ready after {timeout}s: {last}")
        time.sleep(0.1)


def make_topic_factory(admin: AdminClient) -> Iterator[Callable[..., str]]:
    """Yield ``make_topic(partitions=1, prefix="t", *, config=None) -> str``, creating a new, ready,
    uniquely named topic on ``admin``'s cluster; delete every topic it made afterwards (best effort: a
    broker a test left stopped just keeps them)."""
    created: list[str] = []

    def make_topic(partitions: int = 1, prefix: str = "t", *, config: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        new = NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(config or {}))
        futures = admin.create_topics([new], operation_timeout=30, request_timeout=30)
        futures[name].result(timeout=60)
        created.append(name)
        _wait_topic_ready(admin, name, partitions, TOPIC_READY_TIMEOUT_S)
        return name

    yield make_topic

    if not created:
        return
    futures = admin.delete_topics(created, operation_timeout=30, request_timeout=30)
    for name, future in futures.items():
        try:
            future.result(timeout=60)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                warnings.warn(f"could not delete topic {name}: {exc}", stacklevel=1)


@pytest.fixture
def topic_factory(admin: AdminClient) -> Iterator[Callable[..., str]]:
    """``make_topic(partitions=1, prefix="t", *, config=None) -> str`` on the session broker."""
    yield from make_topic_factory(admin)


@pytest.fixture
def group_id(request: pytest.FixtureRequest) -> str:
    """A consumer group id unique to this test (and this run)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", request.node.name)[:60]
    return f"g-{name}-{uuid.uuid4().hex[:8]}"
