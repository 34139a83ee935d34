"""service/flow/pipeline.py: the loop and its parts, wired as ``service.startup.build_pipeline`` wires them,
driven by hand-written fakes behind SourceLike/SinkLike/EngineLike, the real FeaturesProcessor, the real
Telemetry and a fake clock."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np
import pytest

from service.config import Settings
from service.errors import EngineFailedError, Reason, is_out_of_memory
from service.flow.batcher import POOL_BATCHES
from service.flow.inflight import Inline, OffloadPolicy
from service.flow.model import Model, ModelRef
from service.flow.pipeline import Pipeline
from service.flow.records import InputRecord, OutRecord, TopicPartition
from service.observability import Health, Metrics, Telemetry
from service.processors.base import ModelInfo
from service.processors.features import FeaturesProcessor
from service.startup import build_pipeline
from service.tools.poison import POISON_KINDS, make_poison
from tests.support.fakes import (
    Assign,
    At,
    Coords,
    Do,
    FakeEngine,
    FakeSink,
    FakeSource,
    FakeTransactionalSink,
    Lost,
    Revoke,
    coords,
    onnxruntime_oom,
)

IN, OUT, DLQ = "in", "out", "dlq"
P0: TopicPartition = (IN, 0)
P1: TopicPartition = (IN, 1)
FEATURES = ["a", "b"]
MODEL = ModelRef("fake-model", "1.2.3", "CPUExecutionProvider")


def expected_score(a: float, b: float) -> float:
    """What FakeEngine computes for an event; exact in float32 for the small numbers used here."""
    return 2 * a + b


# -- the rig ----------------------------------------------------------------------------------------------


@dataclass
class Rig:
    pipeline: Pipeline
    telemetry: Telemetry
    source: FakeSource
    sink: FakeSink
    engine: FakeEngine
    clock: object
    events: list = field(default_factory=list)

    def run(self) -> Rig:
        self.pipeline.run()
        return self

    def results(self) -> dict[Coords, dict]:
        """Decoded result values by source coordinates (exactly one each, checked)."""
        values = [msgspec.json.decode(o.value) for o in self.sink.outputs(OUT)]
        found = Counter(self.coords_of(v) for v in values)
        assert all(n == 1 for n in found.values()), f"duplicate results: {found}"
        return {self.coords_of(v): v for v in values}

    def dead_letters(self) -> dict[Coords, OutRecord]:
        return {coords(o.source): o for o in self.sink.outputs(DLQ)}

    def kinds(self, *, ignore=("ack", "consumed")) -> list[str]:
        return [e[0] for e in self.events if e[0] not in ignore]

    @staticmethod
    def coords_of(value: dict) -> Coords:
        src = value["source"]
        return (src["topic"], src["partition"], src["offset"])


def event(a: float, b: float = 0.5) -> bytes:
    return msgspec.json.encode({"a": a, "b": b, "host": "web-1"})


def rec(
    offset: int,
    value: bytes | None = None,
    *,
    partition: int = 0,
    key: bytes | None = None,
    headers=None,
    timestamp_ms: int | None = None,
) -> InputRecord:
    """A record whose value defaults to an event with a = offset."""
    return InputRecord(
        IN, partition, offset, key, event(offset) if value is None else value, headers, timestamp_ms, 0.0
    )


@pytest.fixture
def rig(clock):
    def build(
        script: list,
        *,
        engine: FakeEngine | None = None,
        max_size: int = 4,
        max_wait_ms: float = 100.0,
        greedy: bool = False,
        max_value_bytes: int = 10_000,
        idle_poll_ms: int = 100,
        max_in_flight: int = 10_000,
        batch: dict | None = None,
        executor=None,
        make_processor: Callable[[ModelInfo], object] = FeaturesProcessor,
        input_format: str = "json",
        features: list[str] = FEATURES,
        delivery: dict | None = None,
        **sink_policy,
    ) -> Rig:
        events: list = []
        settings = Settings(
            input={
                "topics": [IN],
                "max_value_bytes": max_value_bytes,
                "idle_poll_ms": idle_poll_ms,
                "max_in_flight": max_in_flight,
                "format": input_format,
            },
            output={"topic": OUT},
            dlq={"topic": DLQ},
            batch={
                "min_size": 1,
                "max_size": max_size,
                "max_wait_ms": max_wait_ms,
                "adaptive": False,
                "natural": False,
            }
            | (batch or {}),
            log={"stats_interval_s": 3600},
            delivery=delivery or {},
        )
        source = FakeSource(script, clock, events, greedy=greedy)
        exactly_once = settings.delivery.guarantee == "exactly-once"
        sink = (
            FakeTransactionalSink(events, clock, **sink_policy)
            if exactly_once
            else FakeSink(events, **sink_policy)
        )
        engine = engine or FakeEngine()
        info = ModelInfo(
            name=MODEL.name,
            model_dir=Path("."),
            input_names=("features",),
            output_names=("score",),
            settings={"features": features},
        )
        processor = make_processor(info)
        health = Health(settings.metrics.liveness_timeout_s, settings.metrics.broker_timeout_s, clock)
        telemetry = Telemetry(Metrics(), health, settings.log.stats_interval_s, clock)
        pipeline = build_pipeline(
            settings,
            source,
            sink,
            Model.of(engine, processor, MODEL),
            telemetry,
            clock=clock,
            wall_ms=lambda: round(clock.now * 1000),
            executor=executor or Inline(),
            # The drain ceiling start-up would measure: here, the setting's.
            drain_max=settings.batch.drain_max_size,
        )
        source.on_exhausted = pipeline.stop
        return Rig(pipeline, telemetry, source, sink, engine, clock, events)

    return build


def assert_stores_follow_acks(events: list) -> None:
    """Every stored offset N for a partition is preceded by acks of every offset below N consumed from it."""
    consumed: dict[TopicPartition, set[int]] = {}
    acked: set[Coords] = set()
    for entry in events:
        if entry[0] == "consumed":
            for topic, partition, offset in entry[1]:
                consumed.setdefault((topic, partition), set()).add(offset)
        elif entry[0] == "ack":
            acked.add(entry[1])
        elif entry[0] == "store":
            for tp, next_offset in entry[1].items():
                below = {o for o in consumed.get(tp, set()) if o < next_offset}
                assert below, f"stored {tp}={next_offset} before consuming anything below it"
                missing = sorted(o for o in below if (*tp, o) not in acked)
                assert not missing, f"stored {tp}={next_offset} while {missing} were not acknowledged"


def last_stored(events: list) -> dict[TopicPartition, int]:
    result: dict[TopicPartition, int] = {}
    for entry in events:
        if entry[0] == "store":
            result |= entry[1]
    return result


# -- outputs ----------------------------------------------------------------------------------------------


def test_one_output_per_input_with_source_coordinates_key_and_headers(rig):
    records = [
        rec(
            o,
            partition=p,
            key=f"k{p}-{o}".encode(),
            headers=[("trace", f"{p}:{o}".encode())],
            timestamp_ms=1_700_000_000_000 + o,
        )
        for o in range(5)
        for p in (0, 1)
    ]
    r = rig([records]).run()
    results = r.results()
    assert set(results) == {coords(x) for x in records}
    by_coords = {coords(o.source): o for o in r.sink.outputs(OUT)}
    for record in records:
        out = by_coords[coords(record)]
        assert out.topic == OUT
        assert out.key == record.key
        assert out.headers == record.headers
        value = results[coords(record)]
        assert value["result"] == {"score": expected_score(record.offset, 0.5)}
        assert value["model"] == {"name": MODEL.name, "version": MODEL.version, "provider": MODEL.provider}
        assert value["timestamps"]["event_ms"] == record.timestamp_ms
    assert r.dead_letters() == {}
    assert last_stored(r.events) == {P0: 5, P1: 5}
    assert_stores_follow_acks(r.events)


@pytest.mark.parametrize("greedy", [False, True], ids=["source-honours-max", "source-returns-everything"])
def test_batches_never_exceed_max_size(rig, greedy):
    records = [rec(o) for o in range(11)]
    r = rig([records], max_size=4, greedy=greedy).run()
    assert max(r.engine.batch_sizes()) <= 4
    assert sum(r.engine.batch_sizes()) == 11  # nothing failed, so every item ran exactly once
    assert all(v["batch_size"] <= 4 for v in r.results().values())
    assert all(max_messages <= 4 for max_messages, _ in r.source.consume_calls)
    assert len(r.results()) == 11


def test_a_backlog_is_cut_into_full_batches_without_waiting(rig, clock):
    start = clock.now
    r = rig([[rec(o) for o in range(8)]], max_size=4).run()
    assert r.engine.batch_sizes() == [4, 4]
    assert clock.now == start  # no consume had to time out for the batches to be cut
    assert all(v["timestamps"]["produced_ms"] == round(start * 1000) for v in r.results().values())


def test_partial_batch_is_cut_when_its_oldest_item_has_waited_max_wait(rig, clock):
    t0 = clock.now
    wait = 0.1
    script = [At(t0 + 0.03 * k, [rec(k)]) for k in range(6)] + [At(t0 + 1.0, [rec(6)])]
    r = rig(script, max_size=10, max_wait_ms=wait * 1000).run()
    results = r.results()

    def produced_s(offset: int) -> float:
        return results[(IN, 0, offset)]["timestamps"]["produced_ms"] / 1000

    # 0..3 arrived before 0's deadline: one batch, cut at 0's arrival + max_wait, not pushed back by 1..3.
    assert {results[(IN, 0, k)]["batch_size"] for k in range(4)} == {4}
    assert [produced_s(k) for k in range(4)] == [pytest.approx(t0 + wait, abs=1e-3)] * 4
    # 4 and 5 form the next batch; its deadline runs from 4's arrival.
    assert {results[(IN, 0, k)]["batch_size"] for k in (4, 5)} == {2}
    assert produced_s(4) == pytest.approx(t0 + 0.12 + wait, abs=1e-3)
    # The last one was still waiting at shutdown and was drained then.
    assert produced_s(6) == pytest.approx(t0 + 1.0, abs=1e-3)


def test_consume_waits_briefly_when_idle_and_never_past_the_open_batchs_deadline(rig, clock):
    t0 = clock.now
    script = [[rec(0)], At(t0 + 5.0, [rec(1)])]
    r = rig(script, max_size=10, max_wait_ms=100, idle_poll_ms=250).run()
    calls = r.source.consume_calls
    # No batch open: block at most the idle poll time.
    assert calls[0][1] == pytest.approx(0.25)
    # rec(0) opened a batch: ask for what fills it, and block only until rec(0)'s deadline.
    assert calls[1] == (9, pytest.approx(0.1))
    assert r.results()[(IN, 0, 0)]["timestamps"]["produced_ms"] == round((t0 + 0.1) * 1000)
    assert all(timeout <= 0.25 for _, timeout in calls)


@pytest.mark.parametrize("natural", [True, False], ids=["natural", "window"])
def test_natural_batching_cuts_what_was_fetched_as_soon_as_the_loop_is_idle(rig, clock, natural):
    t0 = clock.now
    script = [At(t0, [rec(0)]), At(t0 + 0.03, [rec(1), rec(2)]), At(t0 + 1.0, [rec(3)])]
    r = rig(script, max_size=10, max_wait_ms=100, batch={"natural": natural}).run()
    produced = {k[2]: v["timestamps"]["produced_ms"] / 1000 for k, v in r.results().items()}
    if natural:
        # Nothing computing and nothing more fetched: each batch is what came, cut on arrival.
        assert r.engine.batch_sizes() == [1, 2, 1]
        assert produced == pytest.approx({0: t0, 1: t0 + 0.03, 2: t0 + 0.03, 3: t0 + 1.0}, abs=1e-3)
    else:
        # The window: 0 waits its 100 ms for the target, and 1 and 2 join it.
        assert r.engine.batch_sizes() == [3, 1]
        assert produced == pytest.approx({0: t0 + 0.1, 1: t0 + 0.1, 2: t0 + 0.1, 3: t0 + 1.0}, abs=1e-3)


def test_natural_batching_waits_while_the_target_is_stretched_past_max_size(rig, clock):
    # A backlog of 40 cheap items stretches the target past MAX_SIZE (4) to 8; the last 4 then wait for
    # the window, as the load needed large batches a moment ago. Once the target is back within
    # MAX_SIZE, a lone arrival is cut at once.
    t0 = clock.now
    script = [[rec(o) for o in range(40)], At(t0 + 1.0, [rec(40)])]
    batch = {"adaptive": True, "natural": True, "drain_max_size": 16}
    r = rig(script, max_size=4, max_wait_ms=100, batch=batch).run()
    assert r.engine.batch_sizes() == [1, 2, 3, 4, 5, 6, 7, 8, 4, 1]
    produced = {k[2]: v["timestamps"]["produced_ms"] / 1000 for k, v in r.results().items()}
    assert produced[35] == pytest.approx(t0, abs=1e-3)
    assert [produced[k] for k in range(36, 40)] == [pytest.approx(t0 + 0.1, abs=1e-3)] * 4
    assert produced[40] == pytest.approx(t0 + 1.0, abs=1e-3)


def test_natural_batching_gathers_what_arrives_while_a_batch_computes(rig, clock):
    # 10 ms per row: 1..3 arrive while 0 runs, and go together once it is done, not one by one.
    engine = SlowEngine(clock, per_item_s=0.01)
    t0 = clock.now
    script = [At(t0, [rec(0)]), At(t0 + 0.004, [rec(1)]), At(t0 + 0.006, [rec(2), rec(3)])]
    batch = {"natural": True, "linger_ms": 1.0}
    r = rig(script, engine=engine, max_size=10, max_wait_ms=100, batch=batch, greedy=True).run()
    assert engine.batch_sizes() == [1, 3]
    produced = {k[2]: v["timestamps"]["produced_ms"] / 1000 for k, v in r.results().items()}
    # 0 lingers 1 ms for company (none comes), then computes for 10 ms; 1..3 go at once after it.
    expected = {0: t0 + 0.011, 1: t0 + 0.041, 2: t0 + 0.041, 3: t0 + 0.041}
    assert produced == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("linger_ms", [0.0, 2.0])
def test_a_batch_just_opened_lingers_for_what_comes_soon_then_is_cut(rig, clock, linger_ms):
    t0 = clock.now
    script = [At(t0, [rec(0)]), At(t0 + 0.001, [rec(1)]), At(t0 + 0.01, [rec(2)]), At(t0 + 1.0, [rec(3)])]
    batch = {"natural": True, "linger_ms": linger_ms}
    r = rig(script, max_size=10, max_wait_ms=100, batch=batch).run()
    produced = {k[2]: v["timestamps"]["produced_ms"] / 1000 for k, v in r.results().items() if k[2] < 3}
    if linger_ms:
        # 1 came within 0's linger: one batch, cut when it came; 2 came long after, and waited out its
        # linger alone.
        assert r.engine.batch_sizes() == [2, 1, 1]
        assert produced == pytest.approx({0: t0 + 0.001, 1: t0 + 0.001, 2: t0 + 0.012}, abs=1e-4)
    else:
        assert r.engine.batch_sizes() == [1, 1, 1, 1]
        assert produced == pytest.approx({0: t0, 1: t0 + 0.001, 2: t0 + 0.01}, abs=1e-4)
    if linger_ms:  # one linger per batch opened
        assert [t for _count, t in r.source.consume_calls].count(linger_ms / 1000) == 3


def test_natural_batching_cuts_no_second_batch_while_the_first_computes(rig, clock):
    # A fetch of 7 records (a message of 1, one of 6) with a target of 4: a full batch goes at once; the 3
    # left are not cut beside it (a batch computing ends the idle moment), and take in the record that
    # arrives meanwhile.
    engine = SlowEngine(clock, per_item_s=0.01)
    t0 = clock.now
    fetched = [rec(0, otlp_json([(0, 0.5)])), rec(1, otlp_json([(i, 0.5) for i in range(1, 7)]))]
    script = [At(t0, fetched), At(t0 + 0.02, [rec(2, otlp_json([(7, 0.5)]))])]
    r = rig(
        script,
        engine=engine,
        max_size=4,
        batch={"natural": True, "pipeline_depth": 2},
        input_format="otlp-json",
        features=["attributes.a", "attributes.b"],
    ).run()
    assert engine.batch_sizes() == [4, 4]
    assert last_stored(r.events) == {P0: 3}


# -- dead letters -----------------------------------------------------------------------------------------


def test_poison_goes_to_the_dlq_with_original_bytes_and_headers(rig):
    kinds = ["not_json", "null", "too_large", "wrong_field_type", "missing_field", "empty"]
    poison = {}
    records = [rec(0)]
    for kind in kinds:
        offset = len(records)
        value = make_poison(kind, {"a": 1.0, "b": 2.0}, "a", 500)
        record = InputRecord(IN, 0, offset, f"key-{offset}".encode(), value, [("trace", b"t-1")], None, 0.0)
        poison[coords(record)] = (kind, record)
        records.append(record)
    records.append(rec(len(records)))
    r = rig([records], max_value_bytes=200).run()

    dead = r.dead_letters()
    assert set(dead) == set(poison)
    for key, (kind, record) in poison.items():
        out = dead[key]
        assert out.topic == DLQ
        assert out.key == record.key
        assert out.value == record.value  # unchanged: the same bytes, a null stays null
        headers = dict(out.headers)
        assert out.headers[0] == ("trace", b"t-1")  # the input's own headers come first, unchanged
        assert headers["error.reason"] == POISON_KINDS[kind].value.encode()
        assert headers["error.message"]
        assert headers["source.topic"] == IN.encode()
        assert headers["source.partition"] == b"0"
        assert headers["source.offset"] == str(record.offset).encode()
    assert set(r.results()) == {(IN, 0, 0), (IN, 0, len(records) - 1)}
    # Dead letters count as done: the partition commits past them.
    assert last_stored(r.events) == {P0: len(records)}
    assert_stores_follow_acks(r.events)


@pytest.mark.parametrize("position", [0, 1, 2, 3])
def test_one_failing_item_fails_alone_and_its_batch_mates_get_results(rig, position):
    values = [10, 11, 12, 13]
    bad = values[position]
    records = [rec(o, event(values[o])) for o in range(4)] + [rec(o) for o in range(4, 8)]
    r = rig([records], engine=FakeEngine(poison={bad}), max_size=4).run()

    dead = r.dead_letters()
    assert set(dead) == {(IN, 0, position)}
    headers = dict(dead[(IN, 0, position)].headers)
    assert headers["error.reason"] == Reason.INFERENCE_ERROR.value.encode()
    assert b"RuntimeError" in headers["error.message"]
    results = r.results()
    assert len(results) == 7
    for o in range(8):
        if o != position:
            a = values[o] if o < 4 else o
            assert results[(IN, 0, o)]["result"] == {"score": expected_score(a, 0.5)}
    # The failing item was tried on its own before it was given up.
    assert any(len(x) == 1 and x[0, 0] == bad for x in r.engine.calls)
    assert last_stored(r.events) == {P0: 8}


def test_two_failing_items_in_one_batch(rig):
    records = [rec(o) for o in range(1, 5)]  # a = 0.0 is the processor's warm-up sample: keep it healthy
    r = rig([records], engine=FakeEngine(poison={1.0, 4.0}), max_size=4).run()
    assert set(r.dead_letters()) == {(IN, 0, 1), (IN, 0, 4)}
    assert set(r.results()) == {(IN, 0, 2), (IN, 0, 3)}


@pytest.mark.parametrize("max_batch", [1, 2, 3])
def test_out_of_memory_on_big_batches_splits_until_every_item_gets_a_result(rig, max_batch):
    records = [rec(o) for o in range(8)]
    r = rig([records], engine=FakeEngine(max_batch=max_batch), max_size=4).run()
    assert r.dead_letters() == {}
    results = r.results()
    assert set(results) == {coords(x) for x in records}
    for o in range(8):
        assert results[(IN, 0, o)]["result"] == {"score": expected_score(o, 0.5)}
    # Every successful run stayed within what the "GPU" could hold.
    succeeded = [x for x in r.engine.calls if len(x) <= max_batch]
    assert sum(len(x) for x in succeeded) == 8


def test_onnx_runtimes_out_of_memory_splits_the_batch_and_holds_later_batches_at_half(rig):
    """ONNX Runtime's own out-of-memory error, injected at the engine: the batch of 16 is split down to
    what fits (16 -> 8 -> 4), nothing is lost, and the batches after it are cut at the size that fit
    instead of failing again (the hold lasts a minute: see test_sizing)."""
    records = [rec(o) for o in range(40)]
    engine = FakeEngine(max_batch=4, out_of_memory=onnxruntime_oom)
    r = rig([records], engine=engine, max_size=16).run()
    assert r.dead_letters() == {}
    assert set(r.results()) == {coords(x) for x in records}
    sizes = engine.batch_sizes()
    assert sizes[:3] == [16, 8, 4]  # the first batch, its first half, and its first quarter that fits
    assert [s for s in sizes if s > 4] == [16, 8, 8]  # only the first batch and its halves failed
    assert metric(r, "microbatch_batch_splits_total") == 3


def test_out_of_memory_is_told_from_other_failures_by_the_runtimes_text():
    assert is_out_of_memory(str(onnxruntime_oom(4)))
    assert is_out_of_memory("CUDA failure 2: out of memory ; GPU=0 ; hostname=x")
    assert is_out_of_memory("CUBLAS failure 3: CUBLAS_STATUS_ALLOC_FAILED")
    assert not is_out_of_memory("cannot score this row")


def test_a_model_that_fails_even_on_its_sample_stops_the_service_without_committing(rig):
    # An output with one row too many fails every batch, even of one item, and the known-good sample
    # too: the runtime is broken, so dead-lettering everything would silently replace the stream.
    r = rig([[rec(o) for o in range(5)]], engine=FakeEngine(extra_rows=1), max_size=4)
    with pytest.raises(EngineFailedError):
        r.run()
    assert r.dead_letters() == {}
    assert "store" not in r.kinds()
    assert r.kinds()[-1] == "close"  # the group learns at once, not after a session timeout


# -- offsets ----------------------------------------------------------------------------------------------


def test_offsets_are_stored_only_after_acks_and_only_up_to_the_contiguous_acked_run(rig):
    records = [rec(o) for o in range(8)]
    r = rig([records[:4], records[4:]], max_size=4, reverse=True, withheld={(IN, 0, 2)}).run()
    assert_stores_follow_acks(r.events)
    stores = [e[1] for e in r.events if e[0] == "store"]
    # Before the shutdown flush delivers offset 2, nothing at or past 2 may be stored.
    flush_at = r.events.index(("flush",))
    before_flush = [e[1][P0] for e in r.events[:flush_at] if e[0] == "store"]
    assert before_flush, "acked offsets 0 and 1 should have been stored during the run"
    assert max(before_flush) == 2
    assert stores[-1] == {P0: 8}
    assert r.kinds()[-2:] == ["commit", "close"]


def test_nothing_is_stored_when_nothing_is_acknowledged(rig):
    r = rig([[rec(o) for o in range(6)]], poll_acks=False, flush_acks=False).run()
    assert len(r.sink.outputs(OUT)) == 6  # the work was done...
    assert "store" not in r.kinds()  # ...but no offset may be stored without an ack
    assert r.kinds()[-3:] == ["flush", "commit", "close"]
    assert r.sink.pending() == 6


def test_offsets_of_each_partition_advance_independently(rig):
    records = [rec(o, partition=p) for o in range(4) for p in (0, 1)]
    r = rig([records], max_size=8, withheld={(IN, 1, 0)}, flush_releases_withheld=False).run()
    assert_stores_follow_acks(r.events)
    stored = last_stored(r.events)
    assert stored[P0] == 4
    assert P1 not in stored  # its first offset was never acknowledged


# -- rebalances and shutdown ------------------------------------------------------------------------------


def test_on_revoked_processes_flushes_stores_and_commits_before_returning(rig):
    open_batch = [rec(0), rec(1), rec(2), rec(0, partition=1)]
    r = rig([open_batch, Revoke([P0])], max_size=8).run()
    start = r.events.index(("revoke_start", [P0]))
    end = r.events.index(("revoke_end", [P0]))
    inside = [e for e in r.events[start + 1 : end] if e[0] != "ack"]
    assert [e[0] for e in inside] == ["send"] * 4 + ["flush", "store", "commit"]
    assert {e[2] for e in inside if e[0] == "send"} == {coords(x) for x in open_batch}
    assert inside[-2] == ("store", {P0: 3, P1: 1})
    # Nothing was sent before the revoke: the batch was still open (not full, not due).
    assert "send" not in [e[0] for e in r.events[:start]]


def test_after_revoke_and_reassign_redelivered_offsets_are_processed_again(rig):
    script = [[rec(0), rec(1)], Revoke([P0]), Assign([P0]), [rec(2), rec(3)]]
    r = rig(script, max_size=8).run()
    assert set(r.results()) == {(IN, 0, o) for o in range(4)}
    assert last_stored(r.events) == {P0: 4}
    assert_stores_follow_acks(r.events)


def test_late_acks_from_before_a_revoke_do_not_crash_after_reassignment(rig):
    # The revoke's flush times out with offsets 1 and 2 undelivered, so the commit stays at 1 and the
    # partition, assigned back, re-delivers 1 and 2. Then the old deliveries and the new ones all succeed.
    late = {(IN, 0, 1), (IN, 0, 2)}
    script = [[rec(0), rec(1), rec(2)], Revoke([P0]), Assign([P0]), [rec(1), rec(2)]]
    r = rig(script, max_size=8, withheld=late, flush_releases_withheld=False)
    r.source.script.append(Do(r.sink.release))  # the slow deliveries finally succeed
    r.run()  # must not raise
    assert last_stored(r.events)[P0] == 3


def test_on_lost_drops_waiting_items_of_lost_partitions_and_never_commits_them(rig):
    script = [[rec(0), rec(1), rec(0, partition=1), rec(1, partition=1)], Lost([P1])]
    r = rig(script, max_size=8).run()
    start = r.events.index(("lost_start", [P1]))
    end = r.events.index(("lost_end", [P1]))
    assert "commit" not in [e[0] for e in r.events[start:end]]
    assert set(r.results()) == {(IN, 0, 0), (IN, 0, 1)}
    assert r.dead_letters() == {}
    assert all(P1 not in e[1] for e in r.events if e[0] == "store")


def test_stop_then_the_end_of_run_drains_flushes_commits_and_closes_in_order(rig):
    r = rig([[rec(0), rec(1), rec(2)]], max_size=8).run()
    assert r.kinds() == ["subscribe", "send", "send", "send", "flush", "store", "commit", "close"]
    assert r.events[0] == ("subscribe", (IN,))
    assert last_stored(r.events) == {P0: 3}


def test_stop_before_run_still_commits_and_closes_without_consuming(rig):
    r = rig([[rec(0)]])
    r.pipeline.stop()
    r.run()
    assert r.source.consume_calls == []
    assert r.kinds() == ["subscribe", "flush", "commit", "close"]


# -- back-pressure ----------------------------------------------------------------------------------------


def test_consumer_pauses_at_the_in_flight_limit_and_resumes_at_half(rig):
    stuck = [rec(o) for o in range(4)]
    r = rig([stuck], max_size=4, max_in_flight=4, withheld={coords(x) for x in stuck})
    r.source.script += [[], [], Do(r.sink.release), [], [rec(4)]]
    r.run()
    kinds = r.kinds()
    assert kinds.count("resume") == 1
    first_pause, resume = kinds.index("pause"), kinds.index("resume")
    assert first_pause < resume
    # Paused only once four messages were unacknowledged, and it stayed paused until the acks came.
    sends_before_pause = kinds[:first_pause].count("send")
    assert sends_before_pause == 4
    consumed_at = next(i for i, e in enumerate(r.events) if e[0] == "consumed" and coords(rec(4)) in e[1])
    assert consumed_at > r.events.index(("resume",))
    assert set(r.results()) == {coords(rec(o)) for o in range(5)}


def test_below_the_limit_the_consumer_is_never_paused(rig):
    r = rig([[rec(o) for o in range(8)]], max_size=4, max_in_flight=9).run()
    assert "pause" not in r.kinds()


# -- outputs the broker refuses, unreadable headers, unencodable results, rewinds ----------------------


def test_a_refused_result_becomes_a_dead_letter_and_a_refused_dead_letter_loses_only_its_value(rig):
    big = event(7.0) + b" " * 50  # still valid JSON
    r = rig([[rec(0), rec(1, value=b"not json")], [rec(2, value=big)]], max_size=2)
    sink = r.sink
    original_send = sink.send

    def refuse_first_of_each(out):  # the broker refuses the result of offset 0 and the dead letter of 1
        original_send(out)
        key = (out.topic, coords(out.source))
        if key in {(OUT, (IN, 0, 0)), (DLQ, (IN, 0, 1))} and key not in refused_once:
            refused_once.add(key)
            sink.unacked.remove(out)
            sink.refused.append((out, "Broker: Message size too large"))

    refused_once: set = set()
    sink.send = refuse_first_of_each
    r.run()
    dead = [o for o in sink.outputs(DLQ)]
    rejected = [o for o in dead if dict(o.headers)["error.reason"] == b"output_rejected"]
    assert [coords(o.source) for o in rejected] == [(IN, 0, 0)]
    assert rejected[0].value == rec(0).value  # the input's own bytes, as for any dead letter
    dropped = [o for o in dead if "error.value_dropped" in dict(o.headers)]
    assert [coords(o.source) for o in dropped] == [(IN, 0, 1)]
    assert dropped[0].value is None and dict(dropped[0].headers)["error.value_dropped"] == b"8"
    assert last_stored(r.events) == {P0: 3}


def test_unreadable_headers_are_dead_lettered(rig):
    broken = msgspec.structs.replace(rec(0), headers=None, header_error="unreadable headers: bad name")
    r = rig([[broken, rec(1)]], max_size=2).run()
    (dead,) = r.dead_letters().values()
    assert dict(dead.headers)["error.reason"] == b"invalid_headers"
    assert set(r.results()) == {(IN, 0, 1)}


def test_a_rewound_partition_is_tracked_afresh_instead_of_crashing(rig):
    r = rig([[rec(5), rec(6)], [rec(2), rec(3)]], max_size=2).run()
    assert set(r.results()) == {(IN, 0, o) for o in (2, 3, 5, 6)}
    assert last_stored(r.events) == {P0: 4}


def test_partitions_assigned_after_back_pressure_ended_are_resumed_by_name(rig):
    # librdkafka keeps a partition's paused flag across a rebalance: losing the partitions ends the
    # back-pressure (nothing in flight any more), so the re-assigned ones must be resumed explicitly.
    stuck = [rec(o) for o in range(4)]
    script = [stuck, [], Lost([P0]), Assign([P0]), [rec(4)]]
    r = rig(script, max_size=4, max_in_flight=4, withheld={coords(x) for x in stuck})
    r.run()
    assert r.events.index(("pause",)) < r.events.index(("resume",))
    assert ("resume_partitions", (P0,)) in r.events[r.events.index(("resume",)) :]


# -- throughput: overlap, adaptive size, cost and buckets ---------------------------------------------------


class BlockingEngine(FakeEngine):
    """Blocks its FIRST batch until released, recording when it is inside run."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = threading.Event()
        self.release = threading.Event()

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not self.calls:
            self.inside.set()
            assert self.release.wait(30), "never released"
        return super().run(feeds)


