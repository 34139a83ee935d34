"""service/kafka/watch.py and the consumer's use of it: librdkafka's error, statistics and commit callbacks
tell /readyz about the brokers, stop the loop on a fatal error, and count the auto-commits."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import structlog
from confluent_kafka import KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition

from service.config import KafkaSettings, Settings, check_run_settings
from service.errors import ConfigError, FatalKafkaError
from service.kafka.hooks import ClientHooks
from service.kafka.source import Source
from service.kafka.watch import FatalWatch


def test_all_brokers_down_is_reported_and_other_errors_are_not():
    seen: list[bool] = []
    watch = FatalWatch("consumer", seen.append)
    watch(KafkaError(KafkaError._TRANSPORT))
    assert seen == []
    watch(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    assert seen == [False]
    watch.check()  # not fatal: the loop goes on


def test_a_fatal_error_stops_the_loop_with_librdkafkas_code():
    watch = FatalWatch("producer")
    watch(KafkaError(KafkaError._FENCED, "producer fenced by a newer instance", fatal=True))
    watch(KafkaError(KafkaError._FATAL, "a later one", fatal=True))  # the first one is kept
    with pytest.raises(FatalKafkaError) as info:
        watch.check()
    assert (info.value.client, info.value.code, info.value.name) == (
        "producer",
        KafkaError._FENCED,
        "_FENCED",
    )
    assert "producer fenced by a newer instance" in str(info.value)


@pytest.mark.parametrize(
    ("states", "up"),
    [(["UP", "DOWN"], True), (["DOWN", "CONNECT"], False), ([], False)],
)
def test_statistics_report_whether_any_broker_is_up(states, up):
    seen: list[bool] = []
    source = Source(KafkaSettings(bootstrap_servers="127.0.0.1:1"), ClientHooks(brokers=seen.append))
    try:
        brokers = {f"b{i}:9092/{i}": {"state": s, "nodeid": i, "rtt": {}} for i, s in enumerate(states)}
        source._on_stats(json.dumps({"name": "c", "brokers": brokers, "topics": {}}))
        source._on_stats("not json")  # ignored
        reported = list(seen)  # before close(), which may serve the client's own "all brokers down"
    finally:
        source.close()
    assert reported == [up]


def test_liveness_timeout_must_exceed_the_flush_timeout():
    base = {"input": {"topics": ["in"]}, "output": {"topic": "out", "flush_timeout_s": 30}}
    check_run_settings(Settings(**base))
    with pytest.raises(ConfigError, match="MICROBATCH_METRICS__LIVENESS_TIMEOUT_S"):
        check_run_settings(Settings(**base, metrics={"liveness_timeout_s": 30}))
    check_run_settings(Settings(**base, metrics={"liveness_timeout_s": 30, "enabled": False}))


def test_the_consumer_rebalances_incrementally_by_default():
    assert KafkaSettings().consumer_config()["partition.assignment.strategy"] == "cooperative-sticky"
    custom = KafkaSettings(consumer_extra={"partition.assignment.strategy": "range"})
    assert custom.consumer_config()["partition.assignment.strategy"] == "range"


def test_auto_commits_are_reported_and_a_failure_is_logged_when_it_starts_and_ends():
    """librdkafka's commit callback: nothing stored is no commit; an error, or one on a partition, is a
    failure, logged once per outage."""
    seen: list[bool] = []
    source = Source(KafkaSettings(bootstrap_servers="127.0.0.1:1"), ClientHooks(commit=seen.append))
    ok = [KafkaTopicPartition("in", 0, 10)]
    refused = SimpleNamespace(error=KafkaError(KafkaError.REBALANCE_IN_PROGRESS))
    try:
        with structlog.testing.capture_logs() as logs:
            source._committed(KafkaError(KafkaError._NO_OFFSET), [])
            source._committed(None, ok)
            source._committed(KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE), ok)
            source._committed(None, [refused])  # type: ignore[list-item]
            source._committed(None, ok)
        reported = list(seen)
    finally:
        source.close()
    assert reported == [True, False, False, True]
    assert [line["event"] for line in logs] == ["auto_commit_failed", "auto_commit_resumed"]
