"""service/kafka/lookup.py: retriable errors retried until the timeout, refusals named. A fake consumer
that fails as librdkafka does, and a fake clock that the retry's sleep moves."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from service.errors import BrokerUnavailableError, NotAuthorizedError
from service.kafka.lookup import Offsets
from tests.support.fakes import FakeClock


class Consumer:
    """``committed`` fails with each of ``errors`` in turn (a code, or a code for one partition), then
    answers offset 42."""

    def __init__(self, *errors) -> None:
        self.errors = list(errors)
        self.calls = 0

    def committed(self, parts, timeout):
        self.calls += 1
        if self.errors:
            error = self.errors.pop(0)
            if isinstance(error, tuple):  # a partition's own error, in an answer
                refused = KafkaError(error[0])
                return [
                    SimpleNamespace(topic=p.topic, partition=p.partition, offset=-1001, error=refused)
                    for p in parts
                ]
            raise KafkaException(KafkaError(error))
        return [TopicPartition(p.topic, p.partition, 42) for p in parts]


def lookup(consumer: Consumer, clock: FakeClock) -> Offsets:
    return Offsets(consumer, timeout_s=1.0, clock=clock, sleep=clock.advance)  # type: ignore[arg-type]


def test_a_coordinator_still_being_found_is_retried():
    clock = FakeClock()
    consumer = Consumer(KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS)
    assert lookup(consumer, clock).committed([("t", 0)]) == {("t", 0): (42, None)}
    assert consumer.calls == 3


def test_retrying_ends_at_the_timeout_as_the_cluster_not_answering():
    clock = FakeClock()
    consumer = Consumer(*[KafkaError.NOT_COORDINATOR] * 100)
    with pytest.raises(BrokerUnavailableError, match="an offsets request failed"):
        lookup(consumer, clock).committed([("t", 0)])
    assert consumer.calls == 11  # 1 s of 0.1 s sleeps


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (KafkaError.GROUP_AUTHORIZATION_FAILED, "READ on the group was refused"),
        ((KafkaError.GROUP_AUTHORIZATION_FAILED,), "READ on the group was refused"),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, "DESCRIBE on a topic was refused"),
    ],
)
def test_a_refusal_names_the_permission_at_once(error, says):
    consumer = Consumer(error)
    with pytest.raises(NotAuthorizedError, match=says):
        lookup(consumer, FakeClock()).committed([("t", 0)])
    assert consumer.calls == 1