class RecordingProcessor(FeaturesProcessor):
    """FeaturesProcessor that logs its batch calls, and optionally reports a cost (the event's ``a``)."""

    def __init__(self, info: ModelInfo, log: list, *, with_cost: bool = False) -> None:
        super().__init__(info)
        self.log = log
        if with_cost:
            self.cost = lambda item: int(item[0])

    def prepare(self, items: list) -> list:
        self.log.append(("prepare", len(items)))
        return items

    def preprocess(self, items):
        self.log.append(("preprocess", [int(i[0]) for i in items]))
        return super().preprocess(items)


def test_the_next_batch_is_consumed_and_preprocessed_while_the_engine_runs(rig):
    engine = BlockingEngine()
    seen: dict[str, object] = {}
    log: list = []

    def while_batch_one_runs() -> None:
        seen["engine_busy"] = engine.inside.is_set() and not engine.release.is_set()
        seen["preprocessed"] = [e for e in log if e[0] == "preprocess"]
        seen["sent_before_release"] = len(rig_.sink.sent)
        engine.release.set()

    script = [[rec(o) for o in range(8)], Do(while_batch_one_runs)]
    executor = ThreadPoolExecutor(max_workers=1)
    rig_ = r = rig(
        script,
        engine=engine,
        max_size=4,
        idle_poll_ms=1,
        executor=executor,
        batch={"pipeline_depth": 2},
        make_processor=lambda info: RecordingProcessor(info, log),
    )
    r.run()
    executor.shutdown()
    assert seen["engine_busy"] is True
    assert seen["preprocessed"] == [("preprocess", [0, 1, 2, 3]), ("preprocess", [4, 5, 6, 7])]
    assert seen["sent_before_release"] == 0
    assert [v["result"]["score"] for v in sorted(r.results().values(), key=Rig.coords_of)] == [
        expected_score(o, 0.5) for o in range(8)
    ]
    sends = [e[2][2] for e in r.events if e[0] == "send"]
    assert sends == list(range(8))  # results in input order, though batch 2 was ready first


