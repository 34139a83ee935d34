"""Delivery verification: does every item of every input have a result or a dead letter?

Reads the input, output and dead-letter topics from the beginning to their current end (no consumer group,
nothing committed) and reports, per input partition, how many items were lost, duplicated or answered out
of order. The tests use it after every fault scenario; operators run ``microbatch verify`` after an incident.

An input of a format that fans out (OTLP: one item per log record) is split with that format, to know how
many items it holds; each is answered by the result or dead letter with its ``source.index``, or all of
them at once by a dead letter of the whole message (no ``source.index``: the message was unreadable).

The result of an assembled row answers every message it lists (``row.inputs.offsets``); an input of a
metrics format needs one answer. A message whose points fed no scored row (another plugin only, or rows
that closed incomplete) has none by design: it counts as lost here, so verify rows on inputs the model
reads all of, and read ``microbatch_points_total`` and ``microbatch_rows_total`` for the rest.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from service.backfill.bounds import parse, resolve
from service.config import DlqSettings, InputSettings, OutputSettings, Settings
from service.errors import (
    EXIT_OK,
    BrokerUnavailableError,
    CouldNotCheckError,
    NotAuthorizedError,
    UnknownTopicError,
)
from service.flow.records import InputRecord
from service.formats import FORMATS, Format, load_format
from service.tools.reader import ClientConf, offsets_lookup, read_to_end

Coord = tuple[int, int]  # (input partition, input offset)
Key = tuple[int, int, int | None]  # (input partition, input offset, item index or None for the whole message)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, help="the input topic")
    output, dlq = OutputSettings.env("topic"), DlqSettings.env("topic")
    parser.add_argument("--output", default=None, help=f"results topic (default {output})")
    parser.add_argument("--dlq", default=None, help=f"dead-letter topic (default {dlq})")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to read each topic")
    parser.add_argument(
        "--format",
        default=None,
        choices=FORMATS,
        help=f"the input format (default {InputSettings.env('format')}): how many items each input holds",
    )
    parser.add_argument(
        "--from",
        dest="start",
        default=None,
        help="check only inputs from here on (the forms `microbatch backfill` takes; default: the beginning)",
    )
    parser.add_argument(
        "--to", dest="end", default=None, help="check only inputs before this (same forms; default: the end)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--strict-order",
        action="store_true",
        help="also fail when answers are out of offset order (services with length bucketing off)",
    )


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Exit 0 when nothing was lost (and, with --strict-order, nothing answered out of order), else 1;
    4 (CouldNotCheckError) when a topic cannot be read to its end: a permission missing, a broker gone."""
    client_conf = settings.kafka.client_config()
    try:
        window = None
        if args.start is not None or args.end is not None:
            window = range_of(client_conf, args.input, args.start or "earliest", args.end or "latest")
        report = verify(
            client_conf,
            args.input,
            args.output or settings.output.topic,
            args.dlq or settings.dlq.topic,
            args.timeout,
            # OTLP requests hold metrics where rows are assembled: MICROBATCH_ASSEMBLE__ENABLED=true says so.
            fmt=load_format(args.format or settings.input.format, metrics=settings.assemble.enabled is True),
            in_range=window,
        )
    except (NotAuthorizedError, BrokerUnavailableError, TimeoutError, RuntimeError) as exc:
        raise CouldNotCheckError(f"could not check: {exc}") from None
    strict = args.strict_order
    print(msgspec.json.encode(report).decode() if args.json else format_report(report, strict_order=strict))
    return EXIT_OK if report.judge(strict_order=strict) else 1


