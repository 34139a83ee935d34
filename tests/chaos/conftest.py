"""Chaos-tier fixtures: a broker of the tests' own that they may stop, kill, freeze and restart.

The session broker (``kafka_bootstrap``) is shared with the integration tier and must stay healthy, so
broker faults go to this second one: its own port and state directory, topic auto-creation OFF (so a
missing topic stays missing), started once per module and stopped by PID at the end.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from service.tools.topics import TopicAdmin
from tests.support.broker import REPO_ROOT, FaultBroker, MakeTopic, make_topic_factory

FAULT_PORT = int(os.environ.get("KAFKA_FAULT_PORT", "19192"))


@pytest.fixture(scope="module")
def fault_broker() -> Iterator[FaultBroker]:
    state_dir = REPO_ROOT / ".local" / f"kafka-fault-{FAULT_PORT}"
    env = {
        **os.environ,
        "KAFKA_PORT": str(FAULT_PORT),
        "KAFKA_CONTROLLER_PORT": str(FAULT_PORT + 1),
        "KAFKA_STATE_DIR": str(state_dir),
        "KAFKA_AUTO_CREATE": "false",
    }
    broker = FaultBroker(f"127.0.0.1:{FAULT_PORT}", env, state_dir)
    broker.sh("reset")  # fresh data: earlier runs' topics must not leak in
    broker.start()
    try:
        yield broker
    finally:
        with contextlib.suppress(OSError, ValueError):  # not frozen, or already down
            broker.thaw()
        broker.sh("down")


@pytest.fixture
def fault_admin(fault_broker: FaultBroker) -> TopicAdmin:
    return TopicAdmin({"bootstrap.servers": fault_broker.bootstrap})


@pytest.fixture
def fault_topic_factory(fault_admin: TopicAdmin) -> Iterator[MakeTopic]:
    """Like ``topic_factory``, on the fault broker."""
    yield from make_topic_factory(fault_admin)