def test_adaptive_batches_grow_on_a_backlog(rig):
    records = [rec(o) for o in range(60)]
    r = rig([records], max_size=8, batch={"adaptive": True, "min_size": 1, "latency_slo_ms": 1000}).run()
    sizes = r.engine.batch_sizes()
    assert sizes[0] == 1
    assert max(sizes) == 8
    assert sizes[: sizes.index(8)] == sorted(sizes[: sizes.index(8)])  # grew step by step
    assert len(r.results()) == 60


class SlowEngine(FakeEngine):
    """Each batch takes ``per_item_s`` per row on the fake clock."""

    def __init__(self, clock, per_item_s: float) -> None:
        super().__init__()
        self.clock, self.per_item_s = clock, per_item_s

    def run(self, feeds):
        (x,) = feeds.values()
        self.clock.advance(self.per_item_s * len(x))
        return super().run(feeds)


def test_adaptive_batches_halve_when_a_batch_overruns_the_slo_budget(rig, clock):
    # Budget (300 - 100) / 2 = 100 ms per batch at 15 ms per item: 6 fit, 7 overrun.
    engine = SlowEngine(clock, per_item_s=0.015)
    settings = {"adaptive": True, "min_size": 4, "latency_slo_ms": 300}
    r = rig([[rec(o) for o in range(60)]], engine=engine, max_size=16, batch=settings).run()
    sizes = engine.batch_sizes()
    assert sizes[:5] == [4, 5, 6, 7, 4]  # grew on the backlog; 7 overran: halved to 3, floored at min 4
    assert max(sizes) == 7
    assert len(r.results()) == 60


