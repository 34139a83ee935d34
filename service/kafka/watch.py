"""What the clients report about themselves: fatal errors (``error_cb``), broker states (``stats_cb``) and
the consumer's auto-commits (``on_commit``)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import structlog
from confluent_kafka import KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition

from service.errors import FatalKafkaError

_log = structlog.get_logger("microbatch.kafka")


class _Broker(msgspec.Struct):
    state: str


class BrokerStats(msgspec.Struct):
    """The part of librdkafka's statistics JSON that is read: each broker connection's state."""

    brokers: dict[str, _Broker] = {}


class StatsWatch:
    """A client's ``stats_cb``: tells ``on_brokers(up)`` whether any broker connection is up, from each
    statistics report (one that cannot be read tells nothing)."""

    def __init__(self, on_brokers: Callable[[bool], None] = lambda _up: None) -> None:
        self._on_brokers = on_brokers

    def __call__(self, stats_json: str) -> None:
        try:
            brokers = msgspec.json.decode(stats_json, type=BrokerStats).brokers
        except msgspec.DecodeError:
            return
        self._on_brokers(any(b.state == "UP" for b in brokers.values()))


class FatalWatch:
    """A client's ``error_cb``: remembers the first fatal error so the loop can stop on it, and tells
    ``on_brokers(False)`` when every broker is down. Other errors are transient (librdkafka retries them)
    and already reach the log through the client's logger. ``redact`` takes configured values out of
    librdkafka's text."""

    def __init__(
        self,
        client: str,
        on_brokers: Callable[[bool], None] = lambda _up: None,
        redact: Callable[[str], str] = lambda text: text,
        on_error: Callable[[str], None] = lambda _text: None,
    ) -> None:
        self._client = client
        self._on_brokers = on_brokers
        self._redact = redact
        self._on_error = on_error
        self._error: KafkaError | None = None

    def __call__(self, err: KafkaError) -> None:
        self._on_error(err.str())
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self._on_brokers(False)
        if err.fatal() and self._error is None:
            self._error = err
            _log.error(
                "kafka_fatal_error", client=self._client, error=self._redact(err.str()), code=err.name()
            )

    def check(self) -> None:
        """Raise FatalKafkaError if a fatal error was reported."""
        if self._error is not None:
            err = self._error
            raise FatalKafkaError(self._client, err.code(), err.name(), self._redact(err.str()))


class CommitWatch:
    """A consumer's ``on_commit``: tells ``on_commit(ok)`` of every auto-commit's result (from inside
    ``consume`` and ``close``). Failing is logged once when it starts and once when it ends: it retries
    every interval, and the stored offsets wait meanwhile (a duplicate at worst)."""

    def __init__(
        self,
        on_commit: Callable[[bool], None] = lambda _ok: None,
        redact: Callable[[str], str] = lambda text: text,
    ) -> None:
        self._on_commit = on_commit
        self._redact = redact
        self._ok = True  # the last auto-commit's result: a failure is logged when it starts

    def __call__(self, err: KafkaError | None, parts: list[KafkaTopicPartition]) -> None:
        if err is not None and err.code() == KafkaError._NO_OFFSET:
            return  # nothing new was stored since the last one
        error = err if err is not None else next((p.error for p in parts if p.error is not None), None)
        ok = error is None
        if not ok and self._ok:
            _log.warning("auto_commit_failed", error=self._redact(str(error)))
        elif ok and not self._ok:
            _log.info("auto_commit_resumed")
        self._ok = ok
        self._on_commit(ok)
