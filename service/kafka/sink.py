"""The output edge: the only code that owns the librdkafka producer.

Deliveries are pulled, not pushed: :meth:`Sink.poll` and :meth:`Sink.flush` return the inputs whose output
the broker acknowledged. The outputs of one batch share one delivery callback
(:class:`service.kafka.delivery.Batch`) and are acknowledged together. A delivery that fails for a reason
that may pass (broker down, topic missing, not authorised yet) is held with its topic and sent again with
back-off, forever, in input order (:mod:`service.kafka.holds`): dropping it would lose a message, and the
offset tracker holds the commit back meanwhile, so a crash loses nothing either. A record the broker
refuses for good (too large, invalid) is handed back through :meth:`Sink.take_refused` for the pipeline
to replace.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from operator import attrgetter

import structlog
from confluent_kafka import KafkaError, Producer

from service.config import KafkaSettings, redactor
from service.flow.records import InputRecord, OutRecord, Permission
from service.kafka.access import refused_writing
from service.kafka.delivery import Batch
from service.kafka.holds import Holds
from service.kafka.hooks import NO_HOOKS, ClientHooks
from service.kafka.watch import FatalWatch
from service.observability.logs import client_log

_log = structlog.get_logger("microbatch.sink")

_FAILURE_LOG_EVERY_S = 5.0

# Errors that no retry can fix: the record itself is unacceptable to the broker.
REFUSED = {
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.INVALID_RECORD,
    KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_MSG,
}


class Sink:
    """Wraps ``confluent_kafka.Producer`` (idempotent, acks=all). Of ``hooks``, only ``access`` is told:
    of WRITE on a topic refused, and of it working again (a delivery to that topic acknowledged); the
    consumer alone reports the brokers and the commits."""

    def __init__(
        self, settings: KafkaSettings, hooks: ClientHooks = NO_HOOKS, transactional: bool = False
    ) -> None:
        self._redact = redactor(settings.private_values())
        self._fatal = FatalWatch("producer", redact=self._redact)
        options = settings.producer_config(transactional)
        conf: dict[str, object] = {**options, "error_cb": self._fatal}
        conf["logger"] = client_log(options, settings.private_values())
        self._producer = Producer(conf)
        self._done: list[Batch[OutRecord]] = []
        self._refused: list[tuple[OutRecord, str]] = []
        self._holds: Holds[OutRecord] = Holds(_TOPIC, _INPUT_ORDER, time.monotonic)
        self._failure_log: dict[tuple[str, int], tuple[float, int]] = {}
        self._on_access = hooks.access
        self._refused_topics: set[str] = set()  # WRITE refused, until a delivery to it is acknowledged

    def start(self, timeout_s: float) -> None:
        """Ready the producer for the loop, within ``timeout_s``: nothing to do here (it connects by
        itself); a transactional one registers its id."""

    def send_all(self, outs: Sequence[OutRecord]) -> None:
        """Queue ``outs`` with one delivery callback: their inputs come back from :meth:`poll` or
        :meth:`flush` together, once the last is acknowledged. A failed one is held with its topic and
        sent again (or handed back as refused); while a topic holds failed records, new ones for it wait
        behind them. Blocks (serving delivery reports) only while the local queue is full."""
        if self._holds:
            outs = self._holds.admit(outs)
        Batch(outs, PRODUCED, self._failed, self._batch_done).produce_all(self._producer)

    def send(self, out: OutRecord) -> None:
        """:meth:`send_all` of one record."""
        self.send_all((out,))

    def poll(self, timeout_s: float = 0.0) -> list[InputRecord]:
        """Serve delivery reports, resend failures that are due; return the newly acknowledged inputs.
        Raises FatalKafkaError once the producer reported a fatal error (acks already received were
        returned by earlier calls)."""
        self._fatal.check()
        self._producer.poll(timeout_s)
        if self._holds:
            self._resend_due()
        return self._take_acked()

    def flush(self, timeout_s: float) -> list[InputRecord]:
        """Wait until every queued record is acknowledged or ``timeout_s`` passes; return the acked inputs.
        ``pending`` tells what is still outstanding afterwards."""
        self._fatal.check()
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if len(self._producer):
                self._producer.flush(max(0.0, min(left, 1.0)))
            elif (due := self._holds.next_due()) is not None and left > 0:  # only back-off waits left
                time.sleep(max(0.0, min(left, due - time.monotonic())))
            self._resend_due()
            if self.pending() == 0 or left <= 0:
                return self._take_acked()

    def take_refused(self) -> list[tuple[OutRecord, str]]:
        """Records the broker refused for good, with why; the caller decides what to send instead."""
        refused, self._refused = self._refused, []
        return refused

    def pending(self) -> int:
        """Records queued or waiting to be sent again."""
        return len(self._producer) + self._holds.waiting()

    def _take_acked(self) -> list[InputRecord]:
        acked: list[InputRecord] = []
        done, self._done = self._done, []
        for batch in done:
            delivered = batch.delivered()
            acked += map(_SOURCE, delivered)
            for also in filter(None, map(_ALSO, delivered)):  # an assembled row answers all that fed it
                acked += also
            if self._refused_topics:
                self._writable({out.topic for out in delivered})
        return acked

    def _batch_done(self, batch: Batch[OutRecord]) -> None:
        self._done.append(batch)  # not a bound append: _take_acked replaces the list

    def _writable(self, topics: set[str]) -> None:
        """A delivery to each of ``topics`` was acknowledged: WRITE works there (again)."""
        for topic in topics & self._refused_topics:
            self._refused_topics.discard(topic)
            self._on_access(Permission("WRITE", "topic", topic), False)

    def _failed(self, out: OutRecord, err: KafkaError) -> None:
        fields = {
            "topic": out.topic,
            "source_topic": out.source.topic,
            "source_partition": out.source.partition,
            "source_offset": out.source.offset,
            "error": self._redact(err.str()),
        }
        if err.code() in REFUSED:
            _log.error("delivery_refused", **fields)
            self._refused.append((out, self._redact(err.str())))
            return
        if (refused := refused_writing(err, out.topic)) is not None:
            self._refused_topics.add(out.topic)
            self._on_access(refused, True)
        attempt, delay = self._holds.failed(out)
        # One line per topic and error every few seconds, with a count: an unavailable topic fails every
        # in-flight record at once, and thousands of identical lines would bury everything else.
        key = (out.topic, err.code())
        now = time.monotonic()
        last, suppressed = self._failure_log.get(key, (0.0, 0))
        if now - last < _FAILURE_LOG_EVERY_S:
            self._failure_log[key] = (last, suppressed + 1)
            return
        self._failure_log[key] = (now, 0)
        _log.error(
            "delivery_failed", **fields, attempt=attempt, retry_in_s=delay, similar_since_last=suppressed
        )

    def _resend_due(self) -> None:
        for topic, records in self._holds.due():
            Batch(records, PRODUCED, self._failed, partial(self._round_done, topic)).produce_all(
                self._producer
            )

    def _round_done(self, topic: str, batch: Batch[OutRecord]) -> None:
        self._done.append(batch)
        self._holds.round_done(topic)


PRODUCED = attrgetter("topic", "value", "key", "headers")
_SOURCE = attrgetter("source")
_TOPIC = attrgetter("topic")
_INPUT_ORDER = attrgetter("source.topic", "source.partition", "source.offset")
_ALSO = attrgetter("also")
