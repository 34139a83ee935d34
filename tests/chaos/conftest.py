"""Chaos-tier fixtures: a broker of the tests' own that they may stop, kill, freeze and restart, and a
three-node cluster whose nodes they may stop, kill, freeze and restart one at a time.

The session broker (``kafka_bootstrap``) is shared with the integration tier and must stay healthy, so
broker faults go to these: each with its own ports and state directory, topic auto-creation OFF (so a
missing topic stays missing), started once per module and stopped by PID at the end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from service.tools.topics import TopicAdmin
from tests.support.broker import (
    REPO_ROOT,
    Cluster,
    FaultBroker,
    MakeTopic,
    checked_kafka_sh,
    make_topic_factory,
    private_broker,
)

FAULT_PORT = int(os.environ.get("KAFKA_FAULT_PORT", "19192"))
# The cluster's nodes listen on CLUSTER_PORT+2(i-1) (PLAINTEXT) and the port above it (CONTROLLER).
CLUSTER_PORT = int(os.environ.get("KAFKA_CLUSTER_PORT", "19492"))
CLUSTER_SIZE = 3


@pytest.fixture(scope="module")
def fault_broker() -> Iterator[FaultBroker]:
    with private_broker(FAULT_PORT, "fault", KAFKA_AUTO_CREATE="false") as broker:
        yield broker


@pytest.fixture
def fault_admin(fault_broker: FaultBroker) -> TopicAdmin:
    return TopicAdmin({"bootstrap.servers": fault_broker.bootstrap})


@pytest.fixture
def fault_topic_factory(fault_admin: TopicAdmin) -> Iterator[MakeTopic]:
    """Like ``topic_factory``, on the fault broker."""
    yield from make_topic_factory(fault_admin)


@pytest.fixture(scope="module")
def kafka_cluster() -> Iterator[Cluster]:
    """Three KRaft nodes (each broker and controller, all three voters), replication factor 3 and
    min.insync.replicas 2, fresh data; every node stopped by PID at the end."""
    state_dir = REPO_ROOT / ".local" / f"kafka-cluster-{CLUSTER_PORT}"
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("KAFKA_NODE", "KAFKA_CONTROLLER_PORT")
    } | {
        "KAFKA_BROKERS": str(CLUSTER_SIZE),
        "KAFKA_PORT": str(CLUSTER_PORT),
        "KAFKA_STATE_DIR": str(state_dir),
        "KAFKA_AUTO_CREATE": "false",
        "KAFKA_START_TIMEOUT": "120",  # three JVMs starting at once on a small, busy machine
    }
    checked_kafka_sh("reset", env)  # fresh data: earlier runs' topics and groups must not leak in
    try:
        cluster = Cluster.up(env, state_dir)
    except BaseException:
        checked_kafka_sh("down", env)
        raise
    try:
        yield cluster
    finally:
        cluster.thaw_all()
        checked_kafka_sh("down", env)


@pytest.fixture
def cluster_topic_factory(kafka_cluster: Cluster) -> Iterator[MakeTopic]:
    """Like ``topic_factory``, on the cluster, every partition with three replicas."""
    yield from make_topic_factory(kafka_cluster.admin, replication_factor=CLUSTER_SIZE)
