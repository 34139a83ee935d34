"""The loop with row assembly (``collectd-json`` points -> rows per host and interval), wired as
``service.startup.build_pipeline`` wires it, driven by the fakes, the real assembler and features processor,
and
a fake clock: the delivery contract of rows."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from service.config import Settings
from service.flow.inflight import Inline
from service.flow.model import Model, ModelRef, RowPlan
from service.flow.records import InputRecord
from service.observability import Health, Metrics, Telemetry
from service.processors.base import ModelInfo
from service.processors.features import FeaturesProcessor
from service.startup import build_pipeline
from tests.support.fakes import At, FakeEngine, FakeSink, FakeSource, Revoke

IN, OUT, DLQ = "in", "out", "dlq"
CPU, MEM = "system.cpu.utilization.user", "system.memory.utilization"
MODEL = ModelRef("fake-host-model", "1", "CPUExecutionProvider")
T0 = 1_796_000_000.0


def collectd(
    plugin: str, type_: str, instance: str, value: float, *, host: str = "web-1", time: float = T0
) -> bytes:
    """One value list as collectd's write_kafka writes it (Format JSON): an array of one."""
    return msgspec.json.encode(
        [
            {
                "values": [value],
                "dstypes": ["gauge"],
                "dsnames": ["value"],
                "time": time,
                "interval": 10.0,
                "host": host,
                "plugin": plugin,
                "plugin_instance": "",
                "type": type_,
                "type_instance": instance,
            }
        ]
    )


def cpu(percent: float, **kw) -> bytes:
    return collectd("cpu", "percent", "user", percent, **kw)


def mem(percent: float, **kw) -> bytes:
    return collectd("memory", "percent", "used", percent, **kw)


def other(**kw) -> bytes:
    return collectd("entropy", "entropy", "", 3000.0, **kw)


def rec(offset: int, value: bytes, partition: int = 0) -> InputRecord:
    return InputRecord(IN, partition, offset, b"4f2a91c0", value, None, None, 0.0)


@pytest.fixture
def rig(clock):
    def build(script, *, max_wait_s=15.0, fill="typical", engine=None, **sink_policy):
        events: list = []
        settings = Settings(
            input={"topics": [IN], "format": "collectd-json"},
            output={"topic": OUT},
            dlq={"topic": DLQ},
            batch={"min_size": 1, "max_size": 4, "max_wait_ms": 100.0, "adaptive": False},
            assemble={"interval_s": 10.0, "max_wait_s": max_wait_s, "grace_ms": 200.0, "fill": fill},
            log={"stats_interval_s": 3600},
        )
        source = FakeSource(script, clock, events)
        sink = FakeSink(events, **sink_policy)
        info = ModelInfo(MODEL.name, Path("."), ("features",), ("score",), settings={"features": [CPU, MEM]})
        telemetry = Telemetry(Metrics(), Health(60, 60, clock), 3600, clock)
        pipeline = build_pipeline(
            settings,
            source,
            sink,
            Model.of(
                engine or FakeEngine(),
                FeaturesProcessor(info),
                MODEL,
                RowPlan((CPU, MEM), (CPU,), {MEM: 0.5}),
            ),
            telemetry,
            clock=clock,
            wall_ms=lambda: round(clock.now * 1000),
            executor=Inline(),
        )
        source.on_exhausted = pipeline.stop
        pipeline.telemetry, pipeline.sink, pipeline.source, pipeline.events = telemetry, sink, source, events
        return pipeline

    return build


def results(sink: FakeSink) -> list[dict]:
    return [msgspec.json.decode(o.value) for o in sink.outputs(OUT)]


def stored(events: list) -> dict:
    found: dict = {}
    for entry in events:
        if entry[0] == "store":
            found |= entry[1]
    return found


def counted(metric) -> dict[str, float]:
    return {
        s.labels["outcome"]: s.value for m in metric.collect() for s in m.samples if s.name.endswith("_total")
    }


def test_one_result_per_row_answering_every_message_that_fed_it(rig, clock):
    script = [
        [rec(0, cpu(25.0)), rec(1, other()), rec(2, mem(40.0))],
        At(clock.now + 1.0, [rec(3, cpu(50.0, time=T0 + 10))]),
    ]
    pipeline = rig(script, max_wait_s=5.0)
    pipeline.run()
    (first,) = results(pipeline.sink)
    assert first["row"] == {
        "key": "web-1",
        "time_ms": int(T0 * 1000),
        "interval_s": 10.0,
        "features": {CPU: 0.25, MEM: 0.4},
        "filled": [],
        "inputs": {"count": 2, "offsets": {"in[0]": [0, 2]}},
    }
    assert first["source"] == {"topic": IN, "partition": 0, "offset": 0}
    assert first["result"]["score"] == pytest.approx(2 * 0.25 + 0.4)
    assert [o.key for o in pipeline.sink.outputs(OUT)] == [b"web-1"]
    assert pipeline.sink.outputs(DLQ) == []
    # The next interval's row was still open at the stop: not answered early, its message not committed
    # (whoever reads the partition next assembles it whole).
    assert stored(pipeline.events) == {(IN, 0): 3}
    assert counted(pipeline.telemetry.metrics.points) == {"used": 3.0, "ignored": 1.0}
    assert counted(pipeline.telemetry.metrics.rows) == {"complete": 1.0}


