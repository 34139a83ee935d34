"""Delivery verification: does every input offset have a result or a dead letter?

Reads the input, output and dead-letter topics from the beginning to their current end (no consumer group,
nothing committed) and reports, per input partition, how many inputs were lost, duplicated or answered out
of order. The tests use it after every fault scenario; operators run ``microbatch verify`` after an incident.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

import msgspec
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from service.errors import UnknownTopicError

Coord = tuple[int, int]  # (input partition, input offset)


@dataclass
class PartitionReport:
    """Counts for one input partition. ``lost`` inputs have neither a result nor a dead letter;
    ``duplicates`` are answers beyond the first; ``out_of_order`` are first answers that appeared after
    an answer to a later offset of the same input partition, in the same output partition."""

    partition: int
    inputs: int = 0
    results: int = 0
    dead_letters: int = 0
    lost: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    lost_offsets: list[int] = field(default_factory=list)


@dataclass
class VerifyReport:
    input_topic: str
    partitions: list[PartitionReport]

    def total(self, name: str) -> int:
        return sum(getattr(p, name) for p in self.partitions)

    @property
    def ok(self) -> bool:
        """Nothing lost. Answer order is reported, not judged here: length bucketing reorders text
        answers by design (``judge(strict_order=True)`` when the service runs with it off)."""
        return self.total("lost") == 0

    def judge(self, *, strict_order: bool = False) -> bool:
        return self.ok and (not strict_order or self.total("out_of_order") == 0)

    def summary(self) -> dict[str, int]:
        names = ("inputs", "results", "dead_letters", "lost", "duplicates", "out_of_order")
        return {name: self.total(name) for name in names}


def read_to_end(client_conf: dict, topic: str, timeout_s: float = 60) -> Iterator[Message]:
    """Yield every record of ``topic`` from the beginning up to the end it had when reading started.
    ``client_conf`` holds the connection options (bootstrap servers, security). Raises TimeoutError if
    the end is not reached within ``timeout_s`` (e.g. the broker is down)."""
    consumer = Consumer(
        client_conf
        | {
            "group.id": f"microbatch-verify-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            # EOF events end a partition whose last offsets are no records (transaction markers).
            "enable.partition.eof": True,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
        if metadata.error is not None:
            raise UnknownTopicError(f"topic {topic!r}: {metadata.error.str()}")
        ends = {}
        for p in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        yield from _consume_until(consumer, ends, timeout_s)
    finally:
        consumer.close()


def _consume_until(consumer: Consumer, ends: dict[int, int], timeout_s: float) -> Iterator[Message]:
    deadline = time.monotonic() + timeout_s
    remaining = dict(ends)
    while remaining:
        if time.monotonic() > deadline:
            raise TimeoutError(f"partitions {sorted(remaining)} not read to their end in {timeout_s}s")
        for msg in consumer.consume(1000, 0.5):
            end = remaining.get(msg.partition())
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(err.str())
                remaining.pop(msg.partition(), None)
                continue
            if end is None:
                continue
            if msg.offset() < end:
                yield msg
            if msg.offset() >= end - 1:
                del remaining[msg.partition()]


def _result_source(msg: Message, decoder: msgspec.json.Decoder) -> tuple[str, Coord] | None:
    try:
        source = decoder.decode(msg.value())["source"]
        return source["topic"], (int(source["partition"]), int(source["offset"]))
    except (msgspec.DecodeError, KeyError, TypeError, ValueError):
        return None


def _dead_letter_source(msg: Message) -> tuple[str, Coord] | None:
    headers = dict(msg.headers() or [])
    try:
        return headers["source.topic"].decode(), (
            int(headers["source.partition"]),
            int(headers["source.offset"]),
        )
    except (KeyError, ValueError, AttributeError):
        return None


def verify(
    client_conf: dict,
    input_topic: str,
    output_topic: str,
    dlq_topic: str | None = None,
    timeout_s: float = 60,
) -> VerifyReport:
    """Compare the three topics as they are now. Inputs produced after the call started are ignored;
    answers to inputs of other topics (a shared output topic) are ignored too."""
    inputs: dict[int, list[int]] = defaultdict(list)
    for msg in read_to_end(client_conf, input_topic, timeout_s):
        inputs[msg.partition()].append(msg.offset())

    answers: Counter[Coord] = Counter()
    first_seen: set[Coord] = set()
    highest: dict[tuple[int, int], int] = defaultdict(lambda: -1)
    reports = {p: PartitionReport(p, inputs=len(offs)) for p, offs in inputs.items()}
    decoder = msgspec.json.Decoder()
    for msg in read_to_end(client_conf, output_topic, timeout_s):
        found = _result_source(msg, decoder)
        if found is None or found[0] != input_topic:
            continue
        coord = found[1]
        report = reports.setdefault(coord[0], PartitionReport(coord[0]))
        report.results += 1
        answers[coord] += 1
        lane = (msg.partition(), coord[0])
        if coord not in first_seen:
            first_seen.add(coord)
            if coord[1] < highest[lane]:
                report.out_of_order += 1
        highest[lane] = max(highest[lane], coord[1])
    for msg in _read_if_exists(client_conf, dlq_topic, timeout_s):
        found = _dead_letter_source(msg)
        if found is None or found[0] != input_topic:
            continue
        reports.setdefault(found[1][0], PartitionReport(found[1][0])).dead_letters += 1
        answers[found[1]] += 1

    for partition, offsets in inputs.items():
        report = reports[partition]
        for offset in offsets:
            n = answers.get((partition, offset), 0)
            if n == 0:
                report.lost += 1
                if len(report.lost_offsets) < 20:
                    report.lost_offsets.append(offset)
            else:
                report.duplicates += n - 1
    return VerifyReport(input_topic, [reports[p] for p in sorted(reports)])


def _read_if_exists(client_conf: dict, topic: str | None, timeout_s: float) -> Iterator[Message]:
    """A dead-letter topic that was never created simply holds no dead letters."""
    if not topic:
        return
    try:
        yield from read_to_end(client_conf, topic, timeout_s)
    except UnknownTopicError:
        return


def format_report(report: VerifyReport, *, strict_order: bool = False) -> str:
    """A table for people, one row per input partition and a total."""
    cols = ("inputs", "results", "dead_letters", "lost", "duplicates", "out_of_order")
    lines = [f"{'partition':>9} " + " ".join(f"{c:>12}" for c in cols)]
    for p in report.partitions:
        lines.append(f"{p.partition:>9} " + " ".join(f"{getattr(p, c):>12}" for c in cols))
        if p.lost_offsets:
            lines.append(f"{'':>9} lost offsets (first {len(p.lost_offsets)}): {p.lost_offsets}")
    total = report.summary()
    lines.append(f"{'total':>9} " + " ".join(f"{total[c]:>12}" for c in cols))
    if not report.ok:
        lines.append("FAILED: inputs lost")
    elif not report.judge(strict_order=strict_order):
        lines.append("FAILED: inputs answered out of offset order")
    else:
        lines.append("OK: nothing lost")
    return "\n".join(lines)