def test_items_with_a_cost_are_bucketed_and_padding_is_reported(rig):
    # Costs alternate short and long; with a window the batcher groups them.
    costs = [2, 30, 3, 31, 2, 29, 3, 30]
    records = [rec(o, event(c)) for o, c in enumerate(costs)]
    log: list = []
    r = rig(
        [records],
        max_size=4,
        batch={"bucket_window": 8, "max_tokens": 0},
        make_processor=lambda info: RecordingProcessor(info, log, with_cost=True),
    ).run()
    batches = [sorted(b) for kind, b in log if kind == "preprocess"]
    assert batches == [[2, 2, 3, 3], [29, 30, 30, 31]]
    # The first consume asked for one message; once a batch was due, a non-blocking one topped up
    # the pool so there was a choice: POOL_BATCHES batches' worth (32, more than the window of 8), less
    # the 4 waiting.
    assert log[0] == ("prepare", 1)
    assert (POOL_BATCHES * 4 - 4, 0) in r.source.consume_calls
    totals = r.telemetry.stats.summary()
    assert totals["padding_efficiency"] == pytest.approx((10 + 120) / (4 * 3 + 4 * 31), abs=1e-3)
    # Every input still has exactly one result, and the commit covers all of them.
    assert len(r.results()) == 8
    assert last_stored(r.events) == {P0: 8}


