"""The small interfaces the loop drives. The real implementations are ``service.kafka.Source``,
``service.kafka.Sink``, ``service.engine.Engine`` and ``service.observability.Telemetry`` (the type
checker holds them to these in ``service/startup.py``, where they are wired together); the unit tests use
hand-written fakes. Nothing here imports a client."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, runtime_checkable

import numpy as np

from service.errors import Reason
from service.flow.records import Ack, Decoding, InputRecord, LoopState, OutRecord, Released, TopicPartition
from service.processors.base import Tensors


class RebalanceListener(Protocol):
    """What the consumer tells the pipeline about partition ownership (called inside ``consume``)."""

    def on_assigned(self, tps: list[TopicPartition]) -> None: ...

    def on_revoked(self, tps: list[TopicPartition]) -> None: ...

    def on_lost(self, tps: list[TopicPartition]) -> None: ...


class SourceLike(Protocol):
    def subscribe(self, topics: list[str], listener: RebalanceListener) -> None: ...

    def consume(self, max_messages: int, timeout_s: float) -> list[InputRecord]: ...

    def lag(self) -> dict[TopicPartition, int]: ...

    def store(self, offsets: dict[TopicPartition, int]) -> None: ...

    def commit(self) -> bool: ...

    def pause(self) -> None: ...

    def resume(self, tps: list[TopicPartition] | None = None) -> None: ...

    def rewind(self, offsets: dict[TopicPartition, int]) -> None:
        """Read each partition again from its offset (exactly-once, after an aborted transaction)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class ShareSourceLike(SourceLike, Protocol):
    """A source reading through a share group (KIP-932): each record is answered on its own."""

    def acknowledge(self, records: Sequence[InputRecord], ack: Ack) -> int:
        """Answer each of ``records`` (ACCEPT once done); returns how many were still held."""
        ...

    def held(self) -> int:
        """Records acquired and not answered yet."""
        ...


class SinkLike(Protocol):
    def send(self, out: OutRecord) -> None: ...

    def send_all(self, outs: Sequence[OutRecord]) -> None:
        """Like ``send`` for each, acknowledged together (one batch's results)."""
        ...

    def poll(self, timeout_s: float = 0.0) -> list[InputRecord]: ...

    def flush(self, timeout_s: float) -> list[InputRecord]: ...

    def take_refused(self) -> list[tuple[OutRecord, str]]: ...

    def pending(self) -> int: ...


@runtime_checkable
class TransactionalSinkLike(SinkLike, Protocol):
    """A sink whose outputs go into Kafka transactions (exactly-once): one opens with the first output
    sent after the last commit or abort."""

    def opened(self) -> float | None:
        """When the open transaction began (``time.monotonic``); None while none is open."""
        ...

    def oldest(self) -> float:
        """When the oldest input answered in the open transaction was consumed (``time.monotonic``, as
        ``InputRecord.received``); only while one is open."""
        ...

    def records(self) -> int:
        """Records sent in the open transaction."""
        ...

    def failing(self) -> str | None:
        """Why the open transaction can only be aborted (a delivery failed); None while it may commit."""
        ...

    def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Put ``offsets`` (the next to read of each partition) in the open transaction (opening one if
        none is) and commit it, unless an output sent in it is not acknowledged yet (the caller flushes
        first). Raises TransactionAborted once it had to be aborted instead, FencedError
        when another instance took this one's transactional id, FatalKafkaError on another fatal error."""
        ...

    def abort(self) -> None:
        """Abort the open transaction, if one is: its records are never visible to committed readers."""
        ...


class DecodeStage(Protocol):
    """Consumed records -> items for the batcher (``flow.decode.Decoder``: one per message or record;
    ``flow.assembly.Assembly``: rows assembled from many). Never raises for bad input."""

    def decode(self, records: Sequence[InputRecord]) -> Decoding: ...


