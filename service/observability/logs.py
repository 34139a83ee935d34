"""structlog set-up: JSON lines when not on a terminal, readable console output on one."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, Mapping

import structlog

from service.config import LogSettings, private_values_of, redactor


class RateLimitedClientLog:
    """The clients' ``logger``: librdkafka's own lines as structured logs instead of raw stderr, at most
    one line per (client, facility) every ``every_s`` seconds, with a count of the ones left out.

    A broker outage makes librdkafka report a failed connect every ~50 ms per client; unthrottled that
    is hundreds of identical error lines a minute, which bury everything else. librdkafka quotes option
    values in some lines (``fopen(<ssl.key.location>)``, a rejected value): every one of ``private``
    (``KafkaSettings.private_values``) is replaced by ``***``. A line ``hold(facility, client, message)``
    holds is logged at debug: a retry that settles by itself (``service.kafka.retries``).
    """

    def __init__(
        self,
        every_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        private: Iterable[str] = (),
        tap: Callable[[str], None] | None = None,
        hold: Callable[[str, str, str], bool] | None = None,
    ) -> None:
        self._log = structlog.get_logger("librdkafka")
        self._every_s = every_s
        self._clock = clock
        self._hold = hold
        self._redact = redactor(private)
        self._last: dict[tuple[str, str], tuple[float, int]] = {}
        self.tap = tap
        """Shown every line's message, before the rate limit (None: none): start-up reads causes there."""

    def log(self, level: int, fmt: str, *args: object) -> None:
        """Called by confluent-kafka as ``log(level, "%s [%s] %s", facility, client, message)``."""
        if self.tap is not None and args:
            self.tap(str(args[-1]))
        key = (str(args[1]), str(args[0])) if len(args) >= 2 else ("", fmt)
        if self._hold is not None and len(args) >= 3 and self._hold(str(args[0]), str(args[1]), str(args[2])):
            level = logging.DEBUG
        now = self._clock()
        last, skipped = self._last.get(key, (float("-inf"), 0))
        if now - last < self._every_s:
            self._last[key] = (last, skipped + 1)
            return
        self._last[key] = (now, 0)
        line = self._redact(fmt % args if args else fmt)
        self._log.log(level, line, similar_since_last=skipped)


def client_log(
    conf: Mapping[str, object],
    private: Iterable[str] = (),
    said: Callable[[str, str, str], bool] | None = None,
) -> RateLimitedClientLog:
    """The ``logger`` of a client built from ``conf``: the values of its credential options redacted, and
    those of ``private`` (the service's clients pass ``KafkaSettings.private_values()``); the retries that
    settle by themselves held at debug while they settle, and the lines ``said(facility, client, message)``
    names (what the service says in its own words) held at debug always."""
    # Imported here: the kafka package owns librdkafka's error codes, and its clients import this module.
    from service.kafka.retries import Settling

    settling = Settling().hold
    hold = settling if said is None else (lambda f, c, m: said(f, c, m) or settling(f, c, m))
    return RateLimitedClientLog(private=[*private_values_of(conf), *private], hold=hold)


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