def test_offload_policy_runs_fast_models_inline_and_slow_ones_on_the_thread():
    policy = OffloadPolicy(offload_above_s=0.001, inline_below_s=0.0005, weight=0.5)
    assert policy.offload  # until it knows better
    for _ in range(5):
        policy.observe(0.0001)
    assert not policy.offload
    policy.observe(0.0009)  # the mean rises, but not past the upper threshold: no flapping
    assert not policy.offload
    for _ in range(3):
        policy.observe(0.003)
    assert policy.offload
    policy.observe(0.0006)  # between the thresholds: stays
    assert policy.offload


# -- metrics and health -------------------------------------------------------------------------------


def metric(r: Rig, name: str, **labels: str) -> float | None:
    return r.telemetry.metrics.registry.get_sample_value(name, labels)


def test_metrics_count_inputs_results_dead_letters_splits_and_commits(rig, clock):
    records = [rec(0), rec(1, value=b"not json"), *[rec(o) for o in range(2, 8)]]
    r = rig(
        [Assign([P0]), records, Do(lambda: clock.advance(2.0)), [rec(8)]],
        engine=FakeEngine(max_batch=2),
        max_size=4,
    )
    r.source.commit_ok = False  # the final commit fails: counted, not raised
    r.run()
    assert metric(r, "microbatch_events_consumed_total") == 9
    assert metric(r, "microbatch_results_produced_total") == 8
    assert metric(r, "microbatch_dead_letters_total", reason="invalid_json") == 1
    assert metric(r, "microbatch_outputs_acknowledged_total") == 9
    assert metric(r, "microbatch_batch_splits_total") >= 1  # batches of 4 on an engine that holds 2
    assert metric(r, "microbatch_batch_size_sum") == 8
    assert metric(r, "microbatch_end_to_end_latency_seconds_count") == 8
    assert metric(r, "microbatch_commit_failures_total") == 1
    # The state gauges were published at least once while P0 was assigned.
    assert metric(r, "microbatch_assigned_partitions") == 1
    assert metric(r, "microbatch_consumer_lag", topic=IN, partition="0") is not None


