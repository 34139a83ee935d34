"""The input edge: the only code that owns the librdkafka consumer.

:class:`Source` is what the service's loop drives (``flow.ports.SourceLike``); start-up's probe is its
``startup`` (``kafka/startup.py``), its READ permissions are kept by ``kafka/access.py``, and a backfill
reads through its subclass ``kafka.ranges.RangeReader``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import ClassVar

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from service.config import KafkaSettings, redactor
from service.flow.ports import RebalanceListener
from service.flow.records import InputRecord, TopicPartition
from service.kafka.access import ReadAccess
from service.kafka.hooks import NO_HOOKS, ClientHooks
from service.kafka.startup import CauseReader, StartupProbe
from service.kafka.watch import CommitWatch, FatalWatch, StatsWatch
from service.observability.logs import client_log

_log = structlog.get_logger("microbatch.source")


# librdkafka's statistics tell, among much else, each broker connection's state: the cheapest reliable
# answer to "is any broker reachable?" for /readyz, with no request of our own.
_STATS_INTERVAL_MS = 5000


class Source:
    """Wraps ``confluent_kafka.Consumer``: consume in batches, store offsets, commit synchronously.

    ``hooks`` (:class:`service.kafka.hooks.ClientHooks`) are told, from inside ``consume`` (and
    ``close``): ``brokers(up)`` whether any broker is reachable; ``access`` of READ on the group or a topic
    refused, and of it working again (partitions assigned; a record from that topic); ``commit(ok)`` of
    every auto-commit librdkafka reports (:meth:`commit`'s synchronous ones it returns instead, as
    librdkafka reports those to no callback). ``startup`` (:class:`service.kafka.startup.StartupProbe`)
    waits for the brokers before the loop starts."""

    _CONF: ClassVar[Mapping[str, object]] = {}
    """Options a subclass needs whatever the settings say: set after them, so they win."""

    def __init__(self, settings: KafkaSettings, hooks: ClientHooks = NO_HOOKS) -> None:
        self._redact = redactor(settings.private_values())
        options = settings.consumer_config()
        log = client_log(options, settings.private_values())
        causes = CauseReader(settings, self._redact, log)  # before the client: it feeds it
        self._fatal = FatalWatch("consumer", hooks.brokers, self._redact, causes.read)
        self._on_stats = StatsWatch(hooks.brokers)
        self._committed = CommitWatch(hooks.commit, self._redact)
        self._access = ReadAccess(settings.group_id, hooks.access)
        conf: dict[str, object] = {**options, "error_cb": self._fatal, **self._CONF}
        conf["logger"] = log
        conf.setdefault("statistics.interval.ms", _STATS_INTERVAL_MS)
        conf["stats_cb"] = self._on_stats
        conf["on_commit"] = self._committed
        self._consumer = Consumer(conf)
        self.startup = StartupProbe(self._consumer, causes, settings, self._redact)
        # The assignment as the rebalance callbacks (or assign) gave it: Consumer.assignment() waits for
        # a reply from librdkafka's main thread, which stalls the lag read after every batch whenever that
        # thread is busy (docs/BENCHMARKS.md, *What makes it fast*).
        self._parts: dict[TopicPartition, KafkaTopicPartition] = {}

    def subscribe(self, topics: list[str], listener: RebalanceListener) -> None:
        def tps(parts: list[KafkaTopicPartition]) -> list[TopicPartition]:
            return [(p.topic, p.partition) for p in parts]

        def assigned(parts: list[KafkaTopicPartition]) -> None:
            self._access.joined()
            self._parts.update(_keyed(parts))  # incremental (cooperative) or whole (eager): either adds
            listener.on_assigned(tps(parts))

        def revoked(parts: list[KafkaTopicPartition]) -> None:
            listener.on_revoked(tps(parts))
            self._forget(parts)

        def lost(parts: list[KafkaTopicPartition]) -> None:
            listener.on_lost(tps(parts))
            self._forget(parts)

        self._consumer.subscribe(
            topics,
            on_assign=lambda _c, parts: assigned(parts),
            on_revoke=lambda _c, parts: revoked(parts),
            on_lost=lambda _c, parts: lost(parts),
        )

    def _forget(self, parts: list[KafkaTopicPartition]) -> None:
        for tp in _keyed(parts):
            self._parts.pop(tp, None)

    def consume(self, max_messages: int, timeout_s: float) -> list[InputRecord]:
        """Block up to ``timeout_s`` for up to ``max_messages``; rebalance callbacks run in here.

        Raises FatalKafkaError on a fatal client error; other errors are logged and skipped (librdkafka
        retries them itself).
        """
        messages = self._consumer.consume(max(1, max_messages), timeout_s)
        self._fatal.check()
        now = time.monotonic()
        records = []
        for msg in messages:
            err = msg.error()
            if err is not None:
                self._on_message_error(msg, err)
                continue
            records.append(to_record(msg, now))
        self._access.read(records)
        return records

    def lag(self) -> dict[TopicPartition, int]:
        """Messages between the consumer's position and the end of each assigned partition, from the
        watermarks of the last fetch responses: no broker round trip (about 10 us per partition).
        Partitions not fetched yet count 0."""
        lag: dict[TopicPartition, int] = {}
        if not self._parts:
            return lag
        for part in self._consumer.position(list(self._parts.values())):
            behind = 0
            if part.offset >= 0:
                _low, high = self._consumer.get_watermark_offsets(part, cached=True)
                behind = max(0, high - part.offset)
            lag[(part.topic, part.partition)] = behind
        return lag

    def store(self, offsets: dict[TopicPartition, int]) -> None:
        """Store the next offsets to commit (auto-commit sends them within a second)."""
        self._store(self._positions(offsets))

    def _positions(self, offsets: dict[TopicPartition, int]) -> list[KafkaTopicPartition]:
        """The next offsets to commit, as the client takes them."""
        return [KafkaTopicPartition(t, p, o) for (t, p), o in offsets.items()]

    def transaction_offsets(
        self, offsets: dict[TopicPartition, int]
    ) -> tuple[list[KafkaTopicPartition], object]:
        """The next offsets to commit as a transaction takes them (exactly-once), with the group's
        metadata (member, generation), which fences a zombie's offsets once its group moved on (KIP-447)."""
        return self._positions(offsets), self._consumer.consumer_group_metadata()

    def _store(self, parts: list[KafkaTopicPartition]) -> None:
        try:
            self._consumer.store_offsets(offsets=parts)
        except KafkaException as exc:
            # A partition revoked in the meantime cannot be stored to; its new owner starts from the
            # last commit, so nothing is lost.
            _log.debug("store_offsets_failed", error=self._redact(str(exc)))

    def commit(self) -> bool:
        """Commit the stored offsets now and wait for the broker's answer. False when the commit failed
        (logged; the offsets stay stored and auto-commit retries them); nothing to commit is success."""
        try:
            self._consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                _log.warning("commit_failed", error=self._redact(str(exc)))
                return False
        return True

    def pause(self) -> None:
        """Stop fetching from every assigned partition; ``consume`` keeps serving the group protocol."""
        self._consumer.pause(self._consumer.assignment())

    def resume(self, tps: list[TopicPartition] | None = None) -> None:
        """Fetch again from ``tps`` (default: every assigned partition). librdkafka keeps a partition's
        paused flag across a revoke and a re-assignment, so re-assigned partitions must be resumed by name."""
        parts = self._consumer.assignment() if tps is None else [KafkaTopicPartition(t, p) for t, p in tps]
        try:
            self._consumer.resume(parts)
        except KafkaException as exc:  # a partition never seen before has no pause flag to clear
            _log.debug("resume_failed", error=self._redact(str(exc)))

    def rewind(self, offsets: dict[TopicPartition, int]) -> None:
        """Read each partition again from its offset (exactly-once, after an aborted transaction): what
        was fetched beyond it is dropped. A partition no longer assigned is skipped (its new owner reads
        from the last commit)."""
        for (topic, partition), offset in offsets.items():
            try:
                self._consumer.seek(KafkaTopicPartition(topic, partition, offset))
            except KafkaException as exc:
                _log.warning("rewind_failed", partition=f"{topic}[{partition}]", error=self._redact(str(exc)))

    def close(self) -> None:
        self._consumer.close()

    def _on_message_error(self, msg: Message, err: KafkaError) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            return  # only asked for by a subclass (or an *_EXTRA option): no error
        if self._access.refused(err, msg.topic()):
            return
        error = self._redact(err.str())
        _log.warning("consume_error", topic=msg.topic(), partition=msg.partition(), error=error)


