"""The connection to the cluster, and the one place Kafka settings become librdkafka options."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator

from service.config._base import Section, not_below

KafkaValue = str | int | float | bool

# librdkafka options the at-least-once contract rests on; no *_EXTRA setting may change them.
GUARANTEE_KEYS = frozenset({"enable.auto.offset.store", "enable.auto.commit", "acks", "enable.idempotence"})
EXTRA_FIELDS = ("consumer_extra", "producer_extra", "extra")
# librdkafka options whose values are credentials (sasl.password, ssl.key.password, sasl.oauthbearer.*
# secrets, PEM keys, JAAS strings).
_PRIVATE_OPTION = re.compile(r"password|secret|token|credential|jaas|\bkey\b|pem$", re.IGNORECASE)

_REDACTED = "***"
_NUMBER = re.compile(r"[-+]?\d+(\.\d+)?")
# A configured value shorter than this is hidden only where it stands as a word of its own: "1" must not
# turn "10" into "***0".
_ANYWHERE_FROM = 8


class KafkaSettings(Section):
    """Connection to the cluster; shared by the consumer and the producer."""

    bootstrap_servers: str = "127.0.0.1:9092"
    group_id: str = "microbatch"
    client_id: str = "microbatch"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    startup_timeout_s: float = Field(30.0, ge=0)
    """How long start-up waits for the brokers to answer; 0 waits forever."""
    session_timeout_ms: int = Field(45_000, ge=1_000)
    max_poll_interval_ms: int = Field(300_000, ge=1_000, validate_default=True)
    extra: dict[str, KafkaValue] = Field(default_factory=dict)
    """librdkafka options passed to both clients, as a JSON object."""
    consumer_extra: dict[str, KafkaValue] = Field(default_factory=dict)
    producer_extra: dict[str, KafkaValue] = Field(default_factory=dict)

    @field_validator(*EXTRA_FIELDS)
    @classmethod
    def _keeps_the_guarantee(cls, value: dict[str, KafkaValue]) -> dict[str, KafkaValue]:
        locked = sorted(set(value) & GUARANTEE_KEYS)
        if locked:
            raise ValueError(f"{locked} cannot be overridden: the delivery guarantee depends on them")
        return value

    @field_validator("max_poll_interval_ms")
    @classmethod
    def _poll_above_session(cls, value: int, info: ValidationInfo) -> int:
        return not_below(cls, value, info, "session_timeout_ms")

    def client_config(self) -> dict[str, KafkaValue]:
        """Connection options shared by every client (bootstrap servers, security, ``EXTRA``)."""
        conf: dict[str, KafkaValue] = {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": self.client_id,
            "security.protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            conf["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username:
            conf["sasl.username"] = self.sasl_username
        if self.sasl_password:
            conf["sasl.password"] = self.sasl_password.get_secret_value()
        return conf | self.extra

    def consumer_config(self) -> dict[str, KafkaValue]:
        """librdkafka consumer options. Offsets are stored only by the service, after delivery."""
        return (
            self.client_config()
            | {
                "group.id": self.group_id,
                "auto.offset.reset": self.auto_offset_reset,
                "enable.auto.offset.store": False,
                # Auto-commit only ever commits offsets the service stored, i.e. delivered ones.
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 1000,
                # Incremental rebalancing: a replica joining or leaving moves only the partitions that
                # change owner, and the others keep flowing (scaling out on lag must not stop the world).
                "partition.assignment.strategy": "cooperative-sticky",
                "session.timeout.ms": self.session_timeout_ms,
                "max.poll.interval.ms": self.max_poll_interval_ms,
            }
            | self.consumer_extra
        )

    def producer_config(self) -> dict[str, KafkaValue]:
        """librdkafka producer options: idempotent, acks=all, so a retry can neither lose nor reorder."""
        return (
            self.client_config()
            | {
                "enable.idempotence": True,
                "acks": "all",
                # A dead letter carries the original value, which may exceed librdkafka's 1 MB default;
                # the DLQ topic's own max.message.bytes then decides.
                "message.max.bytes": 16 * 1024 * 1024,
                "linger.ms": 5,
                "compression.type": "lz4",
            }
            | self.producer_extra
        )

    def summary(self) -> dict[str, Any]:
        """What start-up logs: everything but secrets."""
        return {
            "bootstrap_servers": self.bootstrap_servers,
            "group_id": self.group_id,
            "security_protocol": self.security_protocol,
        }

    def private_values(self) -> list[str]:
        """Every value a client message must not show: the secrets, and every text value given through
        the ``*_EXTRA`` settings (any of them may be a passphrase under a mistyped key, and librdkafka
        quotes values it rejects). Numbers, booleans and words under three characters are left visible:
        hiding ``5`` would hide partition ``[5]`` too, and no passphrase is that short."""
        values = [v for name in EXTRA_FIELDS for k, v in getattr(self, name).items() if _hideable(k, v)]
        if self.sasl_password:
            values.append(self.sasl_password.get_secret_value())
        return [str(v) for v in values if str(v)]

    def extra_setting(self, message: str) -> str:
        """The ``*_EXTRA`` variable most likely behind a librdkafka configuration error ``message``: the
        one naming a key the message names, else the first one set."""
        used = [name for name in EXTRA_FIELDS if getattr(self, name)]
        named = [name for name in used if any(key in message for key in getattr(self, name))]
        return self.env((named or used or ["extra"])[0])


def private_option(key: str) -> bool:
    """Whether the librdkafka option ``key`` holds a credential: never log or store its value."""
    return bool(_PRIVATE_OPTION.search(key))


def _hideable(key: str, value: object) -> bool:
    if private_option(key):
        return True
    text = str(value)
    return (
        isinstance(value, str)
        and len(text) >= 3
        and text.lower() not in {"true", "false"}
        and not _NUMBER.fullmatch(text)
    )


def private_values_of(conf: Mapping[str, object]) -> list[str]:
    """The values of a client configuration's credential options (see :func:`private_option`)."""
    return [str(v) for k, v in conf.items() if private_option(k) and isinstance(v, str | int) and str(v)]


def redactor(values: Iterable[str]) -> Callable[[str], str]:
    """A function that replaces each of ``values`` in a text by ``***`` wherever it appears (librdkafka
    writes both ``Invalid value "x"`` and ``fopen(x, r)``), a short value only where it stands as a word.
    One compiled pattern, so it is cheap enough for every failed delivery."""
    unique = sorted({v for v in values if v}, key=len, reverse=True)
    if not unique:
        return lambda text: text
    long = [re.escape(v) for v in unique if len(v) >= _ANYWHERE_FROM]
    short = [re.escape(v) for v in unique if len(v) < _ANYWHERE_FROM]
    parts = [f"(?:{'|'.join(long)})"] if long else []
    if short:
        parts.append(rf"(?<![\w.-])(?:{'|'.join(short)})(?![\w.-])")
    pattern = re.compile("|".join(parts))
    return lambda text: pattern.sub(_REDACTED, text)


def redact(text: str, values: Iterable[str]) -> str:
    """``text`` through :func:`redactor`."""
    return redactor(values)(text)
