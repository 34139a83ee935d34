"""The one start-up: every part built from the settings, in one order, for every mode of the service.

The order, cheapest check first: the settings, the signal handlers, the metrics and probes port (so the
probes answer while the rest starts: live, not ready), the Kafka clients (librdkafka checks its options),
the model loaded (its file, processor and format checked), the brokers and topics; that is
:func:`started`. Then :meth:`Started.warm`: the model warmed up, the mode's batch sizes measured, the
sample check; then the loop's stages. Between the two a command may look at the cluster before paying for
the measurements (a backfill whose range is already done stops there). ``microbatch run`` and ``microbatch
backfill`` both start here; a mode (:class:`Mode`) differs only in the parts it swaps in: the backfill
reads a range through an assigned consumer and cuts fixed batches.

This is where the real clients, the engine and telemetry meet the Protocols the loop drives
(``service/flow/ports.py``): the type checker holds them to those here.
"""

from __future__ import annotations

import gc
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

import structlog
from confluent_kafka import KafkaException

from service.assemble import Assembler, rules_for
from service.config import (
    AssembleSettings,
    BatchSettings,
    Settings,
    check_run_settings,
    redact,
)
from service.engine import blamed_setting, load_model, model_setting, warm_up
from service.engine.memory import DeviceMemory
from service.engine.samples import check_at_start
from service.engine.session import Engine
from service.errors import ConfigError
from service.flow.acceptances import Acceptances
from service.flow.assembly import Assembly
from service.flow.backlog import Backlog
from service.flow.backpressure import BackPressure
from service.flow.batcher import Batcher
from service.flow.checkpoint import Checkpoint
from service.flow.decode import Decoder
from service.flow.fields import FieldWatch
from service.flow.inference import Inference
from service.flow.inflight import executor_for
from service.flow.model import Model, RowPlan
from service.flow.outputs import Outputs
from service.flow.parts import Parts
from service.flow.pipeline import Pipeline
from service.flow.ports import (
    Acknowledgements,
    DecodeStage,
    EngineLike,
    ExecutorLike,
    HeldItems,
    ShareSourceLike,
    SinkLike,
    SourceLike,
    TelemetryLike,
    TransactionalSinkLike,
)
from service.flow.records import Decoded, InputRecord
from service.flow.redelivery import LastDelivery
from service.flow.sizing import BatchPolicy
from service.flow.transactions import Transactions
from service.formats import Picker, load_format, parse_path
from service.kafka import ClientHooks, Sink, Source
from service.kafka.causes import client_error_setting
from service.kafka.share import ShareGroup, ShareSource
from service.kafka.transactional import TransactionalSink
from service.observability import AccessReport, Health, Metrics, MetricsServer, Telemetry

_log = structlog.get_logger("microbatch")

_NO_LIMIT_S = 365 * 24 * 3600.0  # a startup timeout of 0 waits for ever

Batches = Callable[[Model[EngineLike], BatchSettings], tuple[BatchSettings, int | None]]
"""A mode's batch sizes: from the warmed-up model and the configured batch settings, the batch settings
the loop runs with and the drain ceiling (None: no drain regime). It logs what it chose."""


S = TypeVar("S", bound=Source)


@dataclass(frozen=True, slots=True)
class Mode(Generic[S]):
    """What a command swaps into the one start-up: the consumer (``Source``, subscribed to the input
    topics; a backfill's ``RangeReader``, assigned a range), the batch sizes warmed up before any
    measurement (``warm``), and how the loop's batch sizes are chosen (``batches``)."""

    consumer: type[S]
    warm: Callable[[BatchSettings], set[int]]
    batches: Batches


@dataclass(frozen=True, slots=True)
class Started(Generic[S]):
    """The parts a mode started: the port, both clients (brokers answering, input topics there) and the
    model loaded, not warmed up yet. ``settings`` are the configured ones."""

    settings: Settings
    mode: Mode[S]
    stop: Stop
    metrics: Metrics
    health: Health
    server: MetricsServer | None
    source: S
    sink: Sink
    model: Model[Engine]
    share: ShareGroup | None = None
    """The share group's limits, when the source reads through one."""

    def warm(self) -> Service[S]:
        """Warm the model up at the mode's sizes, choose its batch sizes, check the samples
        (``MICROBATCH_MODEL__SAMPLE``); then the service is ready. Raises ConfigError (exit 2) when the
        model rejects what its processor feeds it or a sample gives no result."""
        settings, model = self.settings, self.model
        warm_up(
            model,
            self.mode.warm(settings.batch),
            blamed_setting(settings.model),
            model_setting(settings.model),
        )
        batch, drain_max = self.mode.batches(model, settings.batch)
        settings = settings.model_copy(update={"batch": batch})
        check_at_start(settings, model)
        self.health.warmed_up = True
        return Service(
            self, settings, Telemetry(self.metrics, self.health, settings.log.stats_interval_s), drain_max
        )


