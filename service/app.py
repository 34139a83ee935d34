"""``microbatch run``: build the parts from settings, warm the model up, run the loop until a signal.

This is where the real clients, the engine and telemetry meet the Protocols the loop drives
(``service/flow/ports.py``): the type checker holds them to those here.
"""

from __future__ import annotations

import argparse
import gc
import signal
import threading
import time
from collections.abc import Callable

import structlog
from confluent_kafka import KafkaException

from service.assemble import Assembler, rules_for
from service.config import AssembleSettings, KafkaSettings, Settings, check_run_settings, redact
from service.engine import Model, RowPlan, blamed_setting, load_model, model_setting, warm_up
from service.engine.binding import row_bucket
from service.engine.drain import drain_ceiling
from service.engine.memory import DeviceMemory
from service.engine.samples import check_at_start
from service.errors import EXIT_OK, ConfigError, NotAuthorizedError, UnknownTopicError
from service.flow.assembly import Assembly
from service.flow.backlog import Backlog
from service.flow.backpressure import BackPressure
from service.flow.batcher import Batcher
from service.flow.checkpoint import Checkpoint
from service.flow.decode import Decoder
from service.flow.encode import ModelRef
from service.flow.fields import FieldWatch
from service.flow.inference import Inference
from service.flow.inflight import executor_for
from service.flow.outputs import Outputs
from service.flow.pipeline import Pipeline
from service.flow.ports import EngineLike, ExecutorLike, SinkLike, SourceLike, TelemetryLike
from service.flow.records import Access, Decoded, InputRecord, no_access_report
from service.flow.sizing import BatchSizeController, FixedBatchSize, Sizing
from service.formats import Picker, load_format, parse_path
from service.kafka import Sink, Source
from service.kafka.causes import client_error_setting
from service.observability import AccessReport, Health, Metrics, MetricsServer, Telemetry
from service.processors import Processor

_log = structlog.get_logger("microbatch")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``run`` takes no flags: every setting is a MICROBATCH_* variable."""


def run(_args: argparse.Namespace, settings: Settings) -> int:
    return run_service(settings)


def build_pipeline(
    settings: Settings,
    source: SourceLike,
    sink: SinkLike,
    engine: EngineLike,
    processor: Processor,
    model: ModelRef,
    telemetry: TelemetryLike,
    clock: Callable[[], float] = time.monotonic,
    wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    executor: ExecutorLike | None = None,
    rows: RowPlan | None = None,
    drain_max: int | None = None,
) -> Pipeline:
    """The loop and its parts, wired from ``settings``; with ``rows``, items are rows assembled from the
    input's data points. ``drain_max`` is the drain ceiling (``service.engine.drain``; default
    ``BATCH__DRAIN_MAX_SIZE``, and without it no drain regime)."""
    batch = settings.batch
    controller: BatchSizeController | FixedBatchSize = (
        BatchSizeController(
            batch.min_size,
            batch.max_size,
            batch.latency_slo_ms / 1000,
            batch.max_wait_ms / 1000,
            drain_max=drain_max or batch.drain_max_size,
            natural=batch.natural,
        )
        if batch.adaptive
        else FixedBatchSize(batch.max_size)
    )
    cost = getattr(processor, "cost", None)
    batcher: Batcher[Decoded] = Batcher(
        controller.target,
        batch.max_wait_ms / 1000,
        clock,
        cost=(lambda d: cost(d.item)) if cost else None,
        max_cost=batch.max_tokens,
        window=batch.bucket_window,
    )
    sizing = Sizing(controller, clock)
    inference = Inference(
        engine,
        processor,
        executor or executor_for(batch.pipeline_depth),
        batch.pipeline_depth,
        clock,
        on_split=telemetry.split,
        on_out_of_memory=sizing.out_of_memory,
    )
    outputs = Outputs(sink, settings.output.topic, settings.dlq.topic, model, telemetry, clock, wall_ms)
    checkpoint = Checkpoint(
        source, sink, outputs.replace_refused, settings.output.flush_timeout_s, telemetry, clock
    )
    decoder: Decoder | Assembly
    if rows is None:
        fmt = load_format(settings.input.format)
        fields = getattr(processor, "fields", ())
        decoder = Decoder(
            fmt,
            processor,
            settings.input.max_value_bytes,
            Picker(settings.output.include_fields),
            FieldWatch(fields, telemetry.field_never_seen) if fields else None,
        )
    else:
        decoder = Assembly(
            load_format(settings.input.format, metrics=True),
            processor.parse_fields,  # type: ignore[attr-defined]  # plan_rows checked it is there
            assembler(settings.assemble, rows, clock),
            settings.input.max_value_bytes,
            telemetry,
        )
    return Pipeline(
        source,
        sink,
        topics=settings.input.topics,
        idle_poll_s=settings.input.idle_poll_ms / 1000,
        natural=settings.batch.natural,
        decoder=decoder,
        batcher=batcher,
        inference=inference,
        outputs=outputs,
        checkpoint=checkpoint,
        backpressure=BackPressure(source, settings.input.max_in_flight),
        sizing=sizing,
        backlog=Backlog(source, clock),
        telemetry=telemetry,
    )


def assembler(conf: AssembleSettings, rows: RowPlan, clock: Callable[[], float]) -> Assembler[InputRecord]:
    """The row assembler for the model's features, from ``MICROBATCH_ASSEMBLE__*``."""
    return Assembler(
        rules_for(rows.features),
        rows.required,
        key=parse_path(conf.key),
        interval_s=conf.interval_s,
        max_wait_s=conf.max_wait_s,
        grace_s=conf.grace_ms / 1000,
        fill=conf.fill,
        typical=rows.typical,
        clock=clock,
    )


