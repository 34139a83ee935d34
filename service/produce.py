"""``microbatch produce``: a load generator of realistic log and monitoring events, optionally poisoned."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
from confluent_kafka import Producer

from service import logs
from service.generate import METRIC_FEATURES, EventGenerator
from service.poison import POISON_KINDS, make_poison

KINDS = ("logs", "metrics")
_CHUNK = 1000


@dataclass
class ProduceReport:
    """What was sent: totals, and the poison messages by kind."""

    sent: int = 0
    poison: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0


def required_field(kind: str) -> str:
    """The field the reference processor of ``kind`` cannot do without (poison targets it)."""
    return "message" if kind == "logs" else METRIC_FEATURES[0]


def produce_events(
    producer_conf: dict,
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
    replacing a ``poison_ratio`` share by malformed messages. Keys are host names. ``too_large_bytes`` is
    the padding of the ``too_large`` poison kind, which is left out when None. Blocks until every message
    is acknowledged; raises RuntimeError if any delivery fails."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")
    gen = EventGenerator(seed)
    rng = random.Random(seed)
    poison_kinds = sorted(k for k in POISON_KINDS if too_large_bytes or k != "too_large")
    target = required_field(kind)
    producer = Producer(
        producer_conf | {"linger.ms": 5, "enable.idempotence": True, "logger": logs.LIBRDKAFKA}
    )
    failures: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures.append(err.str())

    report = ProduceReport()
    start = time.monotonic()
    header = [("event.kind", kind.encode())]
    while report.sent < count and not (stop and stop()):
        events = (
            gen.logs(min(_CHUNK, count - report.sent))
            if kind == "logs"
            else gen.metrics(min(_CHUNK, count - report.sent))
        )
        for event in events:
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
            while True:
                try:
                    producer.produce(
                        topic, value, event["host"].encode(), headers=header, on_delivery=on_delivery
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
            report.sent += 1
    if producer.flush(60) or failures:
        raise RuntimeError(f"delivery failed: {failures[:3]}")
    report.seconds = time.monotonic() - start
    return report
