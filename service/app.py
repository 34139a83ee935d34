"""``microbatch run``: the service, started the one way (``service/startup.py``), run until a signal."""

from __future__ import annotations

import argparse

import structlog

from service.config import BatchSettings, Settings, common_help
from service.engine.drain import drain_ceiling
from service.errors import EXIT_OK
from service.flow.model import Model
from service.flow.ports import EngineLike
from service.kafka import Source
from service.kafka.share import ShareSource
from service.startup import Mode, S, started

_log = structlog.get_logger("microbatch")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``run`` takes no flags: every setting is a MICROBATCH_* variable; the help lists the common ones."""
    parser.description = "Run the service until SIGTERM or SIGINT. Every setting is a MICROBATCH_* variable."
    parser.epilog = common_help()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # the epilog is laid out already


def run(_args: argparse.Namespace, settings: Settings) -> int:
    return run_service(settings)


def streaming(model: Model[EngineLike], batch: BatchSettings) -> tuple[BatchSettings, int | None]:
    """The stream's batch sizes: the configured ones, and the drain ceiling measured on ``model``."""
    drain = drain_ceiling(model, batch)
    _log.info("batch_sizes", min_size=batch.min_size, max_size=batch.max_size, **drain.describe())
    return batch, drain.size


STREAM = Mode(Source, warm=lambda batch: {1, batch.min_size, batch.max_size}, batches=streaming)
"""``run``'s mode: subscribed to the input topics, batches sized to the stream."""
SHARED = Mode(ShareSource, warm=STREAM.warm, batches=streaming)
"""``run``'s mode with ``MICROBATCH_KAFKA__GROUP_TYPE=share``: members of a share group."""


def run_service(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT, then drain, commit and close. Returns the process exit code.

    The signal handlers go in first, so a stop during start-up (e.g. while waiting for brokers) is a
    clean exit 0 too. The metrics port opens next, so the probes answer while the model loads (live,
    not ready) and a port already taken stops start-up at once (``service.startup``).
    """
    if settings.kafka.group_type == "share":
        return serve(settings, SHARED)
    return serve(settings, STREAM)


def serve(settings: Settings, mode: Mode[S]) -> int:
    """:func:`run_service` in ``mode``."""
    with started(settings, mode) as starting:
        if starting is None:
            return EXIT_OK
        service = starting.warm()
        pipeline = service.pipeline()
        settings, model = service.settings, starting.model
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
            metrics_port=starting.server.port if starting.server else None,
        )
        service.serve(pipeline)
        return EXIT_OK
