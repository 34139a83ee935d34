"""service/kafka/startup.py without a broker: the causes read while starting, and the probe's answers
(topics found, a fault of the configuration, no broker in time, a stop) over a scripted consumer. The real
broker drives the same in tests/integration/test_service.py and test_security_faults.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import structlog
from confluent_kafka import KafkaError, KafkaException

from service.config import KafkaSettings
from service.errors import BrokerUnavailableError, ConfigError
from service.kafka import startup
from service.kafka.startup import CauseReader, StartupProbe
from service.observability.logs import RateLimitedClientLog

# What librdkafka says when the service speaks PLAINTEXT to a TLS listener (tests/unit/kafka/test_causes.py).
PLAIN_TO_TLS = (
    "127.0.0.1:19193/bootstrap: Disconnected: connection closed by peer: receive 0 after POLLIN (after 1ms "
    "in state APIVERSION_QUERY)"
)
DOWN = KafkaError(KafkaError._TRANSPORT, "Broker transport failure")


class ScriptedConsumer:
    """``list_topics`` fails until ``up``, then lists ``topics``; ``poll`` says ``says`` to the reader."""

    def __init__(self, causes: CauseReader, topics: dict[str, KafkaError | None], says: str = "") -> None:
        self.causes, self.topics, self.says = causes, topics, says
        self.up = False
        self.polls = 0

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> SimpleNamespace:
        if not self.up:
            raise KafkaException(DOWN)
        listed = {t: SimpleNamespace(error=e) for t, e in self.topics.items() if topic in (None, t)}
        return SimpleNamespace(topics=listed)

    def poll(self, _timeout: float) -> None:
        self.polls += 1
        if self.says:
            self.causes.read(self.says)


def probe(topics=None, says="") -> tuple[StartupProbe, ScriptedConsumer, CauseReader, RateLimitedClientLog]:
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    log = RateLimitedClientLog()
    causes = CauseReader(settings, lambda text: text, log)
    consumer = ScriptedConsumer(causes, topics or {}, says)
    ready = StartupProbe(consumer, causes, settings, lambda text: text)  # type: ignore[arg-type]
    return ready, consumer, causes, log


def test_the_first_cause_is_kept_while_starting_and_none_is_read_once_started():
    _probe, _consumer, causes, log = probe()
    assert log.tap == causes.read  # the client's log lines reach it
    causes.read("a line that names no fault")
    assert causes.first is None
    causes.read(PLAIN_TO_TLS)
    first = causes.first
    assert first is not None and first[1].setting == "MICROBATCH_KAFKA__SECURITY_PROTOCOL"
    causes.read(PLAIN_TO_TLS)
    assert causes.first is first  # the first one is kept
    causes.stop()
    assert log.tap is None


def test_a_started_reader_reads_nothing():
    _probe, _consumer, causes, _log = probe()
    causes.stop()
    causes.read(PLAIN_TO_TLS)
    assert causes.first is None


def test_the_topics_that_exist_once_a_broker_answers():
    topics = {"in": None, "out": None, "dlq": KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)}
    ready, consumer, causes, _log = probe(topics)
    consumer.up = True
    assert ready.wait_ready(["in", "out", "dlq", "gone"], 5) == {"in", "out"}
    causes.read(PLAIN_TO_TLS)
    assert causes.first is None  # started: causes are read at start-up only


def test_each_topic_asked_by_name_names_its_error():
    topics = {"in": None, "secret": KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)}
    ready, consumer, _causes, _log = probe(topics)
    assert ready.topic_errors(["in"], 0.1) == {}  # no broker answers: no entry
    consumer.up = True
    assert ready.topic_errors(["in", "secret", "gone"]) == {"in": "", "secret": "TOPIC_AUTHORIZATION_FAILED"}


def test_a_fault_of_the_configuration_stops_start_up_naming_the_setting(monkeypatch):
    monkeypatch.setattr(startup, "CAUSE_AFTER_S", 0.0)
    ready, _consumer, _causes, _log = probe(says=PLAIN_TO_TLS)
    with pytest.raises(ConfigError) as info:
        ready.wait_ready(["in"], 30)
    assert info.value.setting == "MICROBATCH_KAFKA__SECURITY_PROTOCOL"


def test_no_broker_in_time_is_unavailable():
    ready, _consumer, _causes, _log = probe()
    with pytest.raises(BrokerUnavailableError, match=r"no broker at 127\.0\.0\.1:1 answered within 0\.01s"):
        ready.wait_ready(["in"], 0.01)


def test_without_a_timeout_a_fault_is_logged_until_a_stop_ends_the_wait(monkeypatch):
    monkeypatch.setattr(startup, "CAUSE_AFTER_S", 0.0)
    ready, consumer, _causes, _log = probe(says=PLAIN_TO_TLS)
    with structlog.testing.capture_logs() as logs:
        assert ready.wait_ready(["in"], 0, stopped=lambda: consumer.polls >= 3) is None
    assert consumer.polls == 3
    blocked = [line for line in logs if line["event"] == "startup_blocked"]
    assert [line["setting"] for line in blocked] == ["MICROBATCH_KAFKA__SECURITY_PROTOCOL"]  # once a minute
