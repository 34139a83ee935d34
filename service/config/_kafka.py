"""The connection to the cluster, and the one place Kafka settings become librdkafka options."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator

from service.config._base import Section, not_below

KafkaValue = str | int | float | bool

# librdkafka options the at-least-once contract rests on; no *_EXTRA setting may change them.
GUARANTEE_KEYS = frozenset(
    {
        "enable.auto.offset.store",
        "enable.auto.commit",
        "acks",
        "enable.idempotence",
        "transactional.id",
        "share.acknowledgement.mode",
    }
)
EXTRA_FIELDS = ("consumer_extra", "producer_extra", "extra")
# Consumer options the broker decides under the KIP-848 protocol (librdkafka refuses them there).
BROKER_DECIDES = frozenset(
    {"partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms", "group.protocol.type"}
)
# Each secret, and the setting that may name a file holding it instead.
SECRET_FILES = {
    "sasl_password": "sasl_password_file",
    "sasl_oauthbearer_client_secret": "sasl_oauthbearer_client_secret_file",
    "ssl_key_password": "ssl_key_password_file",
}
# librdkafka options whose values are credentials (sasl.password, ssl.key.password, sasl.oauthbearer.*
# secrets, PEM keys, JAAS strings).
_PRIVATE_OPTION = re.compile(r"password|secret|token|credential|jaas|\bkey\b|pem$", re.IGNORECASE)

REDACTED = "***"
"""What stands for a secret wherever one would show: librdkafka's lines, `microbatch config`."""
_NUMBER = re.compile(r"[-+]?\d+(\.\d+)?")
# A configured value shorter than this is hidden only where it stands as a word of its own: "1" must not
# turn "10" into "***0".
_ANYWHERE_FROM = 8


