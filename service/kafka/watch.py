"""What the clients report about themselves: fatal errors (``error_cb``) and broker states (statistics)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import structlog
from confluent_kafka import KafkaError

from service.errors import FatalKafkaError

_log = structlog.get_logger("microbatch.kafka")


class _Broker(msgspec.Struct):
    state: str


class BrokerStats(msgspec.Struct):
    """The part of librdkafka's statistics JSON that is read: each broker connection's state."""

    brokers: dict[str, _Broker] = {}


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
