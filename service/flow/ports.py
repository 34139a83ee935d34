"""The small interfaces the loop drives. The real implementations are ``service.kafka.Source``,
``service.kafka.Sink``, ``service.engine.Engine`` and ``service.observability.Telemetry`` (the type
checker holds them to these in ``service/app.py``, where they are wired together); the unit tests use
hand-written fakes. Nothing here imports a client."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Protocol

import numpy as np

from service.errors import Reason
from service.flow.records import InputRecord, LoopState, OutRecord, TopicPartition
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

    def close(self) -> None: ...


class SinkLike(Protocol):
    def send(self, out: OutRecord) -> None: ...

    def send_all(self, outs: Sequence[OutRecord]) -> None:
        """Like ``send`` for each, acknowledged together (one batch's results)."""
        ...

    def poll(self, timeout_s: float = 0.0) -> list[InputRecord]: ...

    def flush(self, timeout_s: float) -> list[InputRecord]: ...

    def take_refused(self) -> list[tuple[OutRecord, str]]: ...

    def pending(self) -> int: ...


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

    def periodic(self, state: Callable[[], LoopState]) -> None: ...

    def stopping(self) -> None: ...

    def stopped(self, in_flight: int) -> None: ...