def to_record(msg: Message, received: float, delivery_count: int | None = None) -> InputRecord:
    """Copy a consumed message out of the client. Headers that cannot be read (a name that is not UTF-8)
    are reported in ``header_error`` rather than raised, so the record can be dead-lettered;
    ``delivery_count``: a share group's (``Message.delivery_count``)."""
    try:
        headers, header_error = msg.headers(), None
    except (SystemError, UnicodeError) as exc:
        headers, header_error = None, f"unreadable headers: {exc}"
    _kind, ts = msg.timestamp()
    # A consumed record without an error always has its coordinates, and its header values are bytes: the
    # stubs' Optionals and wider header type do not apply (and a cast per message would cost time).
    return InputRecord(
        msg.topic(),  # type: ignore[arg-type]
        msg.partition(),  # type: ignore[arg-type]
        msg.offset(),  # type: ignore[arg-type]
        msg.key(),
        msg.value(),
        headers,  # type: ignore[arg-type]
        ts if ts > 0 else None,
        received,
        header_error,
        delivery_count,
    )


def _keyed(parts: list[KafkaTopicPartition]) -> dict[TopicPartition, KafkaTopicPartition]:
    """Each partition by its coordinates, without an offset (``position`` fills that in)."""
    return {(p.topic, p.partition): KafkaTopicPartition(p.topic, p.partition) for p in parts}
