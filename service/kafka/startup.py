"""The consumer's start-up: wait for a broker to answer, say which topics exist, and tell a fault of the
configuration (a wrong password, an untrusted certificate) from brokers that are merely not up yet.

librdkafka retries every failure for ever and ``list_topics`` only ever says "Broker transport failure":
the cause is in its ``error_cb`` errors and its log lines, which :class:`CauseReader` reads (through
``kafka/causes.py``) while the service starts, and no longer once it runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog
from confluent_kafka import Consumer, KafkaException

from service.config import KafkaSettings, Settings
from service.errors import BrokerUnavailableError, ConfigError, NotAuthorizedError, UnknownTopicError
from service.kafka.causes import Cause, cause_of
from service.observability.logs import RateLimitedClientLog

_log = structlog.get_logger("microbatch.source")

CAUSE_AFTER_S = 2.0
"""How long a configuration fault must persist at start-up before it stops the service: librdkafka names
it within a second, and one that clears as a broker finishes starting is not one."""


class CauseReader:
    """Reads the client's ``error_cb`` texts and log lines (``read``) until :meth:`stop`, and keeps the
    first configuration fault they name. Built before the client, whose callbacks it is given; it taps
    ``client_log`` itself."""

    def __init__(
        self, settings: KafkaSettings, redact: Callable[[str], str], client_log: RateLimitedClientLog
    ) -> None:
        self._settings = settings
        self._redact = redact
        self._client_log = client_log
        client_log.tap = self.read
        self._starting = True
        self.first: tuple[float, Cause] | None = None
        """When the first cause was seen (``time.monotonic()``), and what it is."""

    def read(self, text: str) -> None:
        """error_cb and log lines while starting: keep the first configuration fault they name."""
        if not self._starting or self.first is not None:
            return  # running: librdkafka's errors during an outage cost nothing here
        if (cause := cause_of(self._redact(text), self._settings)) is not None:
            self.first = (time.monotonic(), cause)

    def stop(self) -> None:
        """Started (or stopping): causes are read at start-up only."""
        self._starting = False
        self._client_log.tap = None


class StartupProbe:
    """Asks the cluster, through ``consumer``, whether it answers and which topics it has, before the
    loop starts. ``causes`` is the reader the consumer's callbacks feed."""

    def __init__(
        self,
        consumer: Consumer,
        causes: CauseReader,
        settings: KafkaSettings,
        redact: Callable[[str], str],
    ) -> None:
        self._consumer = consumer
        self._causes = causes
        self._bootstrap = settings.bootstrap_servers
        self._redact = redact

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
                    first = self._causes.first
                    if first is not None and now - first[0] >= CAUSE_AFTER_S:
                        cause = first[1]
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
            self._causes.stop()

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

    def require_topics(self, settings: Settings, stopped: Callable[[], bool]) -> bool:
        """Wait for the brokers (:meth:`wait_ready`), then insist the input topics exist: UnknownTopicError
        (exit 3) for one missing, NotAuthorizedError for one this principal may not DESCRIBE. A missing
        output or DLQ topic is only a warning (the broker may auto-create it; if not, deliveries retry and
        hold the commits back). Returns False if a stop was requested while waiting."""
        outputs = [settings.output.topic, settings.dlq.topic]
        inputs = settings.input.topics
        found = self.wait_ready(inputs + outputs, settings.kafka.startup_timeout_s, stopped)
        if found is None:
            return False
        missing = [t for t in inputs if t not in found]
        errors = self.topic_errors(missing + [t for t in outputs if t not in found])
        refused = [t for t in missing if errors.get(t) == _NOT_AUTHORIZED]
        if refused:
            raise NotAuthorizedError(
                f"not authorised to DESCRIBE input topic(s) {refused} ({settings.input.env('topics')}): "
                "grant the service's principal READ and DESCRIBE on them (docs/SECURITY.md); a topic it may "
                "not see is not said to exist or not"
            )
        if missing:
            raise UnknownTopicError(f"input topic(s) {missing} do not exist ({settings.input.env('topics')})")
        for topic in outputs:
            if topic in found:
                continue
            if errors.get(topic) == _NOT_AUTHORIZED:
                _log.error("output_topic_not_authorized", topic=topic, needs="WRITE and DESCRIBE")
            else:
                _log.warning("output_topic_missing", topic=topic)
        return True


_NOT_AUTHORIZED = "TOPIC_AUTHORIZATION_FAILED"
