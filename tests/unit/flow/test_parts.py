"""The loop's smaller parts on their own, with the fakes of tests/support/fakes.py and a fake clock:
service/flow/backlog.py, backpressure.py and checkpoint.py (the loop drives them in test_pipeline.py)."""

from __future__ import annotations

from service.flow.backlog import Backlog
from service.flow.backpressure import BackPressure
from service.flow.checkpoint import Checkpoint
from service.flow.encode import result_record
from service.flow.model import ModelRef
from service.flow.records import InputRecord
from service.observability import Health, Metrics, Telemetry
from tests.support.fakes import FakeSink, FakeSource

P0, P1 = ("in", 0), ("in", 1)


def record(offset: int, partition: int = 0) -> InputRecord:
    return InputRecord("in", partition, offset, None, b"{}", None, None, 0.0)


class CountingSource(FakeSource):
    def __init__(self, clock, events) -> None:
        super().__init__([], clock, events)
        self.lag_reads = 0

    def lag(self):
        self.lag_reads += 1
        return {P0: 3, P1: 4}


def test_the_backlog_rereads_the_lag_only_once_its_copy_is_old(clock):
    source = CountingSource(clock, [])
    backlog = Backlog(source, clock, refresh_s=0.1)
    assert backlog.total() == 7
    clock.advance(0.05)
    assert backlog.per_partition() == {P0: 3, P1: 4}
    assert source.lag_reads == 1
    clock.advance(0.06)  # now 0.11 s old
    backlog.total()
    assert source.lag_reads == 2


def test_the_backlog_is_reread_after_a_millisecond_per_partition(clock):
    source = CountingSource(clock, [])  # two partitions: at least 2 ms
    backlog = Backlog(source, clock)
    backlog.total()
    clock.advance(0.0015)
    backlog.total()
    assert source.lag_reads == 1
    clock.advance(0.001)
    backlog.total()
    assert source.lag_reads == 2


def test_back_pressure_pauses_at_the_limit_resumes_at_half_and_only_then_resumes_new_partitions(clock):
    events: list = []
    pressure = BackPressure(FakeSource([], clock, events), limit=10)
    pressure.apply(9)
    pressure.assigned([P0])
    pressure.apply(10)
    pressure.apply(6)  # still above half: stays paused, re-applied for partitions assigned meanwhile
    pressure.assigned([P1])  # paused: not resumed by name
    pressure.apply(5)
    assert events == [("resume_partitions", (P0,)), ("pause",), ("pause",), ("resume",)]
    assert not pressure.paused


def make_checkpoint(clock, events, **sink_policy) -> tuple[Checkpoint, FakeSource, FakeSink, Telemetry]:
    source, sink = FakeSource([], clock, events), FakeSink(events, **sink_policy)
    telemetry = Telemetry(Metrics(), Health(60, 30, clock), 3600, clock)
    return Checkpoint(source, sink, "dead", 30.0, telemetry, clock), source, sink, telemetry


def send_results(sink: FakeSink, records: list[InputRecord]) -> None:
    model = ModelRef("m", "1", "CPUExecutionProvider")
    for r in records:
        sink.send(result_record(r, "out", model, {}, 1, 0, 0))


def test_a_watermark_is_stored_only_over_acknowledged_offsets_and_the_commit_flushes_first(clock):
    events: list = []
    checkpoint, source, sink, _ = make_checkpoint(clock, events, withheld={("in", 0, 2)}, flush_acks=True)
    consumed = [record(o) for o in range(4)]
    checkpoint.track(consumed)
    send_results(sink, consumed)
    checkpoint.acknowledge(sink.poll(0))  # 0, 1, 3 acknowledged; 2 withheld
    assert source.stored == [{P0: 2}]
    assert checkpoint.in_flight() == 1
    events.clear()
    checkpoint.commit()
    assert [e[0] for e in events if e[0] != "ack"] == ["flush", "store", "commit"]
    assert source.stored[-1] == {P0: 4}


def test_a_rewound_partition_starts_its_bookkeeping_afresh(clock):
    checkpoint, _source, _sink, _ = make_checkpoint(clock, [])
    checkpoint.track([record(10), record(11)])
    checkpoint.track([record(5)])  # an offset reset: not an error
    assert checkpoint.in_flight() == 1


def test_acknowledgements_of_a_lost_partition_store_nothing(clock):
    events: list = []
    checkpoint, source, sink, _ = make_checkpoint(clock, events, poll_acks=False)
    checkpoint.assign([P0, P1])
    consumed = [record(0, 0), record(0, 1)]
    checkpoint.track(consumed)
    send_results(sink, consumed)
    checkpoint.lose([P1])  # flushes: both acknowledged, but P1 is no longer ours
    assert source.stored == [{P0: 1}]
    assert checkpoint.assigned == {P0}
    assert checkpoint.stale_acks == 1


def test_a_failed_commit_is_counted(clock):
    checkpoint, source, _sink, telemetry = make_checkpoint(clock, [])
    source.commit_ok = False
    checkpoint.commit()
    assert telemetry.metrics.registry.get_sample_value("microbatch_commit_failures_total") == 1
