"""The input edge: the only code that owns the librdkafka consumer."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import msgspec
import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from service.config import KafkaSettings, redactor
from service.errors import BrokerUnavailableError, ConfigError
from service.flow.ports import RebalanceListener
from service.flow.records import Access, InputRecord, Permission, TopicPartition, no_access_report
from service.kafka.access import refused_reading
from service.kafka.causes import Cause, cause_of
from service.kafka.lookup import Offsets
from service.kafka.watch import BrokerStats, FatalWatch
from service.observability.logs import client_log

_log = structlog.get_logger("microbatch.source")


# librdkafka's statistics tell, among much else, each broker connection's state: the cheapest reliable
# answer to "is any broker reachable?" for /readyz, with no request of our own.
_STATS_INTERVAL_MS = 5000
CAUSE_AFTER_S = 2.0
"""How long a configuration fault must persist at start-up before it stops the service: librdkafka names
it within a second, and one that clears as a broker finishes starting is not one."""


class Source:
    """Wraps ``confluent_kafka.Consumer``: consume in batches, store offsets, commit synchronously.

    ``on_brokers(up)`` is told, from inside ``consume``, whether any broker is reachable: False as soon as
    librdkafka reports all brokers down, True when its next statistics show one up (every 5 s).
    ``on_access`` is told of READ on the group or a topic refused, and of it working again (partitions
    assigned; a record from that topic). ``on_commit(ok)`` is told of every auto-commit librdkafka
    reports (from inside ``consume`` and ``close``); :meth:`commit`'s synchronous ones it returns instead,
    as librdkafka reports those to no callback."""

    def __init__(
        self,
        settings: KafkaSettings,
        on_brokers: Callable[[bool], None] = lambda _up: None,
        on_access: Access = no_access_report,
        *,
        on_commit: Callable[[bool], None] = lambda _ok: None,
        ends: bool = False,
    ) -> None:
        """``ends``: report where each partition's end was reached (:meth:`take_ends`)."""
        self._redact = redactor(settings.private_values())
        self._settings = settings
        self._cause: tuple[float, Cause] | None = None  # when first seen, what
        self._starting = True  # causes are read only until wait_ready returns
        self._fatal = FatalWatch("consumer", on_brokers, self._redact, self._read_cause)
        self._on_brokers = on_brokers
        self._on_access = on_access
        self._on_commit = on_commit
        self._commits_ok = True  # the last auto-commit's result: a failure is logged when it starts
        self._group = Permission("READ", "group", settings.group_id)
        self._refused_topics: set[str] = set()  # READ refused, until a record from it arrives
        options = settings.consumer_config()
        conf: dict[str, object] = {**options, "error_cb": self._fatal}
        self._ends: dict[TopicPartition, int] | None = None
        self._notes: dict[TopicPartition, str] = {}
        if ends:
            conf["enable.partition.eof"] = True
            self._ends = {}
        self._client_log = client_log(options, settings.private_values())
        self._client_log.tap = self._read_cause
        conf["logger"] = self._client_log
        conf.setdefault("statistics.interval.ms", _STATS_INTERVAL_MS)
        conf["stats_cb"] = self._on_stats
        conf["on_commit"] = self._committed
        self._consumer = Consumer(conf)
        self._bootstrap = settings.bootstrap_servers
        # The assignment as the rebalance callbacks (or assign) gave it: Consumer.assignment() waits for
        # a reply from librdkafka's main thread (0.1 ms typically, up to 16 ms measured when that thread
        # is busy), too slow for the lag read after every batch.
        self._parts: dict[TopicPartition, KafkaTopicPartition] = {}

    def _on_stats(self, stats_json: str) -> None:
        try:
            brokers = msgspec.json.decode(stats_json, type=BrokerStats).brokers
        except msgspec.DecodeError:
            return
        self._on_brokers(any(b.state == "UP" for b in brokers.values()))

    def _committed(self, err: KafkaError | None, parts: list[KafkaTopicPartition]) -> None:
        """An auto-commit's result. Failing is logged once when it starts and once when it ends: it
        retries every interval, and the stored offsets wait meanwhile (a duplicate at worst)."""
        if err is not None and err.code() == KafkaError._NO_OFFSET:
            return  # nothing new was stored since the last one
        error = err if err is not None else next((p.error for p in parts if p.error is not None), None)
        ok = error is None
        if not ok and self._commits_ok:
            _log.warning("auto_commit_failed", error=self._redact(str(error)))
        elif ok and not self._commits_ok:
            _log.info("auto_commit_resumed")
        self._commits_ok = ok
        self._on_commit(ok)

    def subscribe(self, topics: list[str], listener: RebalanceListener) -> None:
        def tps(parts: list[KafkaTopicPartition]) -> list[TopicPartition]:
            return [(p.topic, p.partition) for p in parts]

        def assigned(parts: list[KafkaTopicPartition]) -> None:
            self._on_access(self._group, False)  # joined: READ on the group works
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

    def assign(self, starts: Mapping[TopicPartition, int]) -> None:
        """Read exactly these partitions from these offsets, outside any group's membership (commits still
        go to the configured group)."""
        parts = [KafkaTopicPartition(t, p, o) for (t, p), o in starts.items()]
        self._consumer.assign(parts)
        self._parts = _keyed(parts)

    def positions(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The next offset ``consume`` will return from each of ``tps`` (absent where none is known yet)."""
        parts = self._consumer.position([KafkaTopicPartition(t, p) for t, p in tps])
        return {(part.topic, part.partition): part.offset for part in parts if part.offset >= 0}

    def take_ends(self) -> dict[TopicPartition, int]:
        """Where the partitions whose end was reached since the last call ended (with ``ends=True``)."""
        if not self._ends:
            return {}
        ends, self._ends = self._ends, {}
        return ends

    def offsets(self) -> Offsets:
        """Lookups of offsets (watermarks, by time, committed) through this consumer."""
        return Offsets(self._consumer, redact=self._redact)

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
        if self._refused_topics and records:
            self._read_again({r.topic for r in records})
        return records

    def _read_again(self, topics: set[str]) -> None:
        for topic in self._refused_topics & topics:
            self._refused_topics.discard(topic)
            self._on_access(Permission("READ", "topic", topic), False)

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

    def note(self, notes: Mapping[TopicPartition, str]) -> None:
        """Commit each of these partitions' offsets with this text as its metadata from now on (a backfill
        records the range of its job there)."""
        self._notes = dict(notes)

    def store(self, offsets: dict[TopicPartition, int]) -> None:
        """Store the next offsets to commit (auto-commit sends them within a second)."""
        notes = self._notes
        # The client takes no None for metadata: a partition is built with its note only when it has one
        # (a backfill notes every partition it reads; the service none).
        parts = (
            [KafkaTopicPartition(t, p, o, notes[(t, p)]) for (t, p), o in offsets.items()]
            if notes
            else [KafkaTopicPartition(t, p, o) for (t, p), o in offsets.items()]
        )
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

    def _read_cause(self, text: str) -> None:
        """error_cb and log lines while starting: keep the first configuration fault they name."""
        if not self._starting or self._cause is not None:
            return  # running: librdkafka's errors during an outage cost nothing here
        if (cause := cause_of(self._redact(text), self._settings)) is not None:
            self._cause = (time.monotonic(), cause)

    def wait_ready(
        self, topics: list[str], timeout_s: float, stopped: Callable[[], bool] = lambda: False
    ) -> set[str] | None:
        """Block until a broker answers (``timeout_s`` 0: forever); return which of ``topics`` exist, or
        None once ``stopped()`` turns true. Raises BrokerUnavailableError when no broker answered in time,
        ConfigError naming the setting once librdkafka has named a fault of the configuration for
        ``CAUSE_AFTER_S`` (a wrong password, an untrusted certificate, TLS against plaintext: see
        ``kafka/causes.py``); with no timeout, that cause is logged once a minute instead."""
        deadline = time.monotonic() + timeout_s if timeout_s else float("inf")
        next_log = next_cause_log = 0.0
        try:
            while not stopped():
                try:
                    # Short attempts, so a stop request is noticed within a second.
                    timeout = min(1.0, max(0.1, deadline - time.monotonic()))
                    metadata = self._consumer.list_topics(timeout=timeout)
                    return {t for t in topics if t in metadata.topics and metadata.topics[t].error is None}
                except KafkaException as exc:
                    self._consumer.poll(0)  # serves error_cb and the log lines, where the cause is
                    now = time.monotonic()
                    if self._cause is not None and now - self._cause[0] >= CAUSE_AFTER_S:
                        cause = self._cause[1]
                        if timeout_s:
                            raise ConfigError(cause.setting, cause.reason) from None
                        if now >= next_cause_log:
                            next_cause_log = now + 60
                            _log.error("startup_blocked", setting=cause.setting, cause=cause.reason)
                    self._waited(exc, deadline, timeout_s)
                    if now >= next_log:
                        next_log = now + 30
                        error = self._redact(exc.args[0].str())
                        _log.warning("waiting_for_brokers", bootstrap=self._bootstrap, error=error)
            return None
        finally:
            self._starting = False  # started (or stopping): causes are read at start-up only
            self._client_log.tap = None

    def _waited(self, exc: KafkaException, deadline: float, timeout_s: float) -> None:
        if time.monotonic() >= deadline:
            raise BrokerUnavailableError(
                f"no broker at {self._bootstrap} answered within {timeout_s:g}s "
                f"({KafkaSettings.env('startup_timeout_s')}): {self._redact(exc.args[0].str())}"
            ) from None

    def topic_errors(self, topics: list[str], timeout_s: float = 10.0) -> dict[str, str]:
        """Each of ``topics`` asked for by name, as a full listing leaves out those this principal may not
        DESCRIBE: its error's name (``UNKNOWN_TOPIC_OR_PART``, ``TOPIC_AUTHORIZATION_FAILED``), or "" when
        it is there after all. A broker that does not answer gives no entry."""
        errors = {}
        for topic in topics:
            try:
                metadata = self._consumer.list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
            except KafkaException:
                continue
            if metadata is not None:
                errors[topic] = metadata.error.name() if metadata.error is not None else ""
        return errors

    def pause(self) -> None:
        """Stop fetching from every assigned partition; ``consume`` keeps serving the group protocol."""
        self._consumer.pause(self._consumer.assignment())

    def pause_partitions(self, tps: Sequence[TopicPartition]) -> None:
        """Stop fetching from ``tps``."""
        self._consumer.pause([KafkaTopicPartition(t, p) for t, p in tps])

    def resume(self, tps: list[TopicPartition] | None = None) -> None:
        """Fetch again from ``tps`` (default: every assigned partition). librdkafka keeps a partition's
        paused flag across a revoke and a re-assignment, so re-assigned partitions must be resumed by name."""
        parts = self._consumer.assignment() if tps is None else [KafkaTopicPartition(t, p) for t, p in tps]
        try:
            self._consumer.resume(parts)
        except KafkaException as exc:  # a partition never seen before has no pause flag to clear
            _log.debug("resume_failed", error=self._redact(str(exc)))

    def close(self) -> None:
        self._consumer.close()

    def _on_message_error(self, msg: Message, err: KafkaError) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            if self._ends is not None:
                self._ends[(msg.topic(), msg.partition())] = msg.offset()  # type: ignore[index,assignment]
            return
        if (refused := refused_reading(err, msg.topic(), self._group.name)) is not None:
            if refused.resource == "topic":
                self._refused_topics.add(refused.name)
            self._on_access(refused, True)  # logged there, by permission, not per error
            return
        error = self._redact(err.str())
        _log.warning("consume_error", topic=msg.topic(), partition=msg.partition(), error=error)


def to_record(msg: Message, received: float) -> InputRecord:
    """Copy a consumed message out of the client. Headers that cannot be read (a name that is not UTF-8)
    are reported in ``header_error`` rather than raised, so the record can be dead-lettered."""
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
    )


def _keyed(parts: list[KafkaTopicPartition]) -> dict[TopicPartition, KafkaTopicPartition]:
    """Each partition by its coordinates, without an offset (``position`` fills that in)."""
    return {(p.topic, p.partition): KafkaTopicPartition(p.topic, p.partition) for p in parts}
