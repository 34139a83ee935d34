"""The consumer a backfill reads its range through: :class:`service.kafka.source.Source` with partitions
assigned at given offsets instead of subscribed, where each partition ended reported, offsets looked up
through it, and each commit carrying the job's range as its metadata. It is the
``backfill.source.AssignableSource`` that ``backfill.source.RangeSource`` drives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from confluent_kafka import KafkaError, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from service.config import KafkaSettings
from service.flow.records import TopicPartition
from service.kafka.hooks import NO_HOOKS, ClientHooks
from service.kafka.lookup import Offsets
from service.kafka.source import Source


class RangeReader(Source):
    """A :class:`Source` that also reports where each partition's end was reached (:meth:`take_ends`)."""

    _CONF: ClassVar[Mapping[str, object]] = {"enable.partition.eof": True}

    def __init__(self, settings: KafkaSettings, hooks: ClientHooks = NO_HOOKS) -> None:
        super().__init__(settings, hooks)
        self._ends: dict[TopicPartition, int] = {}
        self._notes: dict[TopicPartition, str] = {}

    def assign(self, starts: Mapping[TopicPartition, int]) -> None:
        """Read exactly these partitions from these offsets, outside any group's membership (commits still
        go to the configured group)."""
        self._consumer.assign([KafkaTopicPartition(t, p, o) for (t, p), o in starts.items()])
        self._parts = {(t, p): KafkaTopicPartition(t, p) for t, p in starts}

    def positions(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The next offset ``consume`` will return from each of ``tps`` (absent where none is known yet)."""
        parts = self._consumer.position([KafkaTopicPartition(t, p) for t, p in tps])
        return {(part.topic, part.partition): part.offset for part in parts if part.offset >= 0}

    def take_ends(self) -> dict[TopicPartition, int]:
        """Where the partitions whose end was reached since the last call ended."""
        if not self._ends:
            return {}
        ends, self._ends = self._ends, {}
        return ends

    def offsets(self) -> Offsets:
        """Lookups of offsets (watermarks, by time, committed) through this consumer."""
        return Offsets(self._consumer, redact=self._redact)

    def note(self, notes: Mapping[TopicPartition, str]) -> None:
        """Commit each of these partitions' offsets with this text as its metadata from now on (a backfill
        records the range of its job there)."""
        self._notes = dict(notes)

    def _positions(self, offsets: dict[TopicPartition, int]) -> list[KafkaTopicPartition]:
        """The next offsets to commit (stored, or in a transaction), each with its partition's note once
        :meth:`note` gave them (then every partition read has one)."""
        notes = self._notes
        if not notes:  # the client takes no None for metadata
            return super()._positions(offsets)
        return [KafkaTopicPartition(t, p, o, notes[(t, p)]) for (t, p), o in offsets.items()]

    def pause_partitions(self, tps: Sequence[TopicPartition]) -> None:
        """Stop fetching from ``tps``."""
        self._consumer.pause([KafkaTopicPartition(t, p) for t, p in tps])

    def _on_message_error(self, msg: Message, err: KafkaError) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            self._ends[(msg.topic(), msg.partition())] = msg.offset()  # type: ignore[index,assignment]
            return
        super()._on_message_error(msg, err)