def range_of(client_conf: ClientConf, topic: str, start: str, end: str) -> Callable[[int, int], bool]:
    """Whether (partition, offset) of ``topic`` lies in ``[start, end)``, each a bound as
    ``microbatch backfill`` takes it (``service.backfill.bounds``), resolved now: give times or offsets to
    check the range a backfill resolved earlier (``latest`` has moved on since, if the topic grew)."""
    now_ms = time.time_ns() // 1_000_000
    first, last = parse("--from", start, lambda: now_ms), parse("--to", end, lambda: now_ms)
    with offsets_lookup(client_conf) as lookup:
        tps = [(topic, p) for p in lookup.partitions(topic)]
        starts, _ = resolve("--from", first, tps, lookup)
        ends, _ = resolve("--to", last, tps, lookup)
    bounds = {p: (starts[(t, p)], ends[(t, p)]) for t, p in tps}
    return lambda partition, offset: (
        partition in bounds and bounds[partition][0] <= offset < bounds[partition][1]
    )


@dataclass
class PartitionReport:
    """Counts for one input partition. ``items`` is what its inputs hold (one each, unless the format
    fans out); ``lost`` items have neither a result nor a dead letter; ``duplicates`` are answers beyond
    the first; ``out_of_order`` are first answers that appeared after an answer to a later offset of the
    same input partition, in the same output partition."""

    partition: int
    inputs: int = 0
    items: int = 0
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
        names = ("inputs", "items", "results", "dead_letters", "lost", "duplicates", "out_of_order")
        return {name: self.total(name) for name in names}