def test_queue_wait_is_the_oldest_items_wait_until_its_batch_is_cut(rig, clock):
    # One item arrives and the window (100 ms) runs out before the next: cut 0.1 s after it was consumed.
    # The second is cut at once by the shutdown that follows it: no wait.
    r = rig([[rec(0)], At(clock.now + 1.0, [rec(1)])], max_size=4).run()
    assert metric(r, "microbatch_queue_wait_seconds_count") == 2
    assert metric(r, "microbatch_queue_wait_seconds_sum") == pytest.approx(0.1, abs=1e-6)


def test_the_loop_ticks_health_and_is_not_ready_once_stopping(rig, clock):
    r = rig([[rec(0)], [rec(1)]], max_size=1)
    r.telemetry.health.warmed_up = True
    r.run()
    assert r.telemetry.health.loop_at is not None
    assert r.telemetry.health.live()[0] is True
    assert r.telemetry.health.ready() == (False, "shutting down")


# -- fan-out: one message, many items -------------------------------------------------------------------


def otlp_json(values: list[tuple[float, float]]) -> bytes:
    """An OTLP/JSON logs request with one record per (a, b), carried as record attributes."""
    records = [
        {"attributes": [{"key": "a", "value": {"doubleValue": a}}, {"key": "b", "value": {"doubleValue": b}}]}
        for a, b in values
    ]
    return msgspec.json.encode({"resourceLogs": [{"scopeLogs": [{"logRecords": records}]}]})


