"""Which permission the cluster refused while the service runs: READ on the group it joins, READ on a topic
it consumes, WRITE on a topic it produces to. Pure.

The clients report a refusal as they meet it (a consumer error, a failed delivery) and report the same
permission as proven when it works again (the group assigned partitions, a record arrived from the topic, a
delivery to it was acknowledged), through ``flow.records.Access``. librdkafka retries every refused request
itself, and the service sends refused deliveries again, so granting the ACL mid-run is enough: nothing is
lost meanwhile, because no offset is committed before its outputs are acknowledged.
"""

from __future__ import annotations

from confluent_kafka import KafkaError

from service.flow.records import Permission


def refused_reading(err: KafkaError, topic: str | None, group: str) -> Permission | None:
    """The permission a consumer error says the cluster refused, or None if it is not a refusal."""
    code = err.code()
    if code == KafkaError.GROUP_AUTHORIZATION_FAILED:
        return Permission("READ", "group", group)
    if code == KafkaError.TOPIC_AUTHORIZATION_FAILED and topic:
        return Permission("READ", "topic", topic)
    return None


def refused_writing(err: KafkaError, topic: str) -> Permission | None:
    """The permission a failed delivery to ``topic`` says the cluster refused, or None."""
    if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        return Permission("WRITE", "topic", topic)
    return None