def _result_source(value: Any) -> tuple[str, Key] | None:
    """Where a result (a decoded value) says its item came from; None when it does not say."""
    try:
        source = value["source"]
        index = source.get("index")
        return source["topic"], (
            int(source["partition"]),
            int(source["offset"]),
            None if index is None else int(index),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _row_inputs(value: Any, topic: str) -> list[Key] | None:
    """The messages of ``topic`` an assembled row's result answers (``row.inputs.offsets``), each whole;
    None when the result is not a row's."""
    try:
        offsets = value["row"]["inputs"]["offsets"]
        prefix = f"{topic}["
        return [
            (int(lane[len(prefix) : -1]), int(offset), None)
            for lane, listed in offsets.items()
            if lane.startswith(prefix) and lane.endswith("]")
            for offset in listed
        ]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _decoded(record: InputRecord, decoder: msgspec.json.Decoder[Any]) -> Any:
    try:
        return decoder.decode(record.value or b"")
    except msgspec.DecodeError:
        return None


def _dead_letter_source(record: InputRecord) -> tuple[str, Key] | None:
    headers = {k: v for k, v in record.headers or [] if v is not None}
    try:
        index = headers.get("source.index")
        return headers["source.topic"].decode(), (
            int(headers["source.partition"]),
            int(headers["source.offset"]),
            None if index is None else int(index),
        )
    except (KeyError, ValueError, UnicodeDecodeError):
        return None


def _items(record: InputRecord, fmt: Format | None) -> int:
    """How many answers an input needs: one, or one per item when its format fans out (an unreadable
    message is answered by one dead letter, of the whole message)."""
    if fmt is None or not fmt.fans_out or fmt.metrics or not record.value:
        return 1
    try:
        return len(fmt.split(record.value))
    except Exception:  # unreadable (InvalidMessage), or a format's bug: the service dead-letters it whole
        return 1


def verify(
    client_conf: ClientConf,
    input_topic: str,
    output_topic: str,
    dlq_topic: str | None = None,
    timeout_s: float = 60,
    *,
    fmt: Format | None = None,
    in_range: Callable[[int, int], bool] | None = None,
) -> VerifyReport:
    """Compare the three topics as they are now. Inputs produced after the call started are ignored;
    answers to inputs of other topics (a shared output topic) are ignored too. ``fmt`` is the input
    format, needed only when it fans out (None: one item per input). ``in_range(partition, offset)``:
    only those inputs, and the answers to them, are checked (None: all)."""
    inputs: dict[int, list[tuple[int, int]]] = defaultdict(list)  # partition -> [(offset, items)]
    for record in read_to_end(client_conf, input_topic, timeout_s):
        if in_range is None or in_range(record.partition, record.offset):
            inputs[record.partition].append((record.offset, _items(record, fmt)))
    wanted: Callable[[int, int], bool] = in_range or (lambda _p, _o: True)

    answers: Counter[Key] = Counter()
    first_seen: set[Coord] = set()
    highest: dict[tuple[int, int], int] = defaultdict(lambda: -1)
    reports = {
        p: PartitionReport(p, inputs=len(offs), items=sum(n for _o, n in offs)) for p, offs in inputs.items()
    }
    decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder()
    for record in read_to_end(client_conf, output_topic, timeout_s):
        value = _decoded(record, decoder)
        rows = _row_inputs(value, input_topic)
        if rows is not None:  # an assembled row: it answers each message that fed it, in no offset order
            for key in rows:
                if not wanted(key[0], key[1]):
                    continue
                reports.setdefault(key[0], PartitionReport(key[0])).results += 1
                answers[key] += 1
            continue
        found = _result_source(value)
        if found is None or found[0] != input_topic or not wanted(found[1][0], found[1][1]):
            continue
        key = found[1]
        report = reports.setdefault(key[0], PartitionReport(key[0]))
        report.results += 1
        answers[key] += 1
        lane, coord = (record.partition, key[0]), (key[0], key[1])
        if coord not in first_seen:
            first_seen.add(coord)
            if key[1] < highest[lane]:
                report.out_of_order += 1
        highest[lane] = max(highest[lane], key[1])
    for dead in _read_if_exists(client_conf, dlq_topic, timeout_s):
        found = _dead_letter_source(dead)
        if found is None or found[0] != input_topic or not wanted(found[1][0], found[1][1]):
            continue
        reports.setdefault(found[1][0], PartitionReport(found[1][0])).dead_letters += 1
        answers[found[1]] += 1

    fans_out = fmt is not None and fmt.fans_out
    for partition, offsets in inputs.items():
        report = reports[partition]
        for offset, items in offsets:
            whole = answers.get((partition, offset, None), 0)  # answers without an index
            if whole or not fans_out:
                lost, duplicates = (0 if whole else 1), max(whole - 1, 0)
            else:  # one answer due per item (none for a request without records)
                counts = [answers.get((partition, offset, i), 0) for i in range(items)]
                lost, duplicates = counts.count(0), sum(max(n - 1, 0) for n in counts)
            report.lost += lost
            report.duplicates += duplicates
            if lost and len(report.lost_offsets) < 20:
                report.lost_offsets.append(offset)
    return VerifyReport(input_topic, [reports[p] for p in sorted(reports)])


def _read_if_exists(client_conf: ClientConf, topic: str | None, timeout_s: float) -> Iterator[InputRecord]:
    """A dead-letter topic that was never created simply holds no dead letters."""
    if not topic:
        return
    try:
        yield from read_to_end(client_conf, topic, timeout_s)
    except UnknownTopicError:
        return


def format_report(report: VerifyReport, *, strict_order: bool = False) -> str:
    """A table for people, one row per input partition and a total."""
    cols = ("inputs", "items", "results", "dead_letters", "lost", "duplicates", "out_of_order")
    lines = [f"{'partition':>9} " + " ".join(f"{c:>12}" for c in cols)]
    for p in report.partitions:
        lines.append(f"{p.partition:>9} " + " ".join(f"{getattr(p, c):>12}" for c in cols))
        if p.lost_offsets:
            lines.append(f"{'':>9} lost offsets (first {len(p.lost_offsets)}): {p.lost_offsets}")
    total = report.summary()
    lines.append(f"{'total':>9} " + " ".join(f"{total[c]:>12}" for c in cols))
    if not report.ok:
        lines.append("FAILED: items lost")
    elif not report.judge(strict_order=strict_order):
        lines.append("FAILED: inputs answered out of offset order")
    else:
        lines.append("OK: nothing lost")
    return "\n".join(lines)
