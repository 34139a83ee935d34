"""One delivery callback for the records of one batch: they are acknowledged together.

confluent-kafka calls a Python callback for every delivery report librdkafka hands it. A callback object
per record (a ``partial`` holding it) costs an allocation per message and a call that does that record's
bookkeeping. One callback per batch only counts down, and the batch's records are acknowledged at once
when the last report arrives. A failed delivery is rare: it is matched back to its record by content
(topic, key, value) and handed on alone, to be retried or replaced without holding up the rest.

This module is responsible for the counting and the matching; what a failure means is the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from service.flow.records import Headers

T = TypeVar("T")

Produced = Callable[[T], tuple[str, bytes | None, bytes | None, Headers | None]]
"""What produce is given of a record: its topic, value, key and headers (``operator.attrgetter`` or
``itemgetter``: built in C, per message)."""

ANY_PARTITION = -1  # librdkafka's RD_KAFKA_PARTITION_UA: the partitioner chooses


class Batch(Generic[T]):
    """The callback given to ``Producer.produce`` for every record of ``records``.

    Every record must end in exactly one of: a delivery report (this object called), or
    :meth:`not_queued` (produce refused it). Once all have, and :meth:`release` was called (after the
    last produce, so that reports served while producing cannot finish it early), ``on_done(self)``
    runs once; :meth:`delivered` then lists the records acknowledged. ``on_failed(record, err)`` runs
    for each record whose delivery failed or that was not queued; it is not in :meth:`delivered`."""

    __slots__ = ("_failed", "_left", "_on_done", "_on_failed", "_produced", "records")

    def __init__(
        self,
        records: Sequence[T],
        produced: Produced[T],
        on_failed: Callable[[T, KafkaError], None],
        on_done: Callable[[Batch[T]], None],
    ) -> None:
        self.records = records
        self._produced = produced
        self._on_failed = on_failed
        self._on_done = on_done
        self._failed: set[int] = set()
        self._left = len(records) + 1  # one per record, and one held until release()

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._fail(self._match(msg), err)
        self._count_down()

    def produce_all(self, producer: Producer) -> None:
        """Hand every record to ``producer`` with this object as its callback, then :meth:`release`.
        Blocks (serving delivery reports) only while the local queue is full; a record produce refuses
        (larger than ``message.max.bytes``) is :meth:`not_queued`."""
        # Positional: keyword arguments cost produce about a microsecond more per call (CPython's keyword
        # parsing). The order is produce's own: topic, value, key, partition, callback, on_delivery,
        # timestamp (0: now), headers.
        produce: Callable[..., None] = producer.produce
        for index, (topic, value, key, headers) in enumerate(map(self._produced, self.records)):
            while True:  # per message: keep it lean
                try:
                    produce(topic, value, key, ANY_PARTITION, self, None, 0, headers)
                    break
                except BufferError:
                    producer.poll(0.05)
                except KafkaException as exc:
                    self.not_queued(index, exc.args[0])
                    break
        self.release()

    def not_queued(self, index: int, err: KafkaError) -> None:
        """``records[index]`` was refused by produce itself: no report will come for it."""
        self._fail(index, err)
        self._count_down()

    def release(self) -> None:
        """Every record was handed to produce (or refused by it)."""
        self._count_down()

    def delivered(self) -> list[T]:
        """The records the broker acknowledged, in order: all of them but the failed."""
        if not self._failed:
            return list(self.records)
        return [r for i, r in enumerate(self.records) if i not in self._failed]

    def _count_down(self) -> None:
        self._left -= 1
        if not self._left:
            self._on_done(self)

    def _match(self, msg: Message) -> int | None:
        """The index of the record ``msg`` reports on, among those not failed yet; None if none matches.
        Records with the same topic, key and value are interchangeable: whichever is taken, what is
        retried is the same."""
        reported = (msg.topic(), msg.value(), msg.key())
        for i, record in enumerate(self.records):
            if i not in self._failed and self._produced(record)[:3] == reported:
                return i
        return None

    def _fail(self, index: int | None, err: KafkaError) -> None:
        # index None cannot happen while reports carry what was produced; if it did, no record could be
        # told delivered: every one still counted as delivered goes to on_failed (a duplicate at worst).
        failing = {index} if index is not None else set(range(len(self.records))) - self._failed
        for i in sorted(failing):
            self._failed.add(i)
            self._on_failed(self.records[i], err)
