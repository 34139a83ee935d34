"""service/kafka/access.py: which permission a consumer error or a failed delivery says is missing, and the
consumer's bookkeeping of its READ permissions."""

from __future__ import annotations

from confluent_kafka import KafkaError

from service.flow.records import InputRecord, Permission
from service.kafka.access import ReadAccess, refused_reading, refused_writing


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


def test_the_consumers_read_permissions_are_reported_refused_and_working_again():
    """ReadAccess: a refusal is reported as its error says; the group works again once partitions are
    assigned, a topic once a record from it arrives (told once, not per record)."""
    seen: list[tuple[Permission, bool]] = []
    access = ReadAccess("scorers", lambda permission, refused: seen.append((permission, refused)))
    events = Permission("READ", "topic", "events")
    group = Permission("READ", "group", "scorers")

    access.read([record("events")])  # nothing refused: nothing to tell
    assert not access.refused(KafkaError(KafkaError._TRANSPORT), "events")
    assert access.refused(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), "events")
    assert access.refused(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED), "events")
    assert seen == [(events, True), (group, True)]

    seen.clear()
    access.joined()
    access.read([])
    access.read([record("other")])
    access.read([record("events"), record("events")])
    access.read([record("events")])  # already working
    assert seen == [(group, False), (events, False)]


def record(topic: str) -> InputRecord:
    return InputRecord(topic, 0, 0, None, b"{}", None, None, 0.0)
