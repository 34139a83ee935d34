"""The two pieces of the plain consume -> produce loop (``python -m bench.baselines plain``), kept apart from
its clients so that they can be tested with fakes: the acknowledged watermark of each input partition, and
the producing side that re-sends what failed. Neither imports ``confluent_kafka`` nor anything of the
service: the loop is the ceiling the service is held to, so it shares none of the service's transport code.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, Protocol

Partition = tuple[str, int]
"""An input partition: topic, partition."""


class AckWatermark:
    """Per input partition: the offsets consumed, oldest first, and those whose output the broker has
    acknowledged. What may be stored is one past the end of the acknowledged run at the front.

    Consumed 34 35 36 37 38 39 40, acked 34 35 36 40 -> store 37; then 37 38 39 acked -> store 41.
    Offsets are kept as consumed rather than assumed consecutive, so a gap (a transaction marker, a
    compacted record) never holds the watermark back.
    """

    def __init__(self) -> None:
        self._consumed: dict[Partition, deque[int]] = {}
        self._acked: dict[Partition, set[int]] = {}

    def consumed(self, tp: Partition, offset: int) -> None:
        """``offset`` of ``tp`` was consumed and its output is on its way; offsets of a partition come in
        ascending order (the consumer's)."""
        pending = self._consumed.get(tp)
        if pending is None:
            pending = self._consumed[tp] = deque()
            self._acked[tp] = set()
        pending.append(offset)

    def acked(self, tp: Partition, offset: int) -> None:
        """The output of ``offset`` was acknowledged. An ack for a partition not tracked (forgotten since
        it was consumed) is dropped: its record will be consumed and answered again."""
        acked = self._acked.get(tp)
        if acked is not None:
            acked.add(offset)

    def take(self) -> dict[Partition, int]:
        """Per partition whose acknowledged front run grew since the last call: the offset to store (one
        past that run). The offsets of that run are forgotten."""
        stored: dict[Partition, int] = {}
        for tp, pending in self._consumed.items():
            acked, last = self._acked[tp], -1
            while pending and pending[0] in acked:
                last = pending.popleft()
                acked.discard(last)
            if last >= 0:
                stored[tp] = last + 1
        return stored

    def forget(self, tps: Iterable[Partition]) -> None:
        """Drop what is known of ``tps``: they were (re)assigned, and consuming starts again at their
        committed offsets."""
        for tp in tps:
            self._consumed.pop(tp, None)
            self._acked.pop(tp, None)


class Producer(Protocol):
    """What :class:`Relay` uses of ``confluent_kafka.Producer``."""

    def produce(
        self, topic: str, value: Any = ..., key: Any = ..., *, headers: Any = ..., on_delivery: Any = ...
    ) -> None: ...

    def poll(self, timeout: float = ...) -> int: ...

    def flush(self, timeout: float = ...) -> int: ...

    def __len__(self) -> int: ...


class Message(Protocol):
    """What :class:`Relay` uses of a consumed ``confluent_kafka.Message``."""

    def value(self) -> Any: ...

    def key(self) -> Any: ...

    def headers(self) -> Any: ...


class Relay:
    """Produces each consumed record's value, key and headers unchanged to ``topic``, with one delivery
    callback per record that carries its input partition and offset: an ack marks the offset in
    ``marks``, a failure queues the record to be sent again at the next :meth:`poll` (nothing may be lost:
    the bench checks that every input was answered)."""

    def __init__(self, producer: Producer, topic: str, marks: AckWatermark) -> None:
        self._producer = producer
        self._topic = topic
        self._marks = marks
        self._failed: list[tuple[Message, Partition, int]] = []
        self.failures = 0

    def send(self, msg: Message, tp: Partition, offset: int) -> None:
        """Queue ``msg``'s copy; while the local queue is full, serve delivery reports until it has room."""
        on_delivery: Callable[..., None] = partial(self._delivered, msg, tp, offset)
        while True:
            try:
                self._producer.produce(
                    self._topic, msg.value(), msg.key(), headers=msg.headers(), on_delivery=on_delivery
                )
                return
            except BufferError:
                self._producer.poll(0.05)

    def poll(self, timeout_s: float = 0.0) -> None:
        """Serve delivery reports (waiting up to ``timeout_s`` for one), then re-send what failed."""
        self._producer.poll(timeout_s)
        self._resend()

    def flush(self, timeout_s: float) -> bool:
        """Wait until everything queued, re-sends included, is acknowledged; False if ``timeout_s`` passed
        first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._producer.flush(max(0.0, min(1.0, deadline - time.monotonic())))
            self._resend()
            if not len(self._producer) and not self._failed:
                return True
        return False

    def _delivered(self, msg: Message, tp: Partition, offset: int, err: object, _out: object) -> None:
        if err is None:
            self._marks.acked(tp, offset)
        else:
            self.failures += 1
            self._failed.append((msg, tp, offset))

    def _resend(self) -> None:
        failed, self._failed = self._failed, []
        for msg, tp, offset in failed:
            self.send(msg, tp, offset)