def test_a_fan_out_message_is_stored_only_once_every_item_is_acknowledged(rig):
    sizes = {0: 5, 1: 0, 2: 7, 3: 1}
    records = [rec(o, otlp_json([(o * 10 + i, 0.5) for i in range(n)])) for o, n in sizes.items()]
    r = rig(
        [records[:2], records[2:]],
        max_size=4,
        input_format="otlp-json",
        features=["attributes.a", "attributes.b"],
        reverse=True,
    ).run()
    values = [msgspec.json.decode(o.value) for o in r.sink.outputs(OUT)]
    answered = sorted((v["source"]["offset"], v["source"]["index"]) for v in values)
    assert answered == [(o, i) for o, n in sizes.items() for i in range(n)]
    for v in values:
        assert v["result"] == {
            "score": expected_score(v["source"]["offset"] * 10 + v["source"]["index"], 0.5)
        }
    acked: Counter[int] = Counter()
    for entry in r.events:
        if entry[0] == "ack":
            acked[entry[1][2]] += 1
        elif entry[0] == "store":
            done_below = entry[1][P0]
            assert all(acked[o] == sizes[o] for o in range(done_below)), (done_below, acked)
    assert last_stored(r.events) == {P0: 4}


def test_batches_count_items_not_messages(rig):
    records = [rec(0, otlp_json([(i, 0.5) for i in range(10)]))]
    r = rig([records], max_size=4, input_format="otlp-json", features=["attributes.a", "attributes.b"]).run()
    assert r.engine.batch_sizes() == [4, 4, 2]


