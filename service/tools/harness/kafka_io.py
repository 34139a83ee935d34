"""The benchmark's own Kafka traffic: topic names, the input producer, and reading the outputs back.

The send time of every input is a header, ``bench.sent_us`` (epoch microseconds, set just before the
record is handed to the producer). Every system passes input headers through to its outputs, so one
method measures latency for all of them: output timestamp (CreateTime, set when the system under test
produced it) minus that header.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from service.flow.records import Headers
from service.tools.harness.measure import Output
from service.tools.harness.workload import Event
from service.tools.produce import Deliveries
from service.tools.reader import Tail, read_to_end

SENT_HEADER = "bench.sent_us"


@dataclass(frozen=True, slots=True)
class Topics:
    """The three fresh topics of one measured phase."""

    input: str
    output: str
    dlq: str

    @classmethod
    def fresh(cls, prefix: str) -> Topics:
        run = uuid.uuid4().hex[:8]
        return cls(f"{prefix}.{run}.in", f"{prefix}.{run}.out", f"{prefix}.{run}.dlq")

    def all(self) -> list[str]:
        return [self.input, self.output, self.dlq]


class Sender:
    """The benchmark's producer. One per phase, reused: the warm-up also initialises it (metadata, the
    idempotent producer id), so that its own start-up is not counted as the system's latency."""

    def __init__(self, producer_conf: Mapping[str, Any]) -> None:
        self._out = Deliveries(producer_conf)

    def send(self, topic: str, events: Sequence[Event], rate: float = 0.0) -> float:
        """Send ``events`` to ``topic`` at ``rate`` per second (0: as fast as possible), each with its
        send time in the ``bench.sent_us`` header. Blocks until all are acknowledged; returns the seconds
        the sending took. Raises RuntimeError if any delivery failed."""
        start = time.monotonic()
        for i, (key, value) in enumerate(events):
            if rate:
                # Sleep only when more than a millisecond ahead: fewer wake-ups leave more of a small
                # machine's CPU to the system under test; each record still carries its own send time.
                ahead = start + i / rate - time.monotonic()
                if ahead > 0.001:
                    time.sleep(ahead)
            self._out.send(topic, value, key, [(SENT_HEADER, str(time.time_ns() // 1000).encode())])
        seconds = time.monotonic() - start
        self._out.flush(f"producing the benchmark input to {topic}")
        return seconds


class _Value(msgspec.Struct):
    batch_size: int | None = None


def read_outputs(client_conf: Mapping[str, Any], topic: str) -> list[Output]:
    """Every record of ``topic`` as an :class:`Output` (timestamp, send-time header, ``batch_size``)."""
    records = read_to_end(client_conf, topic, timeout_s=120)
    return [_output(r.value, r.headers, r.timestamp_ms or 0) for r in records]


def seen_outputs(tail: Tail, topic: str) -> list[Output]:
    """What ``tail`` read of ``topic``, each :class:`Output` stamped with the time it was read rather than
    produced: when a ``read_committed`` reader could first see it (an exactly-once result becomes
    visible at its transaction's commit, after it was produced)."""
    read, headers = tail.read[topic], tail.headers[topic]
    return [_output(value, head, read_ms) for (value, read_ms), head in zip(read, headers, strict=False)]


_decoder = msgspec.json.Decoder(_Value)


def _output(value: bytes | None, headers: Headers | None, timestamp_ms: int) -> Output:
    sent = next((v for k, v in headers or [] if k == SENT_HEADER), None)
    try:
        size = _decoder.decode(value or b"").batch_size
    except (msgspec.DecodeError, TypeError):
        size = None
    return Output(timestamp_ms, int(sent) if sent else None, size)