@dataclass(frozen=True, slots=True)
class Service(Generic[S]):
    """The parts a mode started (``started``), ready for its loop. ``settings`` are those the loop runs with
    (the mode's batch settings in); ``drain_max`` is the drain ceiling chosen at start-up."""

    started: Started[S]
    settings: Settings
    telemetry: Telemetry
    drain_max: int | None

    def pipeline(self, source: SourceLike | None = None) -> Pipeline:
        """The loop over these parts; ``source`` replaces the consumer it reads (a backfill's range)."""
        started = self.started
        return build_pipeline(
            self.settings,
            started.source if source is None else source,
            started.sink,
            started.model,
            self.telemetry,
            drain_max=self.drain_max,
            share=started.share,
        )

    def serve(self, pipeline: Pipeline) -> None:
        """Run ``pipeline`` until a signal (or it stops itself), then drain, commit and close."""
        self.started.stop.attach(pipeline)
        freeze_heap()
        pipeline.run()


@contextmanager
def started(settings: Settings, mode: Mode[S]) -> Iterator[Started[S] | None]:
    """Start the parts for ``mode`` up to the model loaded and the topics checked, in the one order (see
    the module's docstring), and close the metrics port on the way out. Yields None when a stop was
    requested while waiting for the brokers (the consumer is closed then). Raises the configuration and
    environment errors of start-up (exit 2 or 3)."""
    check_run_settings(settings)
    stop = Stop()
    metrics, health, server = observe(settings)
    try:
        hooks = ClientHooks(
            brokers=health.brokers, access=AccessReport(metrics, health), commit=metrics.committed
        )
        source, sink = build_clients(settings, hooks, mode.consumer)
        model = load_served(settings, metrics)
        if not source.startup.require_topics(settings, stop.requested.is_set):
            source.close()
            yield None
            return
        sink.start(settings.kafka.startup_timeout_s or _NO_LIMIT_S)
        if isinstance(sink, TransactionalSink):
            metrics.watch_transactions(sink.opened, time.monotonic)
        share = (
            source.prepare(settings.kafka.startup_timeout_s or _NO_LIMIT_S)
            if isinstance(source, ShareSource)
            else None
        )
        yield Started(settings, mode, stop, metrics, health, server, source, sink, model, share)
    finally:
        if server is not None:
            server.close()


def build_pipeline(
    settings: Settings,
    source: SourceLike,
    sink: SinkLike,
    model: Model[EngineLike],
    telemetry: TelemetryLike,
    *,
    clock: Callable[[], float] = time.monotonic,
    wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    executor: ExecutorLike | None = None,
    drain_max: int | None = None,
    share: ShareGroup | None = None,
) -> Pipeline:
    """The loop and its parts, wired from ``settings``; items are rows assembled from the input's data
    points when ``model.rows`` says so. ``drain_max``: the drain ceiling measured at start-up
    (``service.engine.drain``; None: no drain regime); ``share``: the share group's limits, when
    ``source`` reads through one."""
    batch = settings.batch
    policy = BatchPolicy.of(batch, drain_max, clock)
    cost = model.caps.cost
    batcher: Batcher[Decoded] = Batcher(
        policy,
        batch.max_wait_ms / 1000,
        clock,
        cost=(lambda d: cost(d.item)) if cost else None,
        max_cost=batch.max_tokens,
        window=batch.bucket_window,
    )
    inference = Inference(
        model,
        executor or executor_for(batch.pipeline_depth),
        batch.pipeline_depth,
        clock,
        on_split=telemetry.split,
        on_out_of_memory=policy.out_of_memory,
    )
    decoder, held = decode_stage(settings, model, telemetry, clock)
    if share is not None:
        decoder = LastDelivery(decoder, share.delivery_limit)
    parts = Parts(
        decoder=decoder,
        held=held,
        batcher=batcher,
        inference=inference,
        outputs=Outputs(
            sink, settings.output.topic, settings.dlq.topic, model.ref, telemetry, clock, wall_ms
        ),
        acks=acknowledgements(settings, source, sink, telemetry, clock, share),
        backpressure=BackPressure(source, settings.input.max_in_flight),
        policy=policy,
        backlog=Backlog(source, clock),
        telemetry=telemetry,
    )
    return Pipeline(
        source,
        parts,
        topics=settings.input.topics,
        idle_poll_s=settings.input.idle_poll_ms / 1000,
        linger_s=settings.batch.linger_ms / 1000,
    )


