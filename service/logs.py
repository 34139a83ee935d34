"""structlog set-up: JSON lines when not on a terminal, readable console output on one."""

from __future__ import annotations

import logging
import sys

import structlog

from service.config import LogSettings

# librdkafka's own log lines (passed as the clients' "logger"), structured instead of raw stderr lines.
LIBRDKAFKA = structlog.get_logger("librdkafka")


def configure(settings: LogSettings) -> None:
    """Configure structlog once per process. Logs go to stderr, so stdout stays clean for commands."""
    as_json = settings.format == "json" or (settings.format == "auto" and not sys.stderr.isatty())
    renderer = structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, settings.level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
