"""service/kafka/retries.py: which of librdkafka's lines are retries still settling, by the error named."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from service.kafka.retries import SETTLING_ERRORS, Settling
from tests.support.fakes import FakeClock

GETPID = (
    "[thrd:main]: Failed to acquire idempotence PID from broker 127.0.0.1:9092/1: "
    f"{KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS).str()}: retrying"
)


@pytest.mark.parametrize(
    "code",
    [KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.LEADER_NOT_AVAILABLE],
)
def test_every_settling_error_is_known_by_its_code(code):
    settling = Settling(clock=FakeClock())
    assert settling.hold("COMMIT", "rdkafka#consumer-1", f"commit failed: {KafkaError(code).str()}")
    assert not settling.hold(
        "COMMIT",
        "rdkafka#consumer-1",
        f"commit failed: {KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED).str()}",
    )


def test_a_settled_streak_lets_the_next_one_be_held_again(clock):
    settling = Settling(settle_s=10.0, clock=clock)
    clock.advance(100.0)
    assert settling.hold("GETPID", "p", GETPID)
    clock.advance(9.0)
    assert settling.hold("GETPID", "p", GETPID)
    clock.advance(2.0)
    assert not settling.hold("GETPID", "p", GETPID), "11 s of the same retry: not settling"
    clock.advance(30.0)  # quiet since: that one settled
    assert settling.hold("GETPID", "p", GETPID)
    assert settling.hold("GETPID", "other-client", GETPID), "each client has its own streaks"


def test_a_line_naming_no_settling_error_is_never_held(clock):
    settling = Settling(clock=clock)
    assert KafkaError.COORDINATOR_LOAD_IN_PROGRESS in SETTLING_ERRORS
    assert not settling.hold("CONFWARN", "p", "Configuration property x is deprecated")
    assert not settling.hold(
        "GETPID", "p", f"Failed: {KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED).str()}"
    )
