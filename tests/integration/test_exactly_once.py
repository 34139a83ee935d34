"""Exactly-once against the real broker: results, dead letters and the input offsets they complete in Kafka
transactions. A ``read_committed`` reader sees each input answered once, whatever happened to the service:
a SIGKILL in the middle of a transaction, a second process with the same transactional id, a zombie."""

from __future__ import annotations

import signal
import time
from collections import Counter

from confluent_kafka import Consumer, TopicPartition

from service.errors import FencedError
from tests.support.harness import (
    SERVICE_PARTITIONS,
    committed,
    dlq_source_of,
    end_offsets,
    free_port,
    metrics_events,
    produce,
    read_topic,
    scrape,
    source_of,
    start_on_topics,
    wait_for,
)

EXACTLY_ONCE = {"delivery__guarantee": "exactly-once"}


def _exactly_once(tmp_path, bootstrap, topics, group_id, name="a", **extra):
    log_dir = tmp_path / name
    log_dir.mkdir()
    settings = {**EXACTLY_ONCE, "kafka__instance_id": name, **extra}
    return start_on_topics(log_dir, bootstrap, topics, group_id, **settings)


def _all_committed(bootstrap: str, group_id: str, topic: str) -> bool:
    return committed(bootstrap, group_id, topic, SERVICE_PARTITIONS) == end_offsets(
        bootstrap, topic, SERVICE_PARTITIONS
    )


def _answers(bootstrap: str, topics: dict[str, str], expected: int) -> Counter:
    """Every input answered (a result or a dead letter), as a read_committed reader sees them."""
    results = read_topic(bootstrap, topics["out"], expected=expected, timeout=90)
    letters = read_topic(bootstrap, topics["dlq"], expected=0, timeout=5)
    return Counter([source_of(o) for o in results] + [dlq_source_of(o) for o in letters])


def _read_uncommitted(bootstrap: str, topic: str) -> int:
    """How many records ``topic`` holds as a read_uncommitted reader sees them (aborted ones included)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "eos-uncommitted", "isolation.level": "read_uncommitted"}
    )
    try:
        seen = 0
        parts = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            seen += sum(1 for m in consumer.consume(500, 0.5) if m.error() is None)
        return seen
    finally:
        consumer.close()


def test_each_input_is_answered_once_and_committed_in_transactions(
    tmp_path, kafka_bootstrap, topics, group_id
):
    items = metrics_events(600, seed=41)
    items[17] = (items[17][0], b"not json")  # a dead letter, in the transaction too
    coords = produce(kafka_bootstrap, topics["in"], items)
    port = free_port()
    service = _exactly_once(tmp_path, kafka_bootstrap, topics, group_id, metrics__port=str(port))
    try:
        answers = _answers(kafka_bootstrap, topics, len(items) - 1)
        assert set(answers) == set(coords)
        assert max(answers.values()) == 1
        wait_for(lambda: _all_committed(kafka_bootstrap, group_id, topics["in"]), 30, "every input committed")
        assert service.events("transactions_ready")
        metrics = scrape(port)
        assert metrics['microbatch_transactions_total{outcome="committed"}'] >= 1
        assert metrics.get('microbatch_transactions_total{outcome="aborted"}', 0) == 0
        assert metrics["microbatch_transaction_commit_seconds_count"] >= 1
        assert metrics["microbatch_commits_total"] == 0  # no offset is committed outside a transaction
    finally:
        code = service.stop()
    assert code == 0, service.log()


def test_a_sigkill_mid_transaction_leaves_each_input_answered_once(
    tmp_path, kafka_bootstrap, topics, group_id
):
    """The victim is killed while a long transaction is open: what it wrote in it is aborted when its
    successor (the same instance id) starts, and a read_committed reader sees every input once."""
    items = metrics_events(3000, seed=42)
    coords = produce(kafka_bootstrap, topics["in"], items)

    # Transactions of 30 s: the kill lands inside one, after results were written in it.
    def written() -> int:
        return _read_uncommitted(kafka_bootstrap, topics["out"])

    victim = _exactly_once(tmp_path, kafka_bootstrap, topics, group_id, "a", delivery__transaction_ms="30000")
    try:
        wait_for(lambda: written() > 0, 60, "results written, uncommitted")
    finally:
        victim.stop(signal.SIGKILL)
    aborted = written()
    successor = _exactly_once(tmp_path, kafka_bootstrap, topics, group_id, "a2", kafka__instance_id="a")
    try:
        answers = _answers(kafka_bootstrap, topics, len(items))
        assert set(answers) == set(coords)
        assert max(answers.values()) == 1, [c for c, n in answers.items() if n > 1][:10]
        wait_for(lambda: _all_committed(kafka_bootstrap, group_id, topics["in"]), 30, "every input committed")
    finally:
        code = successor.stop()
    assert code == 0, successor.log()
    assert aborted > 0  # the victim's writes were there, and no committed reader saw them


def test_a_second_process_with_the_same_instance_id_is_fenced_and_says_which_setting(
    tmp_path, kafka_bootstrap, topics, group_id
):
    """Two live processes with one transactional id: the newer one fences the older, which stops with
    exit 5 and one line naming the setting, rather than fencing each other for ever."""
    first = _exactly_once(tmp_path, kafka_bootstrap, topics, group_id, "a")
    second = None
    try:
        wait_for(lambda: first.events("transactions_ready"), 60, "the first instance ready")
        second = _exactly_once(tmp_path, kafka_bootstrap, topics, group_id, "b", kafka__instance_id="a")
        wait_for(lambda: second.events("transactions_ready"), 60, "the second instance ready")
        produce(kafka_bootstrap, topics["in"], metrics_events(200, seed=43))
        wait_for(lambda: first.proc.poll() is not None, 60, "the first instance stopped")
        assert first.proc.returncode == FencedError.exit_code, first.log()
        assert "MICROBATCH_KAFKA__INSTANCE_ID" in first.log()
        assert "Traceback" not in first.log()
    finally:
        first.stop()
        if second is not None:
            assert second.stop() == 0, second.log()
