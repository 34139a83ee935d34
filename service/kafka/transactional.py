"""The exactly-once output edge: the producer's transactions (KIP-98), fenced by the group (KIP-447).

:class:`TransactionalSink` is a :class:`service.kafka.sink.Sink` whose outputs go into transactions: one
opens with the first output after the last commit or abort, and :meth:`TransactionalSink.commit` puts the
input offsets it completes in it (with the consumer's group metadata, so a zombie whose group moved on
cannot commit) and commits it. What differs from the plain sink:

- A failed delivery is not held and sent again: the transaction can only be aborted, and the loop reads
  its inputs again. A record the broker refused for good (too large) is remembered, so that the next try
  sends its replacement (a dead letter) instead, as the plain path would.
- Errors are sorted as the transactional API asks: retriable ones are retried (a bounded number of
  times), abortable ones abort (:class:`service.errors.TransactionAborted`), and fatal ones stop the
  service; being fenced by a newer producer with the same transactional id is
  :class:`service.errors.FencedError` (exit 5), naming the setting that tells replicas apart.
- Every call to the transaction coordinator is guarded (:class:`service.kafka.stall.Stall`): one that
  blocks well past its own timeout ends the process (exit 6) rather than the loop standing still.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from operator import attrgetter

import structlog
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from service.config import KafkaSettings
from service.errors import (
    BrokerUnavailableError,
    FatalKafkaError,
    FencedError,
    NotAuthorizedError,
    TransactionAborted,
    TransactionStateError,
)
from service.flow.encode import replace_refused
from service.flow.records import InputRecord, OutRecord, TopicPartition
from service.kafka.delivery import Batch
from service.kafka.hooks import NO_HOOKS, ClientHooks
from service.kafka.sink import PRODUCED, REFUSED, Sink
from service.kafka.stall import Stall

_log = structlog.get_logger("microbatch.sink")

# The producer was fenced: a newer one registered the same transactional id. (An old epoch alone,
# INVALID_PRODUCER_EPOCH, can follow a coordinator's failover too: librdkafka tells the fence as _FENCED.)
_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED}
# The offsets' group metadata is stale: the group rebalanced and moved on (KIP-447's zombie fencing).
_GROUP_MOVED_ON = {KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID, KafkaError.FENCED_INSTANCE_ID}
_TRIES = 3

Key = tuple[str, str, int, int, int | None, bool]
_RECEIVED = attrgetter("source.received")


def _key(out: OutRecord) -> Key:
    """An output's identity across tries: its topic, the input item it answers, and whether it still
    carries a value (a dead letter sent again without it is another record)."""
    source = out.source
    return (out.topic, source.topic, source.partition, source.offset, out.index, out.value is None)


class TransactionalSink(Sink):
    """``offsets_of(offsets)``: the consumer's offsets as the producer sends them, with the group's
    metadata; ``dlq_topic``: where a result the broker
    refused goes instead; ``timeout_s``: the longest a transactional call may block; ``stall``: what ends
    the process when one blocks past that anyway."""

    def __init__(
        self,
        settings: KafkaSettings,
        offsets_of: Callable[[dict[TopicPartition, int]], tuple[list[KafkaTopicPartition], object]],
        dlq_topic: str,
        timeout_s: float,
        hooks: ClientHooks = NO_HOOKS,
        stall: Stall | None = None,
    ) -> None:
        super().__init__(settings, hooks, transactional=True)
        self._id = settings.transactional_id()
        self._setting = settings.env("instance_id")
        self._offsets_of = offsets_of
        self._dlq_topic = dlq_topic
        self._timeout_s = timeout_s
        self._stall = stall or Stall()
        self._opened: float | None = None
        self._oldest = 0.0
        self._records = 0
        self._epoch = 0  # one per transaction: reports of an aborted one are ignored
        self._unreported = 0  # batches sent in the open transaction whose reports are not all in
        self._failing: str | None = None
        self._replace: dict[Key, str] = {}  # outputs refused for good -> why, until sent instead

    def start(self, timeout_s: float) -> None:
        """Register the transactional id with its coordinator, aborting whatever a predecessor with the
        same id left open (and fencing it, if it still runs). Raises BrokerUnavailableError when the
        coordinator does not answer in time, NotAuthorizedError without WRITE on the id."""
        try:
            with self._stall.guard("init_transactions", timeout_s):
                self._producer.init_transactions(timeout_s)
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                raise NotAuthorizedError(
                    f"not authorised to use transactional id {self._id!r}: grant WRITE and DESCRIBE on it"
                ) from None
            if err.fatal():
                raise self._fatal_error(err) from None
            raise BrokerUnavailableError(
                f"the transaction coordinator did not answer within {timeout_s:g}s: {self._redact(err.str())}"
            ) from None
        _log.info("transactions_ready", transactional_id=self._id)

    def send_all(self, outs: Sequence[OutRecord]) -> None:
        """Send ``outs`` in the open transaction (opening one if none is)."""
        if self._replace:
            outs = self._replaced(outs)
        if self._opened is None and outs:
            self._begin()
            self._opened = time.monotonic()
            self._oldest = min(map(_RECEIVED, outs))
        self._records += len(outs)
        if outs:
            self._unreported += 1
        epoch = self._epoch
        Batch(outs, PRODUCED, partial(self._failed_in, epoch), partial(self._done_in, epoch)).produce_all(
            self._producer
        )

    def poll(self, timeout_s: float = 0.0) -> list[InputRecord]:
        with self._fencing():
            return super().poll(timeout_s)

    def flush(self, timeout_s: float) -> list[InputRecord]:
        with self._fencing():
            return super().flush(timeout_s)

    def opened(self) -> float | None:
        return self._opened

    def oldest(self) -> float:
        return self._oldest

    def records(self) -> int:
        return self._records

    def failing(self) -> str | None:
        return self._failing

    def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Put ``offsets`` in the open transaction and commit it (see ``ports.TransactionalSinkLike``).
        A transaction with outputs not acknowledged yet (the caller's flush timed out) is aborted instead:
        committed, they would be visible while their inputs' offsets, which only acknowledged outputs
        complete, stayed behind, to be read and answered again."""
        if self._failing is None and self._unreported:
            self._failing = (
                f"outputs not acknowledged within {self._timeout_s:g}s ({self._unreported} batches)"
            )
        if self._failing is not None:
            why, self._failing = self._failing, None
            self.abort()
            raise TransactionAborted(why)
        if self._opened is None:
            self._begin()
        try:
            if offsets:
                parts, group = self._offsets_of(offsets)
                self._call(
                    "send_offsets_to_transaction",
                    lambda: self._producer.send_offsets_to_transaction(parts, group, self._timeout_s),
                )
            self._call("commit_transaction", lambda: self._producer.commit_transaction(self._timeout_s))
        except _Abort as abort:
            self.abort()
            raise TransactionAborted(abort.why, fenced=abort.fenced) from None
        self._ended()
        self._replace.clear()

    def _begin(self) -> None:
        with self._fencing():
            self._producer.begin_transaction()

    def abort(self) -> None:
        """Abort the open transaction (its queued records are purged, none becomes visible)."""
        if self._opened is not None or self._failing is not None:
            try:
                self._call("abort_transaction", lambda: self._producer.abort_transaction(self._timeout_s))
            except _Abort as abort:  # an abort that cannot complete leaves nothing to go on with
                raise self._stuck(
                    0, "abort_failed", f"the open transaction could not be aborted: {abort.why}"
                ) from None
        self._ended()

    def _ended(self) -> None:
        self._epoch += 1
        self._unreported = 0
        self._done = []
        self._opened = None
        self._records = 0
        self._failing = None

    def _call(self, name: str, call: Callable[[], None]) -> None:
        """A transactional call (``name``, each try guarded against a stall): retriable errors tried again
        (up to ``_TRIES`` in all), abortable ones raised as ``_Abort``, fatal ones as FencedError or
        FatalKafkaError."""
        for tries in range(1, _TRIES + 1):
            try:
                with self._fencing(), self._stall.guard(name, self._timeout_s):
                    call()
                return
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if err.fatal():
                    raise self._fatal_error(err) from None
                if err.retriable() and not err.txn_requires_abort() and tries < _TRIES:
                    _log.warning("transaction_retry", error=self._redact(err.str()), attempt=tries)
                    continue
                raise _Abort(self._redact(err.str()), err.code() in _GROUP_MOVED_ON) from None

    @contextmanager
    def _fencing(self) -> Iterator[None]:
        """A fatal error reported by the producer (through its error callback, or raised by a call), sorted
        by :meth:`_as_fatal`."""
        try:
            yield
        except FatalKafkaError as exc:
            if type(exc) is not FatalKafkaError:
                raise  # sorted already
            raise self._as_fatal(exc.code, exc.name, exc.message) from None
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if not err.fatal():
                raise
            raise self._fatal_error(err) from None

    def _fatal_error(self, err: KafkaError) -> FatalKafkaError:
        return self._as_fatal(err.code(), err.name(), self._redact(err.str()))

    def _as_fatal(self, code: int, name: str, message: str) -> FatalKafkaError:
        """A fatal error, as what it asks of the operator: FencedError when another process took the id,
        TransactionStateError when only a restart under it goes on, FatalKafkaError otherwise."""
        if code in _FENCED:
            return self._fenced()
        if code == KafkaError.INVALID_TXN_STATE:
            return self._stuck(code, name, message)
        return FatalKafkaError("producer", code, name, message)

    def _stuck(self, code: int, name: str, why: str) -> TransactionStateError:
        """The producer cannot go on with its transaction: only a restart under the same id ends it."""
        return TransactionStateError(
            "producer",
            code,
            name,
            f"{why}; exiting so that a restart under transactional id {self._id!r} ends it",
        )

    def _fenced(self) -> FencedError:
        return FencedError(
            "producer",
            KafkaError._FENCED,
            "_FENCED",
            f"fenced: another live process took transactional id {self._id!r}; give each replica its own "
            f"{self._setting} (default: the host name)",
        )

    def _replaced(self, outs: Sequence[OutRecord]) -> list[OutRecord]:
        """``outs``, each one the broker refused for good in an aborted try replaced as the plain path
        would (a result by its dead letter; a dead letter without its value); one with nothing smaller
        left is not sent, and its input's offset stays uncommitted."""
        sent = []
        for out in outs:
            replacement: OutRecord | None = out
            while replacement is not None and (why := self._replace.get(_key(replacement))) is not None:
                replacement = replace_refused(replacement, why, self._dlq_topic)
            if replacement is None:
                _log.error("dead_letter_undeliverable", offset=out.source.offset)
            else:
                sent.append(replacement)
        return sent

    def _done_in(self, epoch: int, batch: Batch[OutRecord]) -> None:
        if epoch == self._epoch:
            self._unreported -= 1
            self._done.append(batch)

    def _failed_in(self, epoch: int, out: OutRecord, err: KafkaError) -> None:
        """A delivery failed: the transaction can only abort. A record refused for good is remembered, so
        that the next try sends its replacement."""
        if epoch != self._epoch:
            return  # purged by an abort already done
        error = self._redact(err.str())
        if err.code() in REFUSED:
            self._replace[_key(out)] = error
        if self._failing is None:
            self._failing = f"delivery to {out.topic} failed: {error}"
            _log.error(
                "delivery_failed",
                topic=out.topic,
                source_topic=out.source.topic,
                source_partition=out.source.partition,
                source_offset=out.source.offset,
                error=error,
            )


class _Abort(Exception):
    def __init__(self, why: str, fenced: bool) -> None:
        super().__init__(why)
        self.why = why
        self.fenced = fenced
