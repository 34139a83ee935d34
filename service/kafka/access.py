"""Which permission the cluster refused while the service runs: READ on the group it joins, READ on a topic
it consumes, WRITE on a topic it produces to. Pure.

The clients report a refusal as they meet it (a consumer error, a failed delivery) and report the same
permission as proven when it works again (the group assigned partitions, a record arrived from the topic, a
delivery to it was acknowledged), through ``flow.records.Access``; :class:`ReadAccess` keeps the
consumer's account. librdkafka retries every refused request itself, and the service sends refused
deliveries again, so granting the ACL mid-run is enough: nothing is lost meanwhile, because no offset is
committed before its outputs are acknowledged.
"""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import KafkaError

from service.flow.records import Access, InputRecord, Permission


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


class ReadAccess:
    """The consumer's READ permissions, told to ``report`` (``ClientHooks.access``): refused as its errors
    say, and working again as it is seen to (the group assigned partitions; a record arrived from a topic
    that was refused)."""

    def __init__(self, group: str, report: Access) -> None:
        self._group = Permission("READ", "group", group)
        self._report = report
        self._refused_topics: set[str] = set()  # READ refused, until a record from it arrives

    def joined(self) -> None:
        """Partitions were assigned: READ on the group works. Told on every assignment."""
        self._report(self._group, False)

    def refused(self, err: KafkaError, topic: str | None) -> bool:
        """Whether ``err`` (met reading ``topic``) is a refusal; if so it is reported, by permission rather
        than per error (the report logs it)."""
        refused = refused_reading(err, topic, self._group.name)
        if refused is None:
            return False
        if refused.resource == "topic":
            self._refused_topics.add(refused.name)
        self._report(refused, True)
        return True

    def read(self, records: Sequence[InputRecord]) -> None:
        """``records`` arrived: READ works again on each refused topic they came from. Called after every
        consume, so it returns at once while nothing is refused."""
        if not self._refused_topics or not records:
            return
        for topic in self._refused_topics & {r.topic for r in records}:
            self._refused_topics.discard(topic)
            self._report(Permission("READ", "topic", topic), False)
