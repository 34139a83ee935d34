"""Settings: one class per concern, nested under one root :class:`Settings`.

Every value comes from environment variables named ``MICROBATCH_<SECTION>__<FIELD>`` (e.g.
``MICROBATCH_BATCH__MAX_SIZE``) or from an optional ``.env`` file. Build the settings once in ``main()`` with
:func:`load_settings` and pass them down; nothing here is module-global.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from service.errors import ConfigError

ENV_PREFIX = "MICROBATCH_"
ENV_DELIMITER = "__"

_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_PROVIDER_ALIASES = {
    "cuda": "CUDAExecutionProvider",
    "cpu": "CPUExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
}

KafkaValue = str | int | float | bool

# librdkafka options the at-least-once contract rests on; no *_EXTRA setting may change them.
_GUARANTEE_KEYS = {"enable.auto.offset.store", "enable.auto.commit", "acks", "enable.idempotence"}


def _split_list(value: Any) -> Any:
    """Accept ``a,b,c`` as well as a JSON list, so ``MICROBATCH_INPUT__TOPICS=logs,metrics`` just works."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


CsvList = Annotated[list[str], NoDecode]


def _check_topic(name: str) -> str:
    if not _TOPIC_RE.match(name) or name in {".", ".."}:
        raise ValueError(f"{name!r} is not a legal Kafka topic name (letters, digits, '.', '_', '-'; 1-249)")
    return name


TopicName = Annotated[str, AfterValidator(_check_topic)]


def _not_below(value: int, info: Any, other: str, other_env: str) -> int:
    """Cross-field bound for a field validator: ``value`` may not be below the already validated ``other``."""
    low = info.data.get(other)
    if low is not None and value < low:
        raise ValueError(f"must be >= {other_env} ({low})")
    return value


class _Section(BaseModel):
    # A misspelt variable (MICROBATCH_BATCH__MAX_SIZ) must fail loudly, not be ignored.
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaSettings(_Section):
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

    @field_validator("extra", "consumer_extra", "producer_extra")
    @classmethod
    def _keeps_the_guarantee(cls, value: dict[str, KafkaValue]) -> dict[str, KafkaValue]:
        locked = sorted(set(value) & _GUARANTEE_KEYS)
        if locked:
            raise ValueError(f"{locked} cannot be overridden: the delivery guarantee depends on them")
        return value

    @field_validator("max_poll_interval_ms")
    @classmethod
    def _poll_above_session(cls, value: int, info: Any) -> int:
        return _not_below(value, info, "session_timeout_ms", "MICROBATCH_KAFKA__SESSION_TIMEOUT_MS")

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