def test_a_row_with_an_optional_feature_missing_is_scored_filled_at_max_wait(rig, clock):
    pipeline = rig([[rec(0, cpu(50.0))], At(clock.now + 6.0, [])], max_wait_s=5.0)
    pipeline.run()
    (result,) = results(pipeline.sink)
    assert result["row"]["filled"] == [MEM] and result["row"]["features"][MEM] == 0.5
    assert counted(pipeline.telemetry.metrics.rows) == {"filled": 1.0}
    assert stored(pipeline.events) == {(IN, 0): 1}


def test_a_revoke_hands_open_rows_over_unanswered_and_commits_only_before_them(rig, clock):
    script = [
        [rec(0, cpu(20.0)), rec(1, mem(30.0)), rec(2, cpu(10.0, host="web-2"))],  # web-1 complete
        At(clock.now + 1.0, []),
        Revoke([(IN, 0)]),
        At(clock.now + 30.0, []),  # long past max_wait: web-2's row is gone, not closed late
    ]
    pipeline = rig(script)
    pipeline.run()
    assert [r["row"]["key"] for r in results(pipeline.sink)] == ["web-1"]
    assert ("commit",) in pipeline.events and stored(pipeline.events) == {(IN, 0): 2}
    assert counted(pipeline.telemetry.metrics.rows) == {"complete": 1.0}


def test_an_offset_is_stored_only_once_every_row_it_fed_is_acknowledged(rig, clock):
    # Offset 0 feeds the row of web-1, offset 1 the rows of web-1 and web-2 (two value lists in one message),
    # offset 2 only another plugin: done at once, but stored only behind the others.
    both = msgspec.json.encode(
        [*msgspec.json.decode(mem(10.0)), *msgspec.json.decode(cpu(5.0, host="web-2"))]
    )
    script = [[rec(0, cpu(20.0)), rec(1, both), rec(2, other())], At(clock.now + 16.0, [])]
    pipeline = rig(script, withheld={(IN, 0, 0)}, flush_releases_withheld=False)  # web-1's result held
    pipeline.run()
    assert len(pipeline.sink.outputs(OUT)) == 2
    assert stored(pipeline.events) == {}  # web-2's result alone answers nothing whole
    pipeline.sink.release()
    pipeline._acks.acknowledge(pipeline.sink.poll(0))
    assert stored(pipeline.events) == {(IN, 0): 3}


def test_a_message_that_feeds_nothing_is_done_at_once(rig, clock):
    pipeline = rig([[rec(0, other()), rec(1, other())]])
    pipeline.run()
    assert pipeline.sink.sent == []
    assert stored(pipeline.events) == {(IN, 0): 2}


def test_a_row_short_of_a_required_feature_settles_its_messages_counted_not_answered(rig, clock):
    pipeline = rig([[rec(0, mem(40.0)), rec(1, mem(41.0, host="web-2"))], At(clock.now + 20.0, [])])
    pipeline.run()
    assert pipeline.sink.sent == []
    assert stored(pipeline.events) == {(IN, 0): 2}
    assert counted(pipeline.telemetry.metrics.rows) == {"incomplete": 2.0}


def test_a_row_whose_inference_fails_is_a_dead_letter_per_message(rig, clock):
    pipeline = rig(
        [[rec(0, cpu(50.0)), rec(1, mem(40.0))], At(clock.now + 1.0, [])], engine=FakeEngine(poison={0.5})
    )
    pipeline.run()
    dead = pipeline.sink.outputs(DLQ)
    assert [d.source.offset for d in dead] == [0, 1]
    assert [dict(d.headers)["error.reason"] for d in dead] == [b"inference_error", b"inference_error"]
    assert [d.value for d in dead] == [cpu(50.0), mem(40.0)]  # each message's own bytes
    assert stored(pipeline.events) == {(IN, 0): 2}


def test_a_row_result_the_broker_refuses_is_replaced_by_a_dead_letter_that_answers_every_message(rig, clock):
    pipeline = rig([[rec(0, cpu(30.0)), rec(1, mem(40.0))], At(clock.now + 1.0, [])])
    sink = pipeline.sink
    send = sink.send

    def refuse_results(out):
        if out.topic == OUT:
            sink.refused.append((out, "Broker: Message size too large"))
            sink.sent.append(out)
            return
        send(out)

    sink.send = refuse_results
    pipeline.run()
    (dead,) = sink.outputs(DLQ)
    assert dict(dead.headers)["error.reason"] == b"output_rejected"
    assert [r.offset for r in (dead.source, *dead.also)] == [0, 1]
    assert stored(pipeline.events) == {(IN, 0): 2}
