"""Group membership against the real broker: a static member (``GROUP_INSTANCE_ID``) restarted within its
session takes back its own partitions and moves none of the other member's; the broker-driven protocol of
KIP-848 (``GROUP_PROTOCOL=consumer``) answers every input once."""

from __future__ import annotations

import signal
from collections import Counter
from typing import Any

from confluent_kafka.admin import AdminClient

from service.tools.processes import Child
from tests.support.harness import (
    SERVICE_PARTITIONS,
    committed,
    end_offsets,
    metrics_events,
    produce,
    read_topic,
    source_of,
    start_on_topics,
    wait_for,
)

# Long enough for a restart (model load and warm-up) on a slow machine; the test never waits it out.
SESSION_MS = "30000"
REBALANCE_EVENTS = ("partitions_assigned", "partitions_revoked", "partitions_lost")


def _owned(child: Child) -> set[str]:
    """The partitions ``child`` owns now, from its log."""
    owned: set[str] = set()
    for event in child.events(*REBALANCE_EVENTS):
        if event["event"] == "partitions_assigned":
            owned |= set(event["partitions"])
        else:
            owned -= set(event["partitions"])
    return owned


def _moves(child: Child) -> int:
    """How many times partitions were given to or taken from ``child`` (an empty assignment moves none)."""
    return sum(1 for event in child.events(*REBALANCE_EVENTS) if event["partitions"])


def _answered_once(bootstrap: str, topics: dict[str, str], items: list[Any], coords: list[Any]) -> None:
    outputs = read_topic(bootstrap, topics["out"], expected=len(items), timeout=90)
    by_source = Counter(source_of(o) for o in outputs)
    assert set(by_source) == set(coords)
    assert max(by_source.values()) == 1


def test_a_static_member_restarted_within_its_session_takes_back_its_partitions_and_moves_no_other(
    tmp_path, kafka_bootstrap, topics, group_id
):
    def member(name: str) -> Child:
        log_dir = tmp_path / name
        log_dir.mkdir()
        return start_on_topics(
            log_dir,
            kafka_bootstrap,
            topics,
            group_id,
            kafka__group_instance_id=name.rstrip("0123456789"),
            kafka__session_timeout_ms=SESSION_MS,
        )

    first, other = member("a"), member("b")
    restarted = None
    try:
        wait_for(
            lambda: (
                len(_owned(first)) + len(_owned(other)) == SERVICE_PARTITIONS
                and _owned(first)
                and _owned(other)
            ),
            90,
            "the two members sharing the partitions",
        )
        before, others = _owned(first), _owned(other)
        other_moves = _moves(other)
        assert first.stop(signal.SIGTERM) == 0, first.log()
        restarted = member("a2")  # the same instance id, "a"
        wait_for(lambda: _owned(restarted) == before, 60, "the restarted member's own partitions")
        items = metrics_events(400, seed=31)
        coords = produce(kafka_bootstrap, topics["in"], items)
        _answered_once(kafka_bootstrap, topics, items, coords)
        assert _moves(other) == other_moves, "the other member was rebalanced"
        assert _owned(other) == others
    finally:
        codes = {child.log_path.name: child.stop() for child in (first, other, restarted) if child}
    assert set(codes.values()) == {0}, codes


def test_the_broker_driven_protocol_answers_every_input_once(tmp_path, kafka_bootstrap, topics, group_id):
    items = metrics_events(1000, seed=32)
    coords = produce(kafka_bootstrap, topics["in"], items)
    service = start_on_topics(tmp_path, kafka_bootstrap, topics, group_id, kafka__group_protocol="consumer")
    try:
        _answered_once(kafka_bootstrap, topics, items, coords)
        wait_for(
            lambda: (
                committed(kafka_bootstrap, group_id, topics["in"], SERVICE_PARTITIONS)
                == end_offsets(kafka_bootstrap, topics["in"], SERVICE_PARTITIONS)
            ),
            30,
            "every input committed",
        )
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # held until the answer comes
        description = admin.describe_consumer_groups([group_id])[group_id].result(timeout=30)
        assert str(description.type).endswith("CONSUMER"), description.type  # not CLASSIC
    finally:
        code = service.stop()
    assert code == 0, service.log()