class HeldItems(Protocol):
    """A stage that holds items back across loop rounds (``flow.assembly.Assembly``: rows still open).
    The loop asks it every round for what is due, and tells it of partitions handed over."""

    def due(self) -> Released: ...

    def discard(self, tps: Iterable[TopicPartition]) -> None:
        """Give up what is held for ``tps`` (handed over or lost): their new owner reads them again."""
        ...

    def __len__(self) -> int:
        """Items held."""
        ...


class Acknowledgements(Protocol):
    """When a consumed message is done, and making that durable: the one acknowledgement contract.

    At-least-once (``flow.checkpoint.Checkpoint``): a message is done when every output of it is
    acknowledged by the broker; its offset is then stored and committed. Exactly-once (results and
    offsets in one transaction) and a share group (per-record acknowledgements) are other strategies of the
    same contract, chosen at start-up; the loop does not know which it drives. All calls come from the
    loop's thread (rebalance callbacks included)."""

    @property
    def stale_acks(self) -> int:
        """Acknowledgements that came for offsets no longer tracked (a partition handed over meanwhile)."""
        ...

    def track(self, records: Sequence[InputRecord]) -> None:
        """``records`` were consumed: each is outstanding until its outputs are done."""
        ...

    def expect(self, counts: Sequence[tuple[InputRecord, int]]) -> None:
        """Messages just tracked that hold other than one item: how many outputs each awaits."""
        ...

    def settle(self, records: Sequence[InputRecord]) -> None:
        """One output of each of ``records`` will never come, by design: count it done."""
        ...

    def poll(self) -> None:
        """Take what the sink reports now, without waiting, and make progress durable as it allows."""
        ...

    def commit(self) -> bool:
        """Wait for every output sent, then make everything done durable. Returns whether the broker took
        it."""
        ...

    def assign(self, tps: Sequence[TopicPartition]) -> None: ...

    def revoke(self, tps: Sequence[TopicPartition]) -> None: ...

    def lose(self, tps: Sequence[TopicPartition]) -> None: ...

    def in_flight(self) -> int:
        """Outputs of consumed messages not done yet."""
        ...

    def owned(self) -> int:
        """Partitions owned now."""
        ...


class EngineLike(Protocol):
    def run(self, feeds: Tensors) -> Tensors: ...


class ExecutorLike(Protocol):
    """Where inference runs: a one-thread ``ThreadPoolExecutor``, or :class:`service.flow.inflight.Inline`."""

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Future[Any]: ...

    def shutdown(self, wait: bool = True) -> None: ...


class TelemetryLike(Protocol):
    """Where the loop reports what happened: per consumed group, batch, acknowledgement, commit or dead
    letter, never per healthy message."""

    def loop(self) -> None: ...

    def consumed(self, count: int) -> None: ...

    def rejected(self, reason: Reason) -> None: ...

    def batch(
        self,
        size: int,
        queue_wait_s: float,
        run_s: float | None,
        latencies_ms: np.ndarray,
        padding: tuple[int, int] | None,
    ) -> None: ...

    def acknowledged(self, count: int) -> None: ...

    def points(self, used: int, ignored: int, late: int, empty: int) -> None: ...

    def rows(self, complete: int, filled: int, incomplete: int) -> None: ...

    def split(self) -> None: ...

    def field_never_seen(self, field: str, closest: list[str]) -> None: ...

    def committed(self, ok: bool, seconds: float) -> None: ...

    def transaction(self, committed: bool, seconds: float, fenced: bool = False) -> None:
        """Exactly-once: a transaction committed, or aborted (``fenced``: because the group had moved on);
        ``seconds``: how long the commit took."""
        ...

    def acquired(self, delivery_counts: Sequence[int | None]) -> None:
        """Share groups: records acquired, each with its delivery count (1 the first time)."""
        ...

    def answered(self, ack: Ack, count: int) -> None:
        """Share groups: ``count`` records answered with ``ack``."""
        ...

    def periodic(self, state: Callable[[], LoopState]) -> None: ...

    def stopping(self) -> None: ...

    def stopped(self, in_flight: int) -> None: ...