def acknowledgements(
    settings: Settings,
    source: SourceLike,
    sink: SinkLike,
    telemetry: TelemetryLike,
    clock: Callable[[], float],
    share: ShareGroup | None = None,
) -> Acknowledgements:
    """The acknowledgement path of ``MICROBATCH_DELIVERY__GUARANTEE``: offsets committed once outputs are
    acknowledged, or outputs and offsets in transactions (``sink`` must then be transactional); with a
    share group (``share``), each record accepted once its outputs are acknowledged."""
    delivery, timeout_s = settings.delivery, settings.output.flush_timeout_s
    if share is not None:
        if not isinstance(source, ShareSourceLike):
            raise TypeError("a share group needs a share source")
        members = settings.kafka.share_members
        return Acceptances(
            source, sink, settings.dlq.topic, timeout_s, members, share.lock_s, telemetry, clock
        )
    if delivery.guarantee == "at-least-once":
        return Checkpoint(source, sink, settings.dlq.topic, timeout_s, telemetry, clock)
    if not isinstance(sink, TransactionalSinkLike):
        raise TypeError("exactly-once needs a transactional sink")
    interval_s, max_records = delivery.transaction_ms / 1000, delivery.transaction_max_records
    return Transactions(source, sink, interval_s, max_records, timeout_s, telemetry, clock)


def decode_stage(
    settings: Settings, model: Model[EngineLike], telemetry: TelemetryLike, clock: Callable[[], float]
) -> tuple[DecodeStage, tuple[HeldItems, ...]]:
    """The decode stage for ``model``, and the stages that hold items back (the open rows, when rows are
    assembled; none otherwise)."""
    caps = model.caps
    if model.rows is not None and settings.kafka.group_type == "share":
        raise ConfigError(
            settings.kafka.env("group_type"),
            "share: the model assembles rows, which need one host's messages in order; a share group "
            "hands records to any member in any order (use a consumer group)",
        )
    if model.rows is None:
        fields = caps.fields
        decoder = Decoder(
            load_format(settings.input.format),
            model.processor,
            caps,
            settings.input.max_value_bytes,
            Picker(settings.output.include_fields),
            FieldWatch(fields, telemetry.field_never_seen) if fields else None,
        )
        return decoder, ()
    if caps.parse_fields is None:  # load_model's plan_rows refuses such a processor first
        raise ConfigError(settings.assemble.env("enabled"), "assembled rows need a processor's parse_fields")
    assembly = Assembly(
        load_format(settings.input.format, metrics=True),
        caps.parse_fields,
        assembler(settings.assemble, model.rows, clock),
        settings.input.max_value_bytes,
        telemetry,
    )
    return assembly, (assembly,)


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


def load_served(settings: Settings, metrics: Metrics) -> Model[Engine]:
    """Load the configured model and say so in the metrics (with its device's gauges on a GPU). Raises
    ConfigError naming the setting at fault."""
    model = load_model(settings)
    metrics.model_loaded(model.ref.name, model.ref.version, model.ref.provider)
    device = DeviceMemory.open(model.ref.provider, settings.gpu.device_id)
    if device is not None:
        metrics.attach_device(device)
    return model


def freeze_heap() -> None:
    """Everything built so far (model, clients, modules) lives as long as the process: keep it out of the
    cycle collector's scans, and collect less often. The loop allocates a few objects per message and
    makes almost no cycles (records are untracked msgspec Structs)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def observe(settings: Settings) -> tuple[Metrics, Health, MetricsServer | None]:
    """The metrics, the probes' state, and the HTTP port serving both, open from now on (None when
    ``MICROBATCH_METRICS__ENABLED`` is false): readiness follows ``health``. Raises ConfigError naming the
    port setting when it cannot be bound (taken, or not allowed)."""
    metrics = Metrics(max_size=settings.batch.max_size)
    health = Health(settings.metrics.liveness_timeout_s, settings.metrics.broker_timeout_s)
    metrics.ready.set_function(lambda: float(health.ready()[0]))
    metrics.live.set_function(lambda: float(health.live()[0]))
    conf = settings.metrics
    if not conf.enabled:
        return metrics, health, None
    try:
        return metrics, health, MetricsServer(conf.host, conf.port, metrics.registry, health)
    except OSError as exc:
        raise ConfigError(conf.env("port"), f"cannot listen: {exc.strerror or exc}") from None


def build_clients(settings: Settings, hooks: ClientHooks, consumer: type[S]) -> tuple[S, Sink]:
    """Create both clients first, so librdkafka's own validation of the options (unknown keys, bad
    values in the *_EXTRA settings) stops start-up as a configuration error naming the variable, with
    every configured value taken out of librdkafka's message. Both tell ``hooks`` what they see (the
    consumer the brokers, permissions and auto-commits; the producer permissions); ``consumer``:
    ``Source``, or a backfill's ``RangeReader``. The producer is transactional under exactly-once."""
    kafka = settings.kafka
    try:
        source = consumer(kafka, hooks)
        if settings.delivery.guarantee == "at-least-once":
            return source, Sink(kafka, hooks)
        sink = TransactionalSink(
            kafka, source.transaction_offsets, settings.dlq.topic, settings.output.flush_timeout_s, hooks
        )
        return source, sink
    except KafkaException as exc:
        message = exc.args[0].str()
        setting = client_error_setting(message, kafka) or kafka.extra_setting(message)
        raise ConfigError(setting, redact(message, kafka.private_values())) from None
