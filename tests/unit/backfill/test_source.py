"""service/backfill/source.py: the range read through the service's own loop. A scripted fake source
(``tests.support.fakes.FakeSource``, plus what assignment adds), the real pipeline as ``build_pipeline``
wires it, the real ``features`` processor, a fake engine and a fake clock."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from service.backfill.command import offline_batch
from service.backfill.ranges import Ranges
from service.backfill.source import MAX_BLOCK_S, RangeSource
from service.config import Settings
from service.flow.inflight import Inline
from service.flow.model import Model, ModelRef
from service.flow.records import InputRecord, TopicPartition
from service.observability import Health, Metrics, Telemetry
from service.processors.base import ModelInfo
from service.processors.features import FeaturesProcessor
from service.startup import build_pipeline
from tests.support.fakes import FakeClock, FakeEngine, FakeSink, FakeSource

IN, OUT, DLQ = "in", "out", "dlq"
P0: TopicPartition = (IN, 0)
P1: TopicPartition = (IN, 1)


def rec(partition: int, offset: int, value: bytes | None = None) -> InputRecord:
    value = msgspec.json.encode({"a": offset, "b": 1.0}) if value is None else value
    return InputRecord(IN, partition, offset, None, value, None, None, 0.0)


class AssignedSource(FakeSource):
    """A FakeSource that is assigned partitions, knows positions and partition ends, and pauses some."""

    def __init__(self, script, clock, events, positions=None, ends=None):
        super().__init__(script, clock, events, greedy=True)
        self.positions_now: dict[TopicPartition, int] = positions or {}
        self.ends_script: list[dict[TopicPartition, int]] = list(ends or [])
        self.paused: set[TopicPartition] = set()

    def assign(self, starts):
        self.events.append(("assign", dict(starts)))

    def positions(self, tps):
        return {tp: self.positions_now[tp] for tp in tps if tp in self.positions_now}

    def take_ends(self):
        return self.ends_script.pop(0) if self.ends_script else {}

    def pause_partitions(self, tps):
        self.paused.update(tps)
        self.events.append(("pause_partitions", sorted(tps)))


class Listener:
    def __init__(self) -> None:
        self.assigned: list[list[TopicPartition]] = []

    def on_assigned(self, tps):
        self.assigned.append(tps)

    def on_revoked(self, tps):
        raise AssertionError("an assignment is never revoked")

    on_lost = on_revoked


def ranged(script, starts, last, **fake):
    events: list = []
    done: list[int] = []
    source = AssignedSource(script, FakeClock(), events, **fake)
    return RangeSource(source, Ranges(starts, last), lambda: done.append(1)), source, events, done


def test_only_partitions_with_something_to_read_are_assigned_at_their_start():
    range_source, _source, events, done = ranged([], {P0: 5, P1: 9}, {P0: 8, P1: 9})
    listener = Listener()
    range_source.subscribe([IN], listener)
    assert events == [("assign", {P0: 5})]
    assert listener.assigned == [[P0]]
    assert done == []


def test_consume_blocks_briefly_drops_what_is_past_the_end_and_pauses_finished_partitions():
    range_source, source, _events, done = ranged(
        [[rec(0, 5), rec(1, 0), rec(0, 6), rec(0, 7)]], {P0: 5, P1: 0}, {P0: 7, P1: 2}
    )
    kept = range_source.consume(500, 30.0)
    assert [(r.partition, r.offset) for r in kept] == [(0, 5), (1, 0), (0, 6)]
    assert source.consume_calls == [(500, MAX_BLOCK_S)]
    assert source.paused == {P0}
    assert done == []


def test_a_partition_whose_last_offsets_hold_no_record_is_done_by_its_position_or_its_end():
    # P0's last record in range is at 2 and offset 3 is a transaction marker; P1 ends where the client
    # reported the end of the partition.
    range_source, source, _events, done = ranged(
        [[rec(0, 2), rec(1, 0)], []], {P0: 0, P1: 0}, {P0: 4, P1: 3}, positions={P0: 4}, ends=[{}, {P1: 3}]
    )
    range_source.consume(10, 1.0)
    assert range_source.ranges.pending == [P0, P1]
    range_source.consume(10, 1.0)  # nothing came: positions are asked
    assert range_source.ranges.done
    assert source.paused == {P0, P1}
    assert done == [1]
    range_source.consume(10, 1.0)  # asked again while done: a finish that waits for open rows hears it
    assert done == [1, 1]


def test_back_pressure_resumes_only_partitions_not_read_to_their_end():
    range_source, _source, events, _done = ranged([[rec(0, 0)]], {P0: 0, P1: 0}, {P0: 1, P1: 5})
    range_source.consume(10, 1.0)
    range_source.resume()
    range_source.resume([P0])
    assert [e for e in events if e[0].startswith("resume")] == [("resume_partitions", (P1,))]


# -- the whole loop -----------------------------------------------------------------------------------------


@pytest.fixture
def backfill():
    def build(script, starts, last, size=4, commit_ok=True, **fake):
        clock = FakeClock()
        events: list = []
        settings = Settings(
            input={"topics": [IN]},
            output={"topic": OUT},
            dlq={"topic": DLQ},
            log={"stats_interval_s": 3600},
        )
        settings = settings.model_copy(update={"batch": offline_batch(settings.batch, size)})
        source = AssignedSource(script, clock, events, **fake)
        source.commit_ok = commit_ok
        sink = FakeSink(events)
        engine = FakeEngine()
        info = ModelInfo(
            name="m",
            model_dir=Path("."),
            input_names=("features",),
            output_names=("score",),
            settings={"features": ["a", "b"]},
        )
        telemetry = Telemetry(Metrics(), Health(60, 60, clock), 3600, clock)
        holder: list = []

        def stop() -> None:
            holder[0].stop()

        range_source = RangeSource(source, Ranges(starts, last), stop)
        pipeline = build_pipeline(
            settings,
            range_source,
            sink,
            Model.of(engine, FeaturesProcessor(info), ModelRef("m", "1", "CPUExecutionProvider")),
            telemetry,
            clock=clock,
            executor=Inline(),
        )
        holder.append(pipeline)
        # A loop that did not stop would run on into the fake's bound of 10,000 consume calls.
        source.on_exhausted = lambda: None
        pipeline.run()
        return pipeline, source, sink, engine, events

    return build


def test_a_range_is_scored_in_full_batches_committed_to_its_end_and_then_the_loop_stops(backfill):
    script = [
        [rec(0, o) for o in range(10, 19)] + [rec(1, o) for o in range(0, 7)],
        [rec(0, 19), rec(0, 20), rec(0, 21)],  # 20 and 21 are past P0's end
    ]
    pipeline, _source, sink, engine, events = backfill(script, {P0: 10, P1: 0}, {P0: 20, P1: 7}, size=4)
    answered = sorted(
        (v["source"]["partition"], v["source"]["offset"])
        for v in (msgspec.json.decode(o.value) for o in sink.outputs(OUT))
    )
    assert answered == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(7)]
    # Full batches while the range was read; the rest cut when the loop finished.
    assert engine.batch_sizes()[:4] == [4, 4, 4, 4]
    assert sum(engine.batch_sizes()) == 17
    stored: dict[TopicPartition, int] = {}
    for entry in events:
        if entry[0] == "store":
            stored |= entry[1]
    assert stored == {P0: 20, P1: 7}
    assert ("commit",) in events and events[-1] == ("close",)
    assert pipeline.in_flight == 0


def test_a_final_commit_the_broker_refused_is_told(backfill):
    script = [[rec(0, o) for o in range(3)]]
    pipeline, *_rest = backfill(script, {P0: 0}, {P0: 3}, commit_ok=False)
    assert pipeline.committed is False
    pipeline, *_rest = backfill(script, {P0: 0}, {P0: 3})
    assert pipeline.committed is True
