"""Fixtures for tests against a real Kafka broker (never a mock): integration and chaos tiers.

The broker is the single-node KRaft broker of ``deploy/kafka-local/kafka.sh``, started once per
session unless ``KAFKA_BOOTSTRAP_SERVERS`` points at one already. A broker this session started
is stopped at the end; one that was already running is left running. The helpers behind these fixtures
live in ``tests/support/``.
"""

from __future__ import annotations

import os
import re
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

# Before anything in the session runs torch: the model rebuild (tests/models) reproduces the committed
# weights only on the kernels they were built with (``BUILD_ISA`` in modelbuild/, which says why), and
# oneDNN fixes its choice at its first use, whichever test that is.
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")

import pytest

from service.engine.providers import cuda_problem
from service.tools.topics import TopicAdmin
from tests.support.broker import (
    KAFKA_DOWN_TIMEOUT_S,
    KAFKA_SH,
    MakeTopic,
    external_bootstrap,
    kafka_sh,
    make_topic_factory,
)

TESTS_DIR = Path(__file__).resolve().parent
TIER_MARKERS = {"integration": pytest.mark.integration, "chaos": pytest.mark.chaos}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/integration with ``integration``, under tests/chaos with ``chaos``;
    skip those marked ``cuda`` where CUDA cannot serve, with the engine's own reason (no GPU here, or
    which library is missing)."""
    cuda_marked = [item for item in items if item.get_closest_marker("cuda")]
    why_not = cuda_problem() if cuda_marked else None
    for item in items:
        path = Path(str(item.path)).resolve()
        for tier, marker in TIER_MARKERS.items():
            if path.is_relative_to(TESTS_DIR / tier):
                item.add_marker(marker)
    for item in cuda_marked:
        if why_not is not None:
            item.add_marker(pytest.mark.skip(reason=f"no GPU to run on: {why_not}"))


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers of a running broker, e.g. ``"127.0.0.1:9092"``."""
    external = external_bootstrap()
    if external:
        yield external
        return

    port = os.environ.get("KAFKA_PORT", "9092")
    env = {**os.environ, "KAFKA_PORT": port}
    # status: 0 running and answering, 1 running but not answering yet, 3 stopped.
    was_stopped = kafka_sh("status", env, timeout=30).returncode == 3
    up = kafka_sh("up", env)
    if up.returncode != 0:
        pytest.fail(f"{KAFKA_SH} up failed (exit {up.returncode}):\n{up.stderr}{up.stdout}", pytrace=False)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        if was_stopped:
            down = kafka_sh("down", env, timeout=KAFKA_DOWN_TIMEOUT_S)
            if down.returncode != 0:
                warnings.warn(f"{KAFKA_SH} down failed: {down.stderr}", stacklevel=1)


@pytest.fixture(scope="session")
def admin(kafka_bootstrap: str) -> TopicAdmin:
    return TopicAdmin({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def topic_factory(admin: TopicAdmin) -> Iterator[MakeTopic]:
    """``make_topic(partitions=1, prefix="t", *, config=None) -> str`` on the session broker."""
    yield from make_topic_factory(admin)


@pytest.fixture
def group_id(request: pytest.FixtureRequest) -> str:
    """A consumer group id unique to this test (and this run)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", request.node.name)[:60]
    return f"g-{name}-{uuid.uuid4().hex[:8]}"
