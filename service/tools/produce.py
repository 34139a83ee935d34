"""``microbatch produce``: a load generator of realistic log and monitoring events, optionally poisoned."""

from __future__ import annotations

import argparse
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
from confluent_kafka import KafkaError, Message, Producer

from service.config import Settings
from service.errors import EXIT_OK, UsageError
from service.observability import logs
from service.tools.generate import METRIC_FEATURES, EventGenerator
from service.tools.poison import POISON_KINDS, make_poison

KINDS = ("logs", "metrics")
_CHUNK = 1000
# The broker limit (message.max.bytes) is about 1 MB by default, so a "too large" poison message must fit
# under it; that is only possible when the service's own limit is well below it.
_BROKER_DEFAULT_MAX_BYTES = 1_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=0.0, help="events per second; 0 = as fast as possible")
    parser.add_argument("--poison-ratio", type=float, default=0.0, help="share of malformed messages, 0..1")
    parser.add_argument("--seed", type=int, default=None)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Send, then print what was sent. Raises UsageError for a poison ratio outside 0..1."""
    if not 0.0 <= args.poison_ratio <= 1.0:
        raise UsageError("--poison-ratio", "must be between 0 and 1")
    limit = settings.input.max_value_bytes
    too_large = limit + 1024 if limit + 1024 < _BROKER_DEFAULT_MAX_BYTES else None
    conf = settings.kafka.producer_config()
    report = EventProducer(conf).send(
        args.topic, args.kind, args.count, args.rate, args.poison_ratio, args.seed, too_large
    )
    rate = report.sent / report.seconds if report.seconds else 0.0
    print(f"sent {report.sent} {args.kind} events to {args.topic} in {report.seconds:.1f}s ({rate:.0f}/s)")
    if report.poison:
        print(f"poison: {dict(sorted(report.poison.items()))}")
    return EXIT_OK


@dataclass
class ProduceReport:
    """What was sent: totals, and the poison messages by kind."""

    sent: int = 0
    poison: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0


def required_field(kind: str) -> str:
    """The field the reference processor of ``kind`` cannot do without (poison targets it)."""
    return "message" if kind == "logs" else METRIC_FEATURES[0]


ClientHeaders = list[tuple[str, str | bytes | None]]
"""Headers as the librdkafka client takes them (``service.flow.records.Headers`` is what it gives back)."""


class Deliveries:
    """A producer for the tools and the tests: :meth:`send` waits (serving delivery reports) while the
    local queue is full, every failed delivery is kept, and :meth:`flush` raises unless all arrived."""

    def __init__(self, producer_conf: Mapping[str, Any]) -> None:
        conf = dict(producer_conf)
        self._producer = Producer(conf | {"logger": logs.client_log(conf)})
        self._failures: list[str] = []

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: ClientHeaders | None = None,
        on_delivered: Callable[[Message], None] | None = None,
    ) -> None:
        """Queue one record; ``on_delivered(message)`` runs once the broker acknowledged it."""

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                self._failures.append(err.str())
            elif on_delivered is not None:
                on_delivered(msg)

        while True:
            try:
                self._producer.produce(topic, value, key, headers=headers, on_delivery=delivered)
                break
            except BufferError:
                self._producer.poll(0.05)
        self._producer.poll(0)

    def flush(self, what: str, timeout_s: float = 60) -> None:
        """Wait for every acknowledgement. Raises RuntimeError naming ``what`` if any delivery failed or
        some are still outstanding after ``timeout_s``."""
        outstanding = self._producer.flush(timeout_s)
        failures, self._failures = self._failures, []
        if outstanding or failures:
            raise RuntimeError(f"{what} failed: {outstanding} undelivered, errors {failures[:3]}")


class EventProducer:
    """One idempotent producer for many sends: its set-up (metadata, the producer id, the broker
    connection) is paid once, by the first send, not by every later one."""

    def __init__(self, producer_conf: Mapping[str, Any]) -> None:
        self._out = Deliveries({**producer_conf, "linger.ms": 5, "enable.idempotence": True})

    def send(
        self,
        topic: str,
        kind: str,
        count: int,
        rate: float = 0.0,
        poison_ratio: float = 0.0,
        seed: int | None = None,
        too_large_bytes: int | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> ProduceReport:
        """Send ``count`` events of ``kind`` to ``topic`` at ``rate`` per second (0: as fast as possible),
        replacing a ``poison_ratio`` share by malformed messages. Keys are host names. ``too_large_bytes``
        is the padding of the ``too_large`` poison kind, which is left out when None. ``stop()``, asked before
        each event, ends the sending early. Blocks until every message sent is acknowledged; raises
        RuntimeError if any delivery fails."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        gen = EventGenerator(seed)
        rng = random.Random(seed)
        poison_kinds = sorted(k for k in POISON_KINDS if too_large_bytes or k != "too_large")
        target = required_field(kind)
        report = ProduceReport()
        start = time.monotonic()
        header: ClientHeaders = [("event.kind", kind.encode())]
        while report.sent < count and not (stop and stop()):
            chunk = min(_CHUNK, count - report.sent)
            for event in gen.logs(chunk) if kind == "logs" else gen.metrics(chunk):
                if stop and stop():
                    break
                value: bytes | None
                if poison_ratio and rng.random() < poison_ratio:
                    pk = rng.choice(poison_kinds)
                    value = make_poison(pk, event, target, too_large_bytes, rng)
                    report.poison[pk] += 1
                else:
                    value = msgspec.json.encode(event)
                if rate:
                    ahead = start + report.sent / rate - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
                self._out.send(topic, value, event["host"].encode(), header)
                report.sent += 1
        self._out.flush(f"producing to {topic}")
        report.seconds = time.monotonic() - start
        return report