class InputSettings(_Section):
    """What to consume."""

    topics: CsvList = Field(default_factory=list)
    max_value_bytes: int = Field(1_048_576, ge=1)
    """Larger values go to the dead-letter topic as ``value_too_large``."""
    idle_poll_ms: int = Field(100, ge=1, le=10_000)
    """How long one consume call may block while no batch is open."""
    max_in_flight: int = Field(10_000, ge=1)
    """Consumed messages not yet acknowledged above which the consumer pauses (resumes at half)."""

    @field_validator("topics", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _split_list(value)

    @field_validator("topics")
    @classmethod
    def _legal(cls, value: list[str]) -> list[str]:
        return [_check_topic(t) for t in value]


class OutputSettings(_Section):
    """Where results go."""

    topic: TopicName = "microbatch-results"
    flush_timeout_s: float = Field(30.0, gt=0)
    """Upper bound on waiting for outstanding deliveries at revoke and shutdown."""


class DlqSettings(_Section):
    """Where rejected messages go, unchanged, with error headers."""

    topic: TopicName = "microbatch-dlq"


class BatchSettings(_Section):
    """Micro-batching: a batch is cut at the target size, or when its oldest item has waited ``max_wait_ms``.

    With ``adaptive`` on, the target moves within [``min_size``, ``max_size``] with load (see
    ``service/adaptive.py``); off, it is always ``max_size``.
    """

    min_size: int = Field(4, ge=1, le=65_536)
    # validate_default: the check against min_size must run when only MIN_SIZE is set, too.
    max_size: int = Field(16, ge=1, le=65_536, validate_default=True)
    max_wait_ms: float = Field(50.0, gt=0, le=60_000)
    adaptive: bool = True
    """Move the target size with load (grow on backlog, halve when a batch overruns the SLO budget)."""
    latency_slo_ms: float = Field(250.0, gt=0, le=600_000, validate_default=True)
    """End-to-end latency target for the adaptive controller: a batch may take (SLO - MAX_WAIT_MS) / 2."""
    max_tokens: int = Field(8192, ge=0, le=16_777_216)
    """Cost cap per batch for processors that report a cost (text: count x longest item, in tokens); 0 =
    no cap. One item larger than the cap still runs, alone."""
    bucket_window: int = Field(256, ge=0, le=65_536)
    """For processors that report a cost: choose each batch among up to this many waiting messages, by
    similar cost (length), to cut padding. 0 keeps arrival order. Results of one partition may then come
    out of offset order (commits do not: see README)."""
    pipeline_depth: int = Field(2, ge=0, le=16)
    """Batches handed to the inference thread and not yet finished; while one runs, the next is consumed
    and pre-processed. 0 runs inference on the loop's own thread."""

    @field_validator("max_size")
    @classmethod
    def _not_below_min(cls, value: int, info: Any) -> int:
        return _not_below(value, info, "min_size", "MICROBATCH_BATCH__MIN_SIZE")

    @field_validator("latency_slo_ms")
    @classmethod
    def _above_the_window(cls, value: float, info: Any) -> float:
        wait = info.data.get("max_wait_ms")
        if info.data.get("adaptive") and wait is not None and value <= wait:
            raise ValueError(f"must be > MICROBATCH_BATCH__MAX_WAIT_MS ({wait:g})")
        return value


class ModelSettings(_Section):
    """Which model to serve and how to feed it.

    Either ``name`` picks a reference model shipped with the service, or ``path`` points at the user's own
    ONNX file. Processor fields left unset are read from the model's ``microbatch.*`` metadata.
    """

    name: str | None = None
    path: Path | None = None
    providers: CsvList = Field(default_factory=lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    intra_op_threads: int = Field(0, ge=0, le=256)
    """0 lets ONNX Runtime choose (one thread per core)."""
    allow_spinning: bool = False
    """Let idle ONNX Runtime threads spin-wait for work: lower latency per batch on dedicated cores, but
    it starves the loop thread when they share cores."""
    processor: str | None = None
    """``features``, ``text``, or ``package.module:Class`` for a processor of your own."""
    version: str | None = None
    features: CsvList | None = None
    text_field: str | None = None
    tokenizer: Path | None = None
    max_length: int | None = Field(None, ge=1, le=65_536)
    labels: CsvList | None = None

    @field_validator("providers", "features", "labels", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _split_list(value)

    @field_validator("providers")
    @classmethod
    def _canonical(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one execution provider is required")
        return [_PROVIDER_ALIASES.get(p.lower(), p) for p in value]

    @field_validator("path", "tokenizer")
    @classmethod
    def _exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"no such file: {value}")
        return value


class LogSettings(_Section):
    """Logging and the periodic stats line."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"
    """``auto`` is console on a terminal, JSON otherwise."""
    stats_interval_s: float = Field(10.0, gt=0)


class MetricsSettings(_Section):
    """The HTTP port for Prometheus metrics (``/metrics``) and the probes (``/healthz``, ``/readyz``)."""

    enabled: bool = True
    host: str = "0.0.0.0"
    """Listen address; ``0.0.0.0`` so that Prometheus and the kubelet can reach a container."""
    port: int = Field(9400, ge=0, le=65_535)
    """0 picks a free port (logged in the ``started`` line): for several services on one host."""
    liveness_timeout_s: float = Field(60.0, gt=0, le=3_600)
    """``/healthz`` fails when the consume loop has not come round for this long (a stuck loop)."""
    broker_timeout_s: float = Field(30.0, gt=0, le=3_600)
    """``/readyz`` fails when no broker has answered for this long."""


class Settings(BaseSettings):
    """The root of all settings."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_DELIMITER,
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        frozen=True,
    )

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    input: InputSettings = Field(default_factory=InputSettings)
    output: OutputSettings = Field(default_factory=OutputSettings)
    dlq: DlqSettings = Field(default_factory=DlqSettings)
    batch: BatchSettings = Field(default_factory=BatchSettings)
    model: ModelSettings = Field(default_factory=ModelSettings)
    log: LogSettings = Field(default_factory=LogSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)


def env_name(loc: tuple[str | int, ...]) -> str:
    """``("batch", "max_size", ...)`` -> ``MICROBATCH_BATCH__MAX_SIZE``: the name a user has to fix.
    Settings are two levels deep; anything further in the location is inside the value itself."""
    parts = [str(p).upper() for p in loc[:2]]
    return ENV_PREFIX + ENV_DELIMITER.join(parts)


def load_settings(**overrides: Any) -> Settings:
    """Read the environment (and ``.env``). Raises :class:`ConfigError` naming the first bad setting."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] not in {"missing", "extra_forbidden"} and "input" in err:
            message += f" (got {err['input']!r})"
        if err["type"] == "extra_forbidden":
            message = "unknown setting"
        raise ConfigError(env_name(err["loc"]), message) from None
    except ValueError as exc:  # pydantic-settings reports an undecodable JSON value this way
        raise ConfigError(_undecodable_setting(str(exc)), "not valid JSON") from None


def _undecodable_setting(text: str) -> str:
    """Find the variable behind pydantic-settings' 'error parsing value for field "kafka"'."""
    match = re.search(r'field "(\w+)"', text)
    if not match or match.group(1) not in Settings.model_fields:
        return ENV_PREFIX.rstrip("_")
    section = match.group(1)
    model = Settings.model_fields[section].annotation
    for field_name, info in model.model_fields.items():
        if NoDecode in info.metadata:  # lists take "a,b,c" and are never parsed as JSON here
            continue
        value = os.environ.get(env_name((section, field_name)))
        if value is None:
            continue
        try:
            json.loads(value)
        except ValueError:
            if get_origin(info.annotation) in (dict, list):
                return env_name((section, field_name))
    return env_name((section,))


def check_run_settings(settings: Settings) -> None:
    """What ``run`` needs beyond each setting's own checks: topics (:func:`require_topics`) and a
    liveness timeout longer than a commit may legitimately block."""
    require_topics(settings)
    flush, liveness = settings.output.flush_timeout_s, settings.metrics.liveness_timeout_s
    if settings.metrics.enabled and liveness <= flush:
        raise ConfigError(
            "MICROBATCH_METRICS__LIVENESS_TIMEOUT_S",
            f"must be > MICROBATCH_OUTPUT__FLUSH_TIMEOUT_S ({flush:g}): a commit waits up to that long for "
            f"the producer, and /healthz would fail meanwhile (got {liveness:g})",
        )


def require_topics(settings: Settings) -> None:
    """``run`` needs at least one input topic, and inputs must differ from the outputs."""
    if not settings.input.topics:
        raise ConfigError("MICROBATCH_INPUT__TOPICS", "at least one input topic is required")
    for name, topic in (("OUTPUT", settings.output.topic), ("DLQ", settings.dlq.topic)):
        if topic in settings.input.topics:
            raise ConfigError(f"MICROBATCH_{name}__TOPIC", f"{topic!r} is also an input topic")
