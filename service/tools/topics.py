"""Topic administration for the tools and the tests: create topics and wait until they can be used, count
their records, delete them and the groups that read them, best effort."""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from service.errors import BrokerUnavailableError
from service.observability import logs

READY_TIMEOUT_S = 30.0
_REQUEST_TIMEOUT_S = 30.0


class TopicAdmin:
    """An admin client on one cluster. ``client_conf`` holds the connection options."""

    def __init__(self, client_conf: Mapping[str, Any]) -> None:
        conf = dict(client_conf)
        self.client = AdminClient(conf | {"logger": logs.client_log(conf)})

    def check(self, timeout_s: float = 10.0) -> None:
        """Raise BrokerUnavailableError (saying how to start one) unless a broker answers."""
        try:
            self.client.list_topics(timeout=timeout_s)
        except KafkaException as exc:
            raise BrokerUnavailableError(
                f"no Kafka broker answers ({exc.args[0].str()}); start one with `make kafka-up`"
            ) from None

    def create(
        self,
        names: Iterable[str],
        partitions: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        ready_timeout_s: float = READY_TIMEOUT_S,
        replication_factor: int = 1,
    ) -> None:
        """Create ``names`` (``replication_factor`` replicas of each partition, placed by the cluster) and
        wait until every partition of each has a leader: a consumer started right after would otherwise
        find the topic missing or leaderless."""
        names = list(names)
        new = [NewTopic(n, partitions, replication_factor, config=dict(config or {})) for n in names]
        futures = self.client.create_topics(new, operation_timeout=30, request_timeout=_REQUEST_TIMEOUT_S)
        for future in futures.values():
            future.result(timeout=60)
        for name in names:
            self.wait_ready(name, partitions, ready_timeout_s)

    def wait_ready(self, topic: str, partitions: int, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until metadata shows every partition of ``topic`` with a leader. Raises TimeoutError saying what
        was last seen."""
        deadline = time.monotonic() + timeout_s
        last = "no metadata yet"
        while True:
            try:
                meta = self.client.list_topics(topic=topic, timeout=5).topics.get(topic)
                if meta is None:
                    last = "topic missing from metadata"
                elif meta.error is not None:
                    last = f"topic error {meta.error}"
                elif len(meta.partitions) != partitions:
                    last = f"{len(meta.partitions)}/{partitions} partitions in metadata"
                elif any(p.leader < 0 or p.error is not None for p in meta.partitions.values()):
                    last = "a partition has no leader yet"
                else:
                    return
            except KafkaException as exc:
                last = f"metadata request failed: {exc}"
            if time.monotonic() >= deadline:
                raise TimeoutError(f"topic {topic!r} not ready after {timeout_s}s: {last}")
            time.sleep(0.1)

    def committed(self, group: str, topic: str, partitions: int) -> dict[int, int]:
        """``{partition: offset}`` that ``group`` committed for ``topic`` (negative: nothing committed)."""
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])]
        futures = self.client.list_consumer_group_offsets(request, request_timeout=_REQUEST_TIMEOUT_S)
        result = futures[group].result(timeout=60)
        return {tp.partition: tp.offset for tp in result.topic_partitions or []}

    def delete(self, names: Iterable[str]) -> list[str]:
        """Delete ``names``; a topic already gone is fine. Returns the names that could not be deleted
        (a broker that is down, say), for the caller to report."""
        names = list(names)
        if not names:
            return []
        failed = []
        futures = self.client.delete_topics(names, operation_timeout=30, request_timeout=_REQUEST_TIMEOUT_S)
        for name, future in futures.items():
            try:
                future.result(timeout=60)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    failed.append(name)
            except concurrent.futures.TimeoutError:
                failed.append(name)
        return failed

    def delete_group(self, group: str) -> None:
        """Best effort: the committed offsets of a finished run are of no further use."""
        for future in self.client.delete_consumer_groups(
            [group], request_timeout=_REQUEST_TIMEOUT_S
        ).values():
            with contextlib.suppress(KafkaException, concurrent.futures.TimeoutError):
                future.result(timeout=60)


_NOT_LOADED_YET = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE}


class Watermarks:
    """Partition end offsets, asked of the leaders (no records read). ``client_conf`` holds the connection
    options; :meth:`close` when done."""

    def __init__(self, client_conf: Mapping[str, Any]) -> None:
        conf = {**client_conf, "group.id": f"microbatch-watermarks-{uuid.uuid4().hex}"}
        self._consumer = Consumer(conf | {"logger": logs.client_log(conf)})

    def watermarks(self, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
        """``{partition: (low, high)}``: the offset of the first record still held, and the offset the
        next record will get."""
        return {p: self._watermark(TopicPartition(topic, p)) for p in range(partitions)}

    def _watermark(self, part: TopicPartition, timeout_s: float = 10.0) -> tuple[int, int]:
        # A partition just created can have a leader in the metadata before that broker has loaded it,
        # and answers NOT_LEADER for a moment (librdkafka does not flag it retriable): retried until
        # ``timeout_s``.
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self._consumer.get_watermark_offsets(part, timeout=timeout_s)
            except KafkaException as exc:
                error = exc.args[0]
                passing = error.retriable() or error.code() in _NOT_LOADED_YET
                if not passing or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def end_offsets(self, topic: str, partitions: int) -> dict[int, int]:
        """``{partition: offset}``: the offset the next record of each partition will get."""
        return {p: high for p, (_low, high) in self.watermarks(topic, partitions).items()}

    def count(self, topic: str, partitions: int) -> int:
        """How many records ``topic`` holds: cheap enough to ask twice a second while a system runs
        (reading the records themselves would compete with it for the CPU)."""
        return sum(max(0, high - max(low, 0)) for low, high in self.watermarks(topic, partitions).values())

    def close(self) -> None:
        self._consumer.close()
