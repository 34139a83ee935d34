"""Offsets asked of the cluster without consuming: partitions, watermarks, offsets by time, a group's
commits. For the backfill's range (``service.backfill.bounds``) and ``verify``; wraps a consumer whose
owner (``service.kafka.Source``, or a reader) created it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from service.errors import UnknownTopicError
from service.flow.records import TopicPartition

T = TypeVar("T")


class Offsets:
    """Each call asks the brokers, retrying what the client calls retriable (a group coordinator still
    being found) for up to ``timeout_s``; raises KafkaException when it fails (a broker down, a permission
    refused)."""

    def __init__(self, consumer: Consumer, timeout_s: float = 10.0) -> None:
        self._consumer = consumer
        self._timeout_s = timeout_s

    def partitions(self, topic: str) -> list[int]:
        """The partitions of ``topic``, sorted. Raises UnknownTopicError when it does not exist."""
        metadata = self._consumer.list_topics(topic, timeout=self._timeout_s).topics.get(topic)
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

    def committed(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The consumer's group's committed offset of each of ``tps`` that has one."""
        asked = [KafkaTopicPartition(t, p) for t, p in tps]
        parts = self._retried(lambda: self._consumer.committed(asked, timeout=self._timeout_s))
        for part in parts:
            if part.error is not None:
                raise KafkaException(part.error)
        return {(part.topic, part.partition): part.offset for part in parts if part.offset >= 0}

    def _retried(self, call: Callable[[], T]) -> T:
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                return call()
            except KafkaException as exc:
                if not exc.args[0].retriable() or time.monotonic() >= deadline:
                    raise
            time.sleep(0.1)