def test_a_bad_record_gets_its_own_dead_letter_and_its_siblings_their_results(rig):
    good, bad = {"key": "a", "value": {"doubleValue": 1}}, {"key": "a", "value": {"stringValue": "x"}}
    b = {"key": "b", "value": {"doubleValue": 2}}
    request = {"resourceLogs": [{"scopeLogs": [{"logRecords": [
        {"attributes": [good, b]}, {"attributes": [bad, b]}, {"attributes": [good, b]}
    ]}]}]}  # fmt: skip
    value = msgspec.json.encode(request)
    r = rig([[rec(0, value)]], input_format="otlp-json", features=["attributes.a", "attributes.b"]).run()
    indexes = sorted(msgspec.json.decode(o.value)["source"]["index"] for o in r.sink.outputs(OUT))
    [letter] = r.sink.outputs(DLQ)
    assert indexes == [0, 2]
    assert letter.value == value
    assert dict(letter.headers)["source.index"] == b"1"
    assert dict(letter.headers)["error.reason"] == b"invalid_event"
    assert last_stored(r.events) == {P0: 1}


# -- exactly-once -----------------------------------------------------------------------------------------

EXACTLY_ONCE = {"guarantee": "exactly-once", "transaction_ms": 50}


def test_exactly_once_commits_offsets_in_the_transaction_and_stores_none(rig, clock):
    script = [[rec(0), rec(1), rec(0, partition=1)], At(clock.now + 0.2, [rec(2)])]
    r = rig(script, max_size=2, max_wait_ms=10, delivery=EXACTLY_ONCE).run()
    assert set(r.results()) == {(IN, 0, 0), (IN, 0, 1), (IN, 1, 0), (IN, 0, 2)}
    assert "store" not in r.kinds() and "commit" not in r.kinds()
    commits = r.sink.committed
    assert len(commits) >= 2  # one when the first transaction was due, one at the stop
    assert {**commits[0], **commits[-1]} == {P0: 3, P1: 1}
    assert r.sink.visible == r.sink.sent


def test_an_aborted_transaction_drops_what_the_loop_holds_and_reads_again_from_the_last_commit(rig, clock):
    first = [rec(0), rec(1), rec(2), rec(3)]

    def fail() -> None:
        r.sink.fail_with = "delivery to out failed"

    # 0-3 committed; then 4-5 sent and their transaction fails: the partition is read again from 4.
    script = [first, At(clock.now + 0.2, [rec(4), rec(5)]), Do(fail), At(clock.now + 0.4, [rec(4), rec(5)])]
    r = rig(script, max_size=2, max_wait_ms=10, delivery=EXACTLY_ONCE)
    r.run()
    assert ("rewind", {P0: 4}) in r.events
    visible = Counter(coords(o.source) for o in r.sink.visible)
    assert visible == Counter({(IN, 0, o): 1 for o in range(6)})
    assert r.sink.committed[-1] == {P0: 6}
    assert r.pipeline.in_flight == 0
