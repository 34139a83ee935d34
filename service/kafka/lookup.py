"""Offsets asked of the cluster without consuming: partitions, watermarks, offsets by time, a group's
commits. For the backfill's range (``service.backfill.bounds``) and ``verify``; wraps a consumer whose
owner (``service.kafka.Source``, or a reader) created it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from service.errors import BrokerUnavailableError, MicrobatchError, NotAuthorizedError, UnknownTopicError
from service.flow.records import TopicPartition

T = TypeVar("T")

_TRANSIENT = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._WAIT_COORD,
    }
)
"""Errors that pass as the cluster settles (a group's coordinator being found, a leader elected): the
client marks few of them retriable when they come from these calls."""


class Offsets:
    """Each call asks the brokers, retrying what the client calls retriable (a group coordinator still
    being found) for up to ``timeout_s``. Raises NotAuthorizedError naming the resource when the cluster
    refuses it, BrokerUnavailableError when no answer came in time."""

    def __init__(
        self,
        consumer: Consumer,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        redact: Callable[[str], str] = lambda text: text,
    ) -> None:
        """``redact`` takes configured values out of librdkafka's texts before they reach an error."""
        self._consumer = consumer
        self._redact = redact
        self._timeout_s = timeout_s
        self._clock, self._sleep = clock, sleep

    def partitions(self, topic: str) -> list[int]:
        """The partitions of ``topic``, sorted. Raises UnknownTopicError when it does not exist."""
        listing = self._retried(lambda: self._consumer.list_topics(topic, timeout=self._timeout_s))
        metadata = listing.topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise UnknownTopicError(f"topic {topic!r} does not exist (or this principal may not see it)")
        return sorted(metadata.partitions)

    def watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        part = KafkaTopicPartition(*tp)
        low, high = self._retried(lambda: self._consumer.get_watermark_offsets(part, timeout=self._timeout_s))
        return low, high

    def at_time(self, tps: Sequence[TopicPartition], ms: int) -> dict[TopicPartition, int]:
        """The first offset of each of ``tps`` whose record timestamp is >= ``ms``; -1 where none is."""
        asked = [KafkaTopicPartition(t, p, ms) for t, p in tps]
        found = self._retried(lambda: self._consumer.offsets_for_times(asked, timeout=self._timeout_s))
        return {(part.topic, part.partition): part.offset for part in found}

    def committed(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, tuple[int, str | None]]:
        """The consumer's group's committed offset of each of ``tps`` that has one, with its metadata."""
        asked = [KafkaTopicPartition(t, p) for t, p in tps]
        parts = self._retried(lambda: self._consumer.committed(asked, timeout=self._timeout_s))
        for part in parts:
            if part.error is not None:
                raise _refused(part.error, self._redact)
        found = [part for part in parts if part.offset >= 0]
        return {(part.topic, part.partition): (part.offset, part.metadata) for part in found}

    def _retried(self, call: Callable[[], T]) -> T:
        deadline = self._clock() + self._timeout_s
        while True:
            try:
                return call()
            except KafkaException as exc:
                error = exc.args[0]
                transient = error.retriable() or error.code() in _TRANSIENT
                if not transient or self._clock() >= deadline:
                    raise _refused(error, self._redact) from None
            self._sleep(0.1)


def _refused(error: KafkaError, redact: Callable[[str], str]) -> MicrobatchError:
    """The error a caller can act on: which permission is missing, or that the request failed.
    librdkafka's texts name brokers and codes, never a configured value."""
    code = error.code()
    if code == KafkaError.GROUP_AUTHORIZATION_FAILED:
        return NotAuthorizedError(f"READ on the group was refused ({error.name()}): docs/SECURITY.md")
    if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        return NotAuthorizedError(f"DESCRIBE on a topic was refused ({error.name()}): docs/SECURITY.md")
    return BrokerUnavailableError(f"an offsets request failed: {redact(error.str())}")
