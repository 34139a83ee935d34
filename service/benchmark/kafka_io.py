"""The benchmark's own Kafka traffic: topics, the input producers, and reading the outputs back.

The send time of every input is a header, ``bench.sent_us`` (epoch microseconds, set just before the
record is handed to the producer). Every system passes input headers through to its outputs, so one
method measures latency for all of them: output timestamp (CreateTime, set when the system under test
produced it) minus that header.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from service import logs
from service.benchmark.measure import Output
from service.benchmark.workload import Event
from service.verify import read_to_end

SENT_HEADER = "bench.sent_us"
_TOPIC_READY_TIMEOUT_S = 30.0


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


def create_topics(admin: AdminClient, names: Sequence[str], partitions: int) -> None:
    """Create ``names`` and wait until every partition has a leader (the systems insist on their input)."""
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names], operation_timeout=30)
    for future in futures.values():
        future.result(timeout=60)
    deadline = time.monotonic() + _TOPIC_READY_TIMEOUT_S
    for name in names:
        while True:
            meta = admin.list_topics(topic=name, timeout=10).topics.get(name)
            ready = meta is not None and meta.error is None and len(meta.partitions) == partitions
            if ready and all(p.leader >= 0 for p in meta.partitions.values()):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name} has no leader for every partition after creation")
            time.sleep(0.1)


def delete_topics(admin: AdminClient, names: Sequence[str]) -> None:
    """Best effort: a topic that is already gone is fine."""
    for future in admin.delete_topics(list(names), operation_timeout=30).values():
        try:
            future.result(timeout=60)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise


def delete_group(admin: AdminClient, group: str) -> None:
    """Best effort: the committed offsets of a finished system are of no further use."""
    for future in admin.delete_consumer_groups([group], request_timeout=30).values():
        with contextlib.suppress(KafkaException):
            future.result(timeout=60)


class Sender:
    """The benchmark's producer. One per phase, reused: the warm-up also initialises it (metadata, the
    idempotent producer id), so that its own start-up is not counted as the system's latency."""

    def __init__(self, producer_conf: dict) -> None:
        self._producer = Producer(producer_conf | {"logger": logs.LIBRDKAFKA})
        self._failures: list[str] = []

    def send(self, topic: str, events: Sequence[Event], rate: float = 0.0) -> float:
        """Send ``events`` to ``topic`` at ``rate`` per second (0: as fast as possible), each with its
        send time in the ``bench.sent_us`` header. Blocks until all are acknowledged; returns the seconds
        the sending took. Raises RuntimeError if any delivery failed."""
        producer = self._producer
        start = time.monotonic()
        for i, (key, value) in enumerate(events):
            if rate:
                # Sleep only when more than a millisecond ahead: fewer wake-ups leave more of a small
                # machine's CPU to the system under test; each record still carries its own send time.
                ahead = start + i / rate - time.monotonic()
                if ahead > 0.001:
                    time.sleep(ahead)
            while True:
                headers = [(SENT_HEADER, str(time.time_ns() // 1000).encode())]
                try:
                    producer.produce(topic, value, key, headers=headers, on_delivery=self._delivered)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        seconds = time.monotonic() - start
        if producer.flush(60) or self._failures:
            raise RuntimeError(f"producing the benchmark input to {topic} failed: {self._failures[:3]}")
        return seconds

    def _delivered(self, err, _msg) -> None:
        if err is not None:
            self._failures.append(err.str())


class Counter:
    """How many records a topic holds, from its end offsets: cheap enough to ask twice a second while a
    system runs (reading the records themselves would compete with it for the CPU)."""

    def __init__(self, client_conf: dict) -> None:
        self._consumer = Consumer(
            client_conf | {"group.id": f"bench-count-{uuid.uuid4().hex}", "logger": logs.LIBRDKAFKA}
        )

    def count(self, topic: str, partitions: int) -> int:
        total = 0
        for p in range(partitions):
            low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += max(0, high - max(low, 0))
        return total

    def close(self) -> None:
        self._consumer.close()


class _Value(msgspec.Struct):
    batch_size: int | None = None


def read_outputs(client_conf: dict, topic: str) -> list[Output]:
    """Every record of ``topic`` as an :class:`Output` (timestamp, send-time header, ``batch_size``)."""
    decoder = msgspec.json.Decoder(_Value)
    outputs = []
    for msg in read_to_end(client_conf, topic, timeout_s=120):
        sent = next((v for k, v in msg.headers() or [] if k == SENT_HEADER), None)
        try:
            size = decoder.decode(msg.value()).batch_size
        except (msgspec.DecodeError, TypeError):
            size = None
        outputs.append(Output(msg.timestamp()[1], int(sent) if sent else None, size))
    return outputs