class KafkaSettings(Section):
    """Connection to the cluster; shared by the consumer and the producer."""

    bootstrap_servers: str = "127.0.0.1:9092"
    """The brokers to connect to first, ``host:port`` each, comma-separated."""
    group_id: str = "microbatch"
    """The consumer group; replicas of one service share it and split the input partitions."""
    group_instance_id: str | None = Field(None, min_length=1, max_length=249)
    """Static membership (``group.instance.id``): a name of this replica's own, stable across its restarts
    (a StatefulSet's pod name), so that a restart within ``SESSION_TIMEOUT_MS`` moves no partition.
    Unset: a new member at every start. Two live replicas must never share one."""
    instance_id: str | None = Field(None, min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$")
    """This replica's own name, stable across its restarts: with exactly-once delivery, its producer's
    transactional id is ``<GROUP_ID>.<INSTANCE_ID>``, and a restart aborts what its predecessor left
    open. Unset: the host name (the pod name under Kubernetes). Two live replicas must never share one:
    each fences the other."""
    group_protocol: Literal["classic", "consumer"] = "classic"
    """The consumer group protocol: ``classic``, or ``consumer``, the broker-driven one of KIP-848 (Kafka
    4.0+), where the broker assigns partitions and sets the session timeout
    (``group.consumer.session.timeout.ms``), so ``SESSION_TIMEOUT_MS`` and client-side assignors are not
    taken with it."""
    group_type: Literal["consumer", "share"] = "consumer"
    """How replicas split the input: ``consumer``, a consumer group (each partition read by one replica, in
    order), or ``share``, a share group (KIP-932, Kafka 4.2+; experimental while the client calls it a
    preview): the brokers hand each record to one member, so replicas may outnumber partitions; no order,
    no exactly-once, no assembled rows. docs/RELIABILITY.md, *Share groups*."""
    share_members: int = Field(4, ge=1, le=16)
    """Share groups: the members each replica runs. A member fetches again only once every record of its
    last fetch is acknowledged, so others fetch while its records compute (docs/BENCHMARKS.md, *Share
    groups*, has the sweep)."""
    share_max_records: int = Field(64, ge=1, le=10_000)
    """Share groups: the most records one member acquires per fetch (``max.poll.records``); what a
    replica holds at once is at most this times ``SHARE_MEMBERS``, and all of it must be answered within
    the group's record lock (``share.record.lock.duration.ms``, 30 s by default)."""
    client_id: str = "microbatch"
    """The client id of both the consumer and the producer, as the brokers' logs and quotas see it."""
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    """How to talk to the brokers: in the clear, over TLS, with SASL authentication, or both."""
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = None
    """The SASL mechanism, for ``SASL_PLAINTEXT`` and ``SASL_SSL``."""
    sasl_username: str | None = None
    """The SASL user name (``PLAIN``, ``SCRAM-*``)."""
    sasl_password: SecretStr | None = None
    """The SASL password; never logged (``SASL_PASSWORD_FILE``: from a file)."""
    sasl_password_file: Path | None = None
    """A file holding the password instead (a Kubernetes Secret volume): read at start-up, its trailing
    newline dropped. Every secret has such a setting (``SASL_OAUTHBEARER_CLIENT_SECRET_FILE``,
    ``SSL_KEY_PASSWORD_FILE``), and setting both the secret and its file is an error."""
    sasl_oauthbearer_token_endpoint_url: str | None = None
    """``OAUTHBEARER`` with OIDC client credentials: the token endpoint (an ``https://`` URL)."""
    sasl_oauthbearer_client_id: str | None = None
    """``OAUTHBEARER`` with OIDC: the client id the token is asked for."""
    sasl_oauthbearer_client_secret: SecretStr | None = None
    """``OAUTHBEARER`` with OIDC: the client's secret; never logged."""
    sasl_oauthbearer_client_secret_file: Path | None = None
    """A file holding the OIDC client secret instead, its trailing newline dropped."""
    sasl_oauthbearer_scope: str | None = None
    """``OAUTHBEARER`` with OIDC: the scope to ask the token for (unset: the provider's default)."""
    ssl_ca_file: Path | None = None
    """PEM file of the CA(s) that signed the brokers' certificates (unset: the system's CAs)."""
    ssl_cert_file: Path | None = None
    """PEM client certificate, for brokers that require one (mTLS); goes with ``SSL_KEY_FILE``."""
    ssl_key_file: Path | None = Field(None, validate_default=True)
    """PEM private key of the client certificate; set both or neither."""
    ssl_key_password: SecretStr | None = None
    """The passphrase of an encrypted ``SSL_KEY_FILE``; never logged."""
    ssl_key_password_file: Path | None = None
    """A file holding the key's passphrase instead, its trailing newline dropped."""
    ssl_endpoint_identification: bool = True
    """Check that the broker's certificate names the host connected to (``SSL``, ``SASL_SSL``); off only
    for certificates without the right names."""
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    """Where a new consumer group starts reading: the oldest message kept, or only new ones."""
    startup_timeout_s: float = Field(30.0, ge=0)
    """How long start-up waits for a broker to answer, in seconds; 0 waits forever."""
    session_timeout_ms: int = Field(45_000, ge=1_000)
    """The consumer group's session timeout, in milliseconds: a replica silent this long is evicted (with
    ``GROUP_INSTANCE_ID``, also how long a restarting replica keeps its partitions). Classic protocol
    only."""
    max_poll_interval_ms: int = Field(300_000, ge=1_000, validate_default=True)
    """The longest time between two polls before the consumer leaves its group, in milliseconds; at least
    ``SESSION_TIMEOUT_MS``."""
    extra: dict[str, KafkaValue] = Field(default_factory=dict)
    """librdkafka options passed to both clients, as a JSON object (``{"fetch.min.bytes": 1024}``); they
    win over the service's own choices, except the four the delivery guarantee rests on."""
    consumer_extra: dict[str, KafkaValue] = Field(default_factory=dict)
    """librdkafka options for the consumer only, as a JSON object; like ``EXTRA``."""
    producer_extra: dict[str, KafkaValue] = Field(default_factory=dict)
    """librdkafka options for the producer only, as a JSON object; like ``EXTRA``."""

    @field_validator(*EXTRA_FIELDS)
    @classmethod
    def _keeps_the_guarantee(cls, value: dict[str, KafkaValue]) -> dict[str, KafkaValue]:
        locked = sorted(set(value) & GUARANTEE_KEYS)
        if locked:
            raise ValueError(f"{locked} cannot be overridden: the delivery guarantee depends on them")
        return value

    @field_validator("extra", "consumer_extra")
    @classmethod
    def _not_the_brokers_options(
        cls, value: dict[str, KafkaValue], info: ValidationInfo
    ) -> dict[str, KafkaValue]:
        """With the broker-driven protocol, the group options it decides may not come from the client."""
        taken = sorted(set(value) & BROKER_DECIDES)
        if taken and info.data.get("group_protocol") == "consumer":
            raise ValueError(f"{taken}: the broker decides them with {cls.env('group_protocol')}=consumer")
        return value

    @field_validator("ssl_ca_file", "ssl_cert_file")
    @classmethod
    def _readable(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError("no such file")
        return value

    @field_validator("ssl_key_file")
    @classmethod
    def _with_its_certificate(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if (value is None) != (info.data.get("ssl_cert_file") is None):
            raise ValueError(f"goes with {cls.env('ssl_cert_file')}: set both, or neither")
        return cls._readable(value)

    @field_validator(*SECRET_FILES.values())
    @classmethod
    def _secret_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        """A readable, non-empty file, and no secret set beside it (its value is read after validation)."""
        if value is None:
            return None
        secret = next(k for k, v in SECRET_FILES.items() if v == info.field_name)
        if info.data.get(secret) is not None:
            raise ValueError(f"set this or {cls.env(secret)}, not both")
        try:
            text = value.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ValueError("no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read the file ({type(exc).__name__})") from None
        if not text.strip():
            raise ValueError("the file is empty")
        return value

    @model_validator(mode="after")
    def _secrets_from_files(self) -> KafkaSettings:
        """Each ``*_FILE`` setting fills its secret: the file's text, its trailing newline dropped."""
        for secret, file_field in SECRET_FILES.items():
            path = getattr(self, file_field)
            if path is not None:  # the sections are frozen once built: this is their building
                object.__setattr__(self, secret, SecretStr(path.read_text(encoding="utf-8").rstrip("\r\n")))
        return self

    @field_validator("max_poll_interval_ms")
    @classmethod
    def _poll_above_session(cls, value: int, info: ValidationInfo) -> int:
        return not_below(cls, value, info, "session_timeout_ms")

    @field_validator("session_timeout_ms")
    @classmethod
    def _not_the_brokers_session(cls, value: int, info: ValidationInfo) -> int:
        """Runs only when set: with the broker-driven protocol, the session timeout is the broker's."""
        if info.data.get("group_protocol") == "consumer":
            raise ValueError(
                f"the broker sets it with {cls.env('group_protocol')}=consumer "
                "(group.consumer.session.timeout.ms): unset it"
            )
        return value

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
        if self.sasl_oauthbearer_token_endpoint_url:
            conf["sasl.oauthbearer.method"] = "oidc"
            conf["sasl.oauthbearer.token.endpoint.url"] = self.sasl_oauthbearer_token_endpoint_url
        for key, value in (
            ("sasl.oauthbearer.client.id", self.sasl_oauthbearer_client_id),
            ("sasl.oauthbearer.client.secret", self.sasl_oauthbearer_client_secret),
            ("sasl.oauthbearer.scope", self.sasl_oauthbearer_scope),
            ("ssl.ca.location", self.ssl_ca_file),
            ("ssl.certificate.location", self.ssl_cert_file),
            ("ssl.key.location", self.ssl_key_file),
            ("ssl.key.password", self.ssl_key_password),
        ):
            if value is not None:
                conf[key] = value.get_secret_value() if isinstance(value, SecretStr) else str(value)
        if self.security_protocol in ("SSL", "SASL_SSL"):
            conf["ssl.endpoint.identification.algorithm"] = (
                "https" if self.ssl_endpoint_identification else "none"
            )
        return conf | self.extra

    def consumer_config(self) -> dict[str, KafkaValue]:
        """librdkafka consumer options. Offsets are stored only by the service, after delivery."""
        group: dict[str, KafkaValue] = {"group.protocol": self.group_protocol}
        if self.group_protocol == "classic":
            # Incremental rebalancing: a replica joining or leaving moves only the partitions that change
            # owner, and the others keep flowing (scaling out on lag must not stop the world). The
            # consumer protocol is incremental by design, its assignor and session the broker's.
            group |= {
                "partition.assignment.strategy": "cooperative-sticky",
                "session.timeout.ms": self.session_timeout_ms,
            }
        if self.group_instance_id is not None:
            group["group.instance.id"] = self.group_instance_id
        return (
            self.client_config()
            | {
                "group.id": self.group_id,
                "auto.offset.reset": self.auto_offset_reset,
                "enable.auto.offset.store": False,
                # Auto-commit only ever commits offsets the service stored, i.e. delivered ones.
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 1000,
                "max.poll.interval.ms": self.max_poll_interval_ms,
            }
            | group
            | self.consumer_extra
        )

    def share_consumer_config(self) -> dict[str, KafkaValue]:
        """librdkafka share consumer options: every record acknowledged by the service, once answered."""
        return (
            self.client_config()
            | {
                "group.id": self.group_id,
                "share.acknowledgement.mode": "explicit",
                "max.poll.records": self.share_max_records,
                "max.poll.interval.ms": self.max_poll_interval_ms,
            }
            | self.consumer_extra
        )

    def transactional_id(self) -> str:
        """The exactly-once producer's ``transactional.id``: the group's, then this replica's name (the host
        name unless ``INSTANCE_ID`` says otherwise), so two services on one host never share one."""
        return f"{self.group_id}.{self.instance_id or socket.gethostname()}"

    def producer_config(self, transactional: bool = False) -> dict[str, KafkaValue]:
        """librdkafka producer options: idempotent, acks=all, so a retry can neither lose nor reorder;
        ``transactional``: with this replica's transactional id (exactly-once)."""
        txn: dict[str, KafkaValue] = {"transactional.id": self.transactional_id()} if transactional else {}
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
            | txn
            | self.producer_extra
        )

    def summary(self) -> dict[str, Any]:
        """What start-up logs: everything but secrets."""
        return {
            "bootstrap_servers": self.bootstrap_servers,
            "group_id": self.group_id,
            "group_instance_id": self.group_instance_id,
            "instance_id": self.instance_id,
            "group_protocol": self.group_protocol,
            "group_type": self.group_type,
            "security_protocol": self.security_protocol,
            "sasl_mechanism": self.sasl_mechanism,
            "sasl_username": self.sasl_username,
            "ssl_ca_file": None if self.ssl_ca_file is None else str(self.ssl_ca_file),
            "ssl_cert_file": None if self.ssl_cert_file is None else str(self.ssl_cert_file),
        }

    def private_values(self) -> list[str]:
        """Every value a client message must not show: the secrets, and every text value given through
        the ``*_EXTRA`` settings (any of them may be a passphrase under a mistyped key, and librdkafka
        quotes values it rejects). Numbers, booleans and words under three characters are left visible:
        hiding ``5`` would hide partition ``[5]`` too, and no passphrase is that short."""
        values = [v for name in EXTRA_FIELDS for k, v in getattr(self, name).items() if _hideable(k, v)]
        values += [secret.get_secret_value() for name in SECRET_FILES if (secret := getattr(self, name))]
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
    return lambda text: pattern.sub(REDACTED, text)


def redact(text: str, values: Iterable[str]) -> str:
    """``text`` through :func:`redactor`."""
    return redactor(values)(text)
