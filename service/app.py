"""``microbatch run``: build the pieces from settings, warm the model up, run the loop until a signal."""

from __future__ import annotations

import gc
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import structlog
from confluent_kafka import KafkaException

from service.config import KafkaSettings, Settings, check_run_settings
from service.engine import Engine
from service.errors import ConfigError, UnknownTopicError
from service.health import Health
from service.metrics import Metrics
from service.outputs import ModelRef
from service.pipeline import Pipeline
from service.processors import ModelInfo, Processor, load_processor, prepare
from service.reference import choose_model
from service.server import MetricsServer
from service.sink import Sink
from service.source import Source

_log = structlog.get_logger("microbatch")

_PROCESSOR_FIELDS = ("features", "text_field", "tokenizer", "max_length", "labels")


def load_model(settings: Settings) -> tuple[Engine, Processor, ModelRef]:
    """Load the configured model and its processor. Raises ConfigError naming the setting at fault."""
    choice = choose_model(settings.model)
    model = settings.model
    engine = Engine(choice.path, model.providers, model.intra_op_threads, model.allow_spinning)
    name = choice.name or engine.metadata.get("microbatch.name") or Path(choice.path).stem
    version = choice.version or engine.metadata.get("microbatch.version") or "unversioned"
    info = ModelInfo(
        name=name,
        model_dir=Path(choice.path).parent,
        input_names=engine.input_names,
        output_names=engine.output_names,
        metadata=engine.metadata,
        settings={k: getattr(settings.model, k) for k in _PROCESSOR_FIELDS},
    )
    processor = load_processor(settings.model.processor, info)
    return engine, processor, ModelRef(name, version, engine.provider)


def warm_up(engine: Engine, processor: Processor, sizes: set[int], setting: str) -> None:
    """Run each batch size once so the first real batch does not pay for allocation and kernel choice.
    A model that rejects what its processor feeds it is a configuration error, found here at start-up."""
    for size in sorted(sizes):
        try:
            items = prepare(processor, [processor.sample()] * size)
            processor.postprocess(engine.run(processor.preprocess(items)), items)
        except Exception as exc:
            raise ConfigError(setting, f"the model rejects what its processor feeds it: {exc}") from None


def check_topics(source: Source, settings: Settings, stopped: Callable[[], bool]) -> bool:
    """Wait for the brokers, then insist the input topics exist; a missing output or DLQ topic is only
    a warning (the broker may auto-create it; if not, deliveries retry and hold the commits back).
    Returns False if a stop was requested while waiting."""
    outputs = [settings.output.topic, settings.dlq.topic]
    found = source.wait_ready(settings.input.topics + outputs, settings.kafka.startup_timeout_s, stopped)
    if found is None:
        return False
    missing = [t for t in settings.input.topics if t not in found]
    if missing:
        raise UnknownTopicError(f"input topic(s) {missing} do not exist (MICROBATCH_INPUT__TOPICS)")
    for topic in outputs:
        if topic not in found:
            _log.warning("output_topic_missing", topic=topic)
    return True


def run_service(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT, then drain, commit and close. Returns the process exit code.

    The signal handlers go in first, so a stop during start-up (e.g. while waiting for brokers) is a
    clean exit 0 too. The metrics port opens next, so the probes answer while the model loads (live,
    not ready) and a port already taken stops start-up at once.
    """
    check_run_settings(settings)
    stopping = threading.Event()
    pipeline: Pipeline | None = None

    def _stop(_signum: int, _frame: object) -> None:
        # Only flags: logging here could deadlock on the logger's lock held by the interrupted code.
        stopping.set()
        if pipeline is not None:
            pipeline.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)

    metrics = Metrics()
    health = Health(settings.metrics.liveness_timeout_s, settings.metrics.broker_timeout_s)
    metrics.ready.set_function(lambda: float(health.ready()[0]))
    server = start_server(settings, metrics, health)
    try:
        source, sink = build_clients(settings.kafka, health.brokers)
        engine, processor, model = load_model(settings)
        metrics.model_loaded(model.name, model.version, model.provider)
        sizes = {1, settings.batch.min_size, settings.batch.max_size}
        warm_up(engine, processor, sizes, _model_setting(settings))
        health.warmed_up = True
        if not check_topics(source, settings, stopping.is_set):
            source.close()
            return 0
        pipeline = Pipeline(settings, source, sink, engine, processor, model, metrics=metrics, health=health)
        if stopping.is_set():  # a signal between the check and the assignment above
            pipeline.stop()
        _log.info(
            "started",
            model=model.name,
            version=model.version,
            provider=model.provider,
            inputs=settings.input.topics,
            output=settings.output.topic,
            dlq=settings.dlq.topic,
            batch=settings.batch.model_dump(),
            kafka=settings.kafka.summary(),
            metrics_port=server.port if server else None,
        )
        # Everything built so far (model, clients, modules) lives as long as the process: keep it out of
        # the cycle collector's scans, and collect less often. The loop allocates a few objects per message
        # and makes almost no cycles (records are untracked msgspec Structs); measured +2-4% per-message
        # throughput.
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 100)
        pipeline.run()
        return 0
    finally:
        if server is not None:
            server.close()


def start_server(settings: Settings, metrics: Metrics, health: Health) -> MetricsServer | None:
    """The metrics and probes port, or None when ``MICROBATCH_METRICS__ENABLED`` is false. Raises
    ConfigError naming the port setting when it cannot be bound (taken, or not allowed)."""
    conf = settings.metrics
    if not conf.enabled:
        return None
    try:
        return MetricsServer(conf.host, conf.port, metrics.registry, health)
    except OSError as exc:
        raise ConfigError(
            "MICROBATCH_METRICS__PORT", f"cannot listen on {conf.host}:{conf.port}: {exc.strerror or exc}"
        ) from None


def build_clients(
    kafka: KafkaSettings, on_brokers: Callable[[bool], None] = lambda _up: None
) -> tuple[Source, Sink]:
    """Create both clients first, so librdkafka's own validation of the options (unknown keys, bad
    values in the *_EXTRA settings) stops start-up as a configuration error naming the variable."""
    try:
        return Source(kafka, on_brokers), Sink(kafka)
    except KafkaException as exc:
        message = exc.args[0].str()
        used = [n for n in ("consumer_extra", "producer_extra", "extra") if getattr(kafka, n)]
        named = [n for n in used if any(key in message for key in getattr(kafka, n))]
        culprit = (named or used or ["extra"])[0]  # librdkafka may name an alias, not the key given
        raise ConfigError(f"MICROBATCH_KAFKA__{culprit.upper()}", message) from None


def _model_setting(settings: Settings) -> str:
    """The setting to blame when the model rejects its processor's tensors."""
    if settings.model.features:
        return "MICROBATCH_MODEL__FEATURES"
    return "MICROBATCH_MODEL__PATH" if settings.model.path else "MICROBATCH_MODEL__NAME"
