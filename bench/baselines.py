"""The systems the service is compared with, each run as its own process by ``python -m bench``:

    python -m bench.baselines plain [--consume-batch 500]
    python -m bench.baselines passthrough [--consume-batch 500]
    python -m bench.baselines naive
    python -m bench.baselines batch-loop [--consume-batch 32]
    python -m bench.baselines raw-ort --kind logs --seconds 10 [--order length] --out r.json

Settings come from the same ``MICROBATCH_*`` variables as ``microbatch run``, so the Kafka clients get exactly
the service's options (``KafkaSettings.consumer_config()`` / ``producer_config()``: fetch, linger,
compression, acks, idempotence, offsets stored only after delivery) and the model the service's session
options. The Kafka baselines run until SIGTERM/SIGINT, then flush, commit and exit 0, like the service;
their outputs carry the input's key and headers, like the service's.

- ``plain``: consume -> produce the value unchanged, written for speed with confluent-kafka alone and none
  of the service's pieces: one delivery callback per record, a contiguous acknowledged watermark per input
  partition (:mod:`bench.plain`). No parsing, no model: the transport ceiling the service is held to.
- ``passthrough``: the same copy through the service's own transport pieces (one delivery callback per
  consumed group, its offset tracker), no model: beside ``plain`` it shows what that bookkeeping costs.
- ``naive``: what the service replaces. Poll one message, run the model on a batch of one, produce the
  result (the service's record format), wait for its acknowledgement, commit synchronously; repeat.
- ``batch-loop``: what a user writes from a tutorial. ``consume(32, timeout)`` (the timeout is the
  service's window, ``MAX_WAIT_MS``), one ``session.run`` over what came, one result per message,
  produce, flush, commit synchronously; repeat.
- ``raw-ort``: no Kafka. The scenario's events, parsed and preprocessed (tokenised, padded) in advance into
  batches of ``MICROBATCH_BATCH__MAX_SIZE``, then only ``InferenceSession.run`` is timed: the model ceiling.
  ``--order length`` sorts the items by length before batching: the least padding any batching can get.
  The processor's ``prepare`` (text: tokenisation), which the service pays per message too, is timed
  apart on the same items and added, so that the ceiling is one the service could reach.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from itertools import groupby
from operator import itemgetter
from pathlib import Path

import msgspec
import numpy as np
import structlog
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from bench.plain import AckWatermark, Relay
from service.config import Settings, load_settings, require_topics
from service.engine import load_model, warm_up
from service.errors import ConfigError, InvalidMessage, Reason
from service.flow.decode import decode
from service.flow.encode import dead_letter, result_record
from service.flow.model import Model
from service.flow.offsets import OffsetTracker
from service.flow.records import Headers, InputRecord, OutRecord, Rejection, TopicPartition
from service.kafka.delivery import Batch
from service.kafka.source import to_record
from service.observability import logs
from service.tools.harness.measure import tensor_padding_efficiency
from service.tools.harness.workload import make_events

_log = structlog.get_logger("microbatch.baseline")

Source = tuple[TopicPartition, int]
Record = tuple[str, bytes | None, bytes | None, Headers | None, Source]  # topic, value, key, headers
_FLUSH_TIMEOUT_S = 30.0


class Outbox:
    """The producer of a baseline: queues records, re-sends a failed delivery (nothing may be lost, or
    the benchmark's count check fails), and hands back the sources of the acknowledged ones."""

    def __init__(self, producer: Producer) -> None:
        self._producer = producer
        self._acked: list[Source] = []
        self._done: list[Batch[Record]] = []
        self._retry: list[Record] = []
        self.failures = 0

    def send(
        self, topic: str, value: bytes | None, key: bytes | None, headers: Headers | None, source: Source
    ) -> None:
        record = (topic, value, key, headers, source)
        callback = partial(self._on_delivery, record)
        while True:
            try:
                # Header values are bytes; the stub's list type is invariant over str | bytes | None.
                self._producer.produce(topic, value, key, headers=headers, on_delivery=callback)  # type: ignore[arg-type]
                return
            except BufferError:  # local queue full: serve delivery reports until there is room
                self._producer.poll(0.05)

    def send_all(self, records: list[Record]) -> None:
        """Queue ``records`` with one shared delivery callback, as the service's sink queues a batch's
        outputs (:class:`service.kafka.delivery.Batch`): the ceiling pays what the service pays."""
        Batch(records, _PRODUCED, self._batch_failed, self._batch_done).produce_all(self._producer)

    def _batch_done(self, batch: Batch[Record]) -> None:
        self._done.append(batch)  # not a bound append: _take replaces the list

    def _batch_failed(self, record: Record, _err: KafkaError) -> None:
        self.failures += 1
        self._retry.append(record)

    def poll(self, timeout_s: float = 0.0) -> list[Source]:
        self._producer.poll(timeout_s)
        self._resend()
        return self._take()

    def flush(self, timeout_s: float = _FLUSH_TIMEOUT_S) -> list[Source]:
        """Wait until everything queued, re-sends included, is acknowledged (or ``timeout_s`` passed)."""
        deadline = time.monotonic() + timeout_s
        acked: list[Source] = []
        while time.monotonic() < deadline:
            self._producer.flush(max(0.0, min(1.0, deadline - time.monotonic())))
            self._resend()
            acked += self._take()
            if not len(self._producer) and not self._retry:
                break
        return acked

    def _on_delivery(self, record, err, _msg) -> None:
        if err is None:
            self._acked.append(record[4])
        else:
            self.failures += 1
            self._retry.append(record)

    def _resend(self) -> None:
        retry, self._retry = self._retry, []
        for topic, value, key, headers, source in retry:
            self.send(topic, value, key, headers, source)

    def _take(self) -> list[Source]:
        acked, self._acked = self._acked, []
        done, self._done = self._done, []
        for batch in done:
            acked += [record[4] for record in batch.delivered()]
        return acked


_PRODUCED = itemgetter(0, 1, 2, 3)  # a Record's topic, value, key, headers


def _kafka_clients(settings: Settings) -> tuple[Consumer, Producer]:
    """A consumer and a producer with the service's options (and its client logging)."""
    kafka, private = settings.kafka, settings.kafka.private_values()
    consumer = Consumer(
        kafka.consumer_config() | {"logger": logs.client_log(kafka.consumer_config(), private)}
    )
    producer = Producer(
        kafka.producer_config() | {"logger": logs.client_log(kafka.producer_config(), private)}
    )
    return consumer, producer


def _clients(settings: Settings) -> tuple[Consumer, Outbox]:
    consumer, producer = _kafka_clients(settings)
    return consumer, Outbox(producer)


def _record_tp(record: Record) -> TopicPartition:
    return record[4][0]


def _acknowledge(tracker: OffsetTracker, acked: list[Source]) -> None:
    """Acknowledged sources into the tracker, by partition run (as ``Checkpoint.acknowledge`` does)."""
    for tp, run in groupby(sorted(acked, key=itemgetter(0)), itemgetter(0)):
        tracker.done_run(tp, [offset for _tp, offset in run])


def _store(consumer: Consumer, offsets: dict[TopicPartition, int]) -> None:
    if offsets:
        consumer.store_offsets(offsets=[KafkaTopicPartition(t, p, o) for (t, p), o in offsets.items()])


def _subscribe(
    consumer: Consumer, settings: Settings, forget: Callable[[list[TopicPartition]], None]
) -> None:
    """Subscribe to the input topics; what is known of a partition is ``forget``-ten when it is assigned,
    since consuming it starts again at its committed offset."""

    def assigned(_consumer: Consumer, parts: list[KafkaTopicPartition]) -> None:
        forget([(p.topic, p.partition) for p in parts])
        _log.info("partitions_assigned", partitions=[f"{p.topic}[{p.partition}]" for p in parts])

    consumer.subscribe(settings.input.topics, on_assign=assigned)


def _finish(consumer: Consumer, outbox: Outbox, tracker: OffsetTracker, stats: dict[str, int]) -> None:
    """The service's shutdown order: flush, store what was delivered, commit synchronously, close."""
    _acknowledge(tracker, outbox.flush())
    _store(consumer, tracker.take_committable())
    _commit_and_close(consumer, delivery_failures=outbox.failures, **stats)


def _commit_and_close(consumer: Consumer, **stats: int) -> None:
    try:
        consumer.commit(asynchronous=False)
    except Exception as exc:  # nothing stored since the last auto-commit
        _log.debug("commit_skipped", error=str(exc))
    consumer.close()
    _log.info("stopped", **stats)


def plain(settings: Settings, stopping: threading.Event, consume_batch: int) -> None:
    """Copy every input record (key, value, headers) to the output topic until ``stopping`` is set: the
    consume -> produce loop of someone who knows confluent-kafka, the ceiling the service is held to.

    Commit order: an offset is stored only once the output of it and of every offset consumed before it
    in its partition is acknowledged (acked 34 35 36 40 -> store 37), and auto-commit commits what is
    stored. On stopping: flush until every output is acknowledged, store, commit synchronously, close."""
    consumer, producer = _kafka_clients(settings)
    marks = AckWatermark()
    relay = Relay(producer, settings.output.topic, marks)
    _subscribe(consumer, settings, marks.forget)
    idle_s = settings.input.idle_poll_ms / 1000
    events = 0
    while not stopping.is_set():
        # Wait for one, then take whatever else is fetched without waiting (as the passthrough does).
        messages = consumer.consume(1, idle_s)
        if messages:
            messages += consumer.consume(consume_batch - 1, 0)
        for msg in messages:
            if msg.error() is None:
                # A record without an error has its coordinates (the stubs are wider).
                tp, offset = (msg.topic(), msg.partition()), msg.offset()
                marks.consumed(tp, offset)  # type: ignore[arg-type]
                relay.send(msg, tp, offset)  # type: ignore[arg-type]
                events += 1
        relay.poll(0)
        _store(consumer, marks.take())
    relay.flush(_FLUSH_TIMEOUT_S)
    _store(consumer, marks.take())
    _commit_and_close(consumer, delivery_failures=relay.failures, events=events)


def passthrough(settings: Settings, stopping: threading.Event, consume_batch: int) -> None:
    """Copy every input record (key, value, headers) to the output topic until ``stopping`` is set."""
    consumer, outbox = _clients(settings)
    tracker = OffsetTracker()
    _subscribe(consumer, settings, tracker.forget)
    topic = settings.output.topic
    idle_s = settings.input.idle_poll_ms / 1000
    stats = {"events": 0}
    while not stopping.is_set():
        # consume(n, timeout) returns only when it has n messages or the timeout expired, so wait for
        # one, then take whatever else is already fetched without waiting: no added latency at a trickle,
        # full batches under a backlog.
        messages = consumer.consume(1, idle_s)
        if messages:
            messages += consumer.consume(consume_batch - 1, 0)
        records: list[Record] = []
        for msg in messages:
            if msg.error() is not None:
                continue
            # A record without an error has its coordinates, and byte header values (the stubs are wider).
            source = ((msg.topic(), msg.partition()), msg.offset())
            records.append((topic, msg.value(), msg.key(), msg.headers(), source))  # type: ignore[arg-type]
        # The service's bookkeeping, the way the service does it: offsets by partition run, one delivery
        # callback per consumed group.
        for tp, run in groupby(records, _record_tp):
            tracker.track_run(tp, [record[4][1] for record in run])
        outbox.send_all(records)
        stats["events"] += len(records)
        _acknowledge(tracker, outbox.poll(0))
        _store(consumer, tracker.take_committable())
    _finish(consumer, outbox, tracker, stats)


def _input_record(msg: Message) -> InputRecord:
    return to_record(msg, time.monotonic())


def naive(settings: Settings, stopping: threading.Event) -> None:
    """One message at a time: poll, infer a batch of one, produce, wait for the ack, commit synchronously."""
    idle_s = settings.input.idle_poll_ms / 1000
    _model_loop(settings, stopping, 1, lambda consumer: [m for m in [consumer.poll(idle_s)] if m is not None])


def batch_loop(settings: Settings, stopping: threading.Event, consume_batch: int) -> None:
    """``consume(consume_batch, window)``, one model call over what came, produce, flush, commit; repeat."""
    window_s = settings.batch.max_wait_ms / 1000
    _model_loop(settings, stopping, consume_batch, lambda consumer: consumer.consume(consume_batch, window_s))


def _model_loop(
    settings: Settings, stopping: threading.Event, size: int, fetch: Callable[[Consumer], list[Message]]
) -> None:
    """Until ``stopping``: ``fetch`` messages (at most ``size``), answer them in one model call, wait for
    every answer's acknowledgement, commit synchronously."""
    loaded = load_model(settings)
    warm_up(loaded, {1, size}, settings.model.env("name"))
    consumer, outbox = _clients(settings)
    tracker = OffsetTracker()  # unused for commits here, but _finish and _subscribe share the shape
    _subscribe(consumer, settings, tracker.forget)
    stats = {"events": 0, "dead_letters": 0}
    while not stopping.is_set():
        records = [_input_record(m) for m in fetch(consumer) if m.error() is None]
        if records:
            _answer_and_commit(consumer, outbox, settings, loaded, records, stats)
    _finish(consumer, outbox, tracker, stats)


def _answer_and_commit(
    consumer: Consumer,
    outbox: Outbox,
    settings: Settings,
    loaded: Model,
    records: list[InputRecord],
    stats: dict[str, int],
) -> None:
    """Answer ``records`` in one batch, wait until every answer is acknowledged, commit past them."""
    consumed_ms = time.time_ns() // 1_000_000
    for record, out in zip(records, _answers(records, settings, consumed_ms, loaded), strict=True):
        if out.topic == settings.dlq.topic:
            if not stats["dead_letters"]:  # the first one says why; the runner then reports a shortfall
                _log.warning("dead_letter", **{k: (v or b"").decode() for k, v in out.headers or []})
            stats["dead_letters"] += 1
        outbox.send(out.topic, out.value, out.key, out.headers, (record.tp, record.offset))
    outbox.flush()
    ends: dict[TopicPartition, int] = {}
    for record in records:
        ends[record.tp] = record.offset + 1
    consumer.commit(offsets=[KafkaTopicPartition(t, p, o) for (t, p), o in ends.items()], asynchronous=False)
    stats["events"] += len(records)


def _answers(
    records: list[InputRecord], settings: Settings, consumed_ms: int, loaded: Model
) -> list[OutRecord]:
    """The service's output for each input, in order: a result (``batch_size``: the items run together),
    or a dead letter. The model runs once over every input that decoded."""
    processor, dlq = loaded.processor, settings.dlq.topic
    outcomes = [decode(record, processor.parse, settings.input.max_value_bytes) for record in records]
    good = [o for o in outcomes if not isinstance(o, Rejection)]
    try:
        items = loaded.caps.prepare([o.item for o in good])
        results: list = loaded.score(items) if items else []
    except Exception as exc:
        failed = InvalidMessage(Reason.INFERENCE_ERROR, f"{type(exc).__name__}: {exc}"[:500])
        results = [failed] * len(good)
    answered = iter(results)
    produced_ms = time.time_ns() // 1_000_000
    outs = []
    for record, outcome in zip(records, outcomes, strict=True):
        if isinstance(outcome, Rejection):
            outs.append(dead_letter(outcome, dlq))
            continue
        result = next(answered)
        if isinstance(result, InvalidMessage):
            outs.append(dead_letter(Rejection(record, result.reason, result.detail), dlq))
        else:
            topic = settings.output.topic
            outs.append(result_record(record, topic, loaded.ref, result, len(good), consumed_ms, produced_ms))
    return outs


def raw_ort(settings: Settings, kind: str, seconds: float, seed: int, pool_batches: int, order: str) -> dict:
    """Time ``InferenceSession.run`` alone over pre-built batches of the scenario's events for about
    ``seconds``; return the figures (``window_s`` in epoch seconds, for the caller's CPU sampling).

    ``order`` ``arrival`` batches the events as they come; ``length`` sorts them by cost (tokens) first,
    so each batch pads as little as possible."""
    loaded = load_model(settings)
    engine, processor = loaded.engine, loaded.processor
    size = settings.batch.max_size
    parsed = [processor.parse(value) for _key, value in make_events(kind, size * pool_batches, seed)]
    # e.g. tokenisation: done in advance, and timed apart (in batches of the same size, as the service
    # prepares a consumed group at once), to add what the service pays for it per item.
    prepare_start = time.perf_counter()
    prepare = loaded.caps.prepare
    items = [item for i in range(0, len(parsed), size) for item in prepare(parsed[i : i + size])]
    prepare_s_per_item = (time.perf_counter() - prepare_start) / max(len(parsed), 1)
    cost = loaded.caps.cost
    if order == "length" and cost is not None:
        items.sort(key=cost)
    batches = [processor.preprocess(items[i : i + size]) for i in range(0, len(items), size)]
    masks = [b["attention_mask"] for b in batches if "attention_mask" in b]
    for batch in batches[:8]:  # warm-up, as the service does before its first real batch
        engine.run(batch)
    timings: list[float] = []
    start_epoch = time.time()
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for batch in batches:
            began = time.perf_counter()
            engine.run(batch)
            timings.append(time.perf_counter() - began)
            if began - start >= seconds:
                break
    elapsed = time.perf_counter() - start
    batch_ms = np.asarray(timings) * 1000
    events = len(timings) * size
    return {
        "events": events,
        "batches": len(timings),
        "batch_size": size,
        "seconds": round(elapsed, 3),
        # The ceiling: the model's time plus the preparing the service pays for the same items.
        "events_per_s": round(events / (elapsed + events * prepare_s_per_item), 1),
        "model_events_per_s": round(events / elapsed, 1),
        "prepare_us_per_item": round(prepare_s_per_item * 1_000_000, 2),
        "batch_ms_p50": round(float(np.median(batch_ms)), 3),
        "batch_ms_mean": round(float(batch_ms.mean()), 3),
        "batch_ms_p99": round(float(np.percentile(batch_ms, 99)), 3),
        "padding_efficiency": tensor_padding_efficiency(masks),
        "provider": engine.provider,
        "order": order,
        "window_s": [start_epoch, start_epoch + elapsed],
    }


def _until_signalled() -> threading.Event:
    stopping = threading.Event()

    def _stop(_signum: int, _frame: object) -> None:
        stopping.set()  # only a flag: see service.startup.Stop

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    return stopping


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.baselines", description=__doc__)
    sub = parser.add_subparsers(dest="name", required=True)
    plain_ = sub.add_parser("plain")
    plain_.add_argument("--consume-batch", type=int, default=500, help="messages per consume call")
    pt = sub.add_parser("passthrough")
    pt.add_argument("--consume-batch", type=int, default=500, help="messages per consume call")
    sub.add_parser("naive")
    loop = sub.add_parser("batch-loop")
    loop.add_argument("--consume-batch", type=int, default=32, help="messages per consume call")
    raw = sub.add_parser("raw-ort")
    raw.add_argument("--kind", choices=("metrics", "logs"), required=True)
    raw.add_argument("--seconds", type=float, default=10.0)
    raw.add_argument("--seed", type=int, default=1)
    raw.add_argument("--pool-batches", type=int, default=256, help="distinct batches, cycled")
    raw.add_argument("--order", choices=("arrival", "length"), default="arrival", help="how to batch")
    raw.add_argument("--out", type=Path, required=True, help="where to write the figures (JSON)")
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
        logs.configure(settings.log)
        stopping = _until_signalled()
        if args.name == "raw-ort":
            figures = raw_ort(settings, args.kind, args.seconds, args.seed, args.pool_batches, args.order)
            args.out.write_bytes(msgspec.json.encode(figures))
            return 0
        require_topics(settings)
        runs: dict[str, Callable[[], None]] = {
            "plain": lambda: plain(settings, stopping, args.consume_batch),
            "passthrough": lambda: passthrough(settings, stopping, args.consume_batch),
            "batch-loop": lambda: batch_loop(settings, stopping, args.consume_batch),
            "naive": lambda: naive(settings, stopping),
        }
        run = runs[args.name]
        _log.info("started", baseline=args.name, inputs=settings.input.topics, output=settings.output.topic)
        run()
        return 0
    except ConfigError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
