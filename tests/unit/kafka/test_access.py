"""service/kafka/access.py: which permission a consumer error or a failed delivery says is missing."""

from __future__ import annotations

from confluent_kafka import KafkaError

from service.flow.records import Permission
from service.kafka.access import refused_reading, refused_writing


def test_a_refused_group_or_topic_names_the_permission_and_other_errors_name_none():
    group = KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)
    topic = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    assert refused_reading(group, None, "scorers") == Permission("READ", "group", "scorers")
    assert refused_reading(topic, "events", "scorers") == Permission("READ", "topic", "events")
    assert refused_reading(topic, None, "scorers") is None  # a topic error with no topic names nothing
    assert refused_reading(KafkaError(KafkaError._TRANSPORT), "events", "scorers") is None
    assert refused_writing(topic, "results") == Permission("WRITE", "topic", "results")
    assert str(refused_writing(topic, "results")) == "WRITE on topic 'results'"
    assert refused_writing(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION), "results") is None