def run_service(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT, then drain, commit and close. Returns the process exit code.

    The signal handlers go in first, so a stop during start-up (e.g. while waiting for brokers) is a
    clean exit 0 too. The metrics port opens next, so the probes answer while the model loads (live,
    not ready) and a port already taken stops start-up at once.
    """
    check_run_settings(settings)
    stop = Stop()
    metrics, health, server = observe(settings)
    try:
        source, sink = build_clients(
            settings.kafka, health.brokers, AccessReport(metrics, health), on_commit=metrics.committed
        )
        model = serve_model(settings, metrics)
        drain = drain_ceiling(model, settings.batch)
        _log.info(
            "batch_sizes",
            min_size=settings.batch.min_size,
            max_size=settings.batch.max_size,
            **drain.describe(),
        )
        check_at_start(settings, model)
        health.warmed_up = True
        if not check_topics(source, settings, stop.requested.is_set):
            source.close()
            return EXIT_OK
        telemetry = Telemetry(metrics, health, settings.log.stats_interval_s)
        pipeline = build_pipeline(
            settings,
            source,
            sink,
            model.engine,
            model.processor,
            model.ref,
            telemetry,
            rows=model.rows,
            drain_max=drain.size,
        )
        stop.attach(pipeline)
        _log.info(
            "started",
            model=model.ref.name,
            version=model.ref.version,
            provider=model.ref.provider,
            inputs=settings.input.topics,
            format=settings.input.format,
            output=settings.output.topic,
            dlq=settings.dlq.topic,
            batch=settings.batch.model_dump(),
            rows=None
            if model.rows is None
            else settings.assemble.model_dump() | {"required": model.rows.required},
            kafka=settings.kafka.summary(),
            metrics_port=server.port if server else None,
        )
        freeze_heap()
        pipeline.run()
        return EXIT_OK
    finally:
        if server is not None:
            server.close()


class Stop:
    """SIGTERM and SIGINT ask the loop to finish, from the moment this is built: a stop during start-up
    (waiting for brokers, loading the model) reaches the loop as soon as it is :meth:`attach`-ed."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self._pipeline: Pipeline | None = None
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, _signum: int, _frame: object) -> None:
        # Only flags: logging here could deadlock on the logger's lock held by the interrupted code.
        self.requested.set()
        if self._pipeline is not None:
            self._pipeline.stop()

    def attach(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline
        if self.requested.is_set():  # a signal before the pipeline existed
            pipeline.stop()


def serve_model(settings: Settings, metrics: Metrics, sizes: set[int] | None = None) -> Model:
    """Load the configured model, say so in the metrics, and warm ``sizes`` up (default: 1 and the
    configured batch sizes)."""
    model = load_model(settings)
    metrics.model_loaded(model.ref.name, model.ref.version, model.ref.provider)
    device = DeviceMemory.open(model.ref.provider, settings.gpu.device_id)
    if device is not None:
        metrics.attach_device(device)
    warm = sizes or {1, settings.batch.min_size, settings.batch.max_size}
    if model.engine.bound is not None:  # every batch-size bucket up to MAX_SIZE gets its buffers now
        warm |= {row_bucket(n) for n in range(1, max(warm) + 1)}
    warm_up(model, warm, blamed_setting(settings.model), model_setting(settings.model))
    return model


def freeze_heap() -> None:
    """Everything built so far (model, clients, modules) lives as long as the process: keep it out of the
    cycle collector's scans, and collect less often. The loop allocates a few objects per message and
    makes almost no cycles (records are untracked msgspec Structs); measured +2-4% per-message
    throughput."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def observe(settings: Settings) -> tuple[Metrics, Health, MetricsServer | None]:
    """The metrics, the probes' state, and the HTTP port serving both, open from now on (see
    :func:`start_server`): readiness follows ``health``."""
    metrics = Metrics(max_size=settings.batch.max_size)
    health = Health(settings.metrics.liveness_timeout_s, settings.metrics.broker_timeout_s)
    metrics.ready.set_function(lambda: float(health.ready()[0]))
    metrics.live.set_function(lambda: float(health.live()[0]))
    return metrics, health, start_server(settings, metrics, health)


def start_server(settings: Settings, metrics: Metrics, health: Health) -> MetricsServer | None:
    """The metrics and probes port, or None when ``MICROBATCH_METRICS__ENABLED`` is false. Raises
    ConfigError naming the port setting when it cannot be bound (taken, or not allowed)."""
    conf = settings.metrics
    if not conf.enabled:
        return None
    try:
        return MetricsServer(conf.host, conf.port, metrics.registry, health)
    except OSError as exc:
        raise ConfigError(conf.env("port"), f"cannot listen: {exc.strerror or exc}") from None


def build_clients(
    kafka: KafkaSettings,
    on_brokers: Callable[[bool], None] = lambda _up: None,
    on_access: Access = no_access_report,
    *,
    on_commit: Callable[[bool], None] = lambda _ok: None,
    ends: bool = False,
) -> tuple[Source, Sink]:
    """Create both clients first, so librdkafka's own validation of the options (unknown keys, bad
    values in the *_EXTRA settings) stops start-up as a configuration error naming the variable, with
    every configured value taken out of librdkafka's message. Both tell ``on_access`` of permissions
    refused while running; ``on_commit``: the consumer's auto-commit results; ``ends``: it reports where
    partitions end (a backfill)."""
    try:
        return Source(kafka, on_brokers, on_access, on_commit=on_commit, ends=ends), Sink(kafka, on_access)
    except KafkaException as exc:
        message = exc.args[0].str()
        setting = client_error_setting(message, kafka) or kafka.extra_setting(message)
        raise ConfigError(setting, redact(message, kafka.private_values())) from None


def check_topics(source: Source, settings: Settings, stopped: Callable[[], bool]) -> bool:
    """Wait for the brokers, then insist the input topics exist; a missing output or DLQ topic is only
    a warning (the broker may auto-create it; if not, deliveries retry and hold the commits back).
    Returns False if a stop was requested while waiting."""
    outputs = [settings.output.topic, settings.dlq.topic]
    found = source.wait_ready(settings.input.topics + outputs, settings.kafka.startup_timeout_s, stopped)
    if found is None:
        return False
    missing = [t for t in settings.input.topics if t not in found]
    errors = source.topic_errors(missing + [t for t in outputs if t not in found])
    refused = [t for t in missing if errors.get(t) == _NOT_AUTHORIZED]
    if refused:
        raise NotAuthorizedError(
            f"not authorised to DESCRIBE input topic(s) {refused} ({settings.input.env('topics')}): grant "
            f"the service's principal READ and DESCRIBE on them (docs/SECURITY.md); a topic it may not see "
            "is not said to exist or not"
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
