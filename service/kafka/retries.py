"""Which of librdkafka's log lines report a retry that settles by itself, so they need not be warnings.
Pure (the clock is injected).

A client started against a broker that is itself starting sees the cluster settle: the producer's first
InitProducerId answers "Coordinator load in progress" (``GETPID ... Failed to acquire idempotence PID ...:
retrying``), a group or leader moves ("Not coordinator"), a connection is refused for the second the
listener needs. librdkafka retries each on its own, and each is gone within seconds; on the console they
read as faults. :class:`Settling` holds them at debug (``observability.logs.client_log``), by the error each
names, while they settle; one that keeps coming back past ``settle_s`` is not settling and is logged at its
own level again.

Log lines carry no error code, only librdkafka's text of one, so the texts are taken from the codes
themselves (``KafkaError(code).str()``, librdkafka's ``rd_kafka_err2str``), never typed here.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import KafkaError

SETTLING_ERRORS = (
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
)
"""Broker errors that mean the cluster is still settling (a coordinator loading or moving, a leader being
elected); the Kafka protocol marks every one retriable, and librdkafka retries them itself."""
_SETTLING_TEXTS = tuple(KafkaError(code).str() for code in SETTLING_ERRORS)

CONNECT_FACILITY = "FAIL"
"""librdkafka's facility of a failed broker connection (``rd_kafka_broker_fail``: refused, reset, timed
out). Settling only while the client starts: later it is an outage, logged as ever."""

SETTLE_S = 15.0
"""How long a kind of settling line is held back: coordinator loading on a fresh broker takes 1-3 s."""


class Settling:
    """Tells, line by line, whether one client's librdkafka line is a retry still settling (:meth:`hold`).

    A kind of line is its (client, facility). A streak of one kind starts at its first settling line and
    ends when none came for ``settle_s``; lines are held while the streak is younger than ``settle_s``.
    """

    def __init__(self, settle_s: float = SETTLE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._settle_s = settle_s
        self._clock = clock
        self._born = clock()
        self._streaks: dict[tuple[str, str], tuple[float, float]] = {}  # kind -> (first, last) line

    def hold(self, facility: str, client: str, message: str) -> bool:
        """True when the line names an error that settles by itself (or is a failed connection while the
        client is in its first ``settle_s``) and its kind has not kept coming back for ``settle_s``."""
        now = self._clock()
        starting = now - self._born < self._settle_s
        if not (
            any(text in message for text in _SETTLING_TEXTS) or (starting and facility == CONNECT_FACILITY)
        ):
            return False
        kind = (client, facility)
        first, last = self._streaks.get(kind, (now, now))
        if now - last > self._settle_s:
            first = now  # the last streak settled: this is a new one
        self._streaks[kind] = (first, now)
        return now - first < self._settle_s
