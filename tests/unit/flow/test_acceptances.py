"""The share group's acknowledgement path with fakes and a fake clock: a record is ACCEPTed once every
output it owes (results, or its dead letter) is acknowledged, and not before."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from service.flow.acceptances import LOCK_WARNING, Acceptances
from service.flow.ports import ShareSourceLike
from service.flow.records import Ack, InputRecord, OutRecord
from tests.support.fakes import FakeClock, FakeShareSource, FakeSink

IN = "in"
LOCK_S = 30.0
MEMBERS = 2


class Told:
    def __init__(self) -> None:
        self.acked = 0
        self.commits: list[bool] = []
        self.delivery_counts: list[int | None] = []
        self.answered_count: dict[Ack, int] = {}

    def acknowledged(self, count: int) -> None:
        self.acked += count

    def committed(self, ok: bool, seconds: float) -> None:
        self.commits.append(ok)

    def acquired(self, delivery_counts) -> None:
        self.delivery_counts += list(delivery_counts)

    def answered(self, ack: Ack, count: int) -> None:
        self.answered_count[ack] = self.answered_count.get(ack, 0) + count


def rec(offset: int, partition: int = 0, received: float = 1000.0) -> InputRecord:
    return InputRecord(IN, partition, offset, None, b"{}", None, None, received, delivery_count=1)


def out(record: InputRecord, topic: str = "out") -> OutRecord:
    return OutRecord(topic, None, b"r", None, record)


@pytest.fixture
def parts():
    clock = FakeClock()
    events: list = []
    source = FakeShareSource([], clock, events)
    sink = FakeSink(events)
    told = Told()
    acks = Acceptances(source, sink, "dlq", 30.0, MEMBERS, LOCK_S, told, clock)  # type: ignore[arg-type]
    return acks, source, sink, clock, told


def test_the_fake_is_a_share_source():
    assert isinstance(FakeShareSource([], FakeClock(), []), ShareSourceLike)


def test_a_record_is_accepted_once_its_output_is_acknowledged_and_not_before(parts):
    acks, source, sink, _clock, told = parts
    sink.poll_acks = False
    acks.track([rec(0), rec(1, partition=1)])
    sink.send_all([out(rec(0)), out(rec(1, partition=1))])
    acks.poll()
    assert source.answered[Ack.ACCEPT] == []
    assert acks.in_flight() == 2
    sink.poll_acks = True
    acks.poll()
    assert sorted(source.answered[Ack.ACCEPT]) == [(IN, 0, 0), (IN, 1, 1)]
    assert acks.in_flight() == 0 and told.acked == 2
    assert told.delivery_counts == [1, 1] and told.answered_count == {Ack.ACCEPT: 2}


def test_any_order_across_partitions_and_offsets(parts):
    """No watermark: a record is done on its own, whatever is still waiting below it."""
    acks, source, sink, _clock, _told = parts
    acks.track([rec(0), rec(1), rec(2)])
    sink.withheld = {(IN, 0, 0)}
    sink.send_all([out(rec(0)), out(rec(1)), out(rec(2))])
    acks.poll()
    assert source.answered[Ack.ACCEPT] == [(IN, 0, 1), (IN, 0, 2)]


def test_a_record_that_fans_out_is_accepted_with_its_last_output(parts):
    acks, source, sink, _clock, _told = parts
    fans, empty = rec(0), rec(1)
    acks.track([fans, empty])
    acks.expect([(fans, 3), (empty, 0)])  # an empty request is done at once
    assert source.answered[Ack.ACCEPT] == [(IN, 0, 1)]
    assert acks.in_flight() == 3
    sink.send_all([out(fans), out(fans)])
    acks.poll()
    assert source.answered[Ack.ACCEPT] == [(IN, 0, 1)]
    assert acks.in_flight() == 1
    sink.send_all([out(fans)])
    acks.poll()
    assert source.answered[Ack.ACCEPT] == [(IN, 0, 1), (IN, 0, 0)]
    assert acks.in_flight() == 0


def test_a_dead_letter_answers_its_record(parts):
    acks, source, sink, _clock, _told = parts
    acks.track([rec(4)])
    sink.send(out(rec(4), topic="dlq"))
    acks.poll()
    assert source.answered[Ack.ACCEPT] == [(IN, 0, 4)]


def test_a_settled_output_counts_as_done(parts):
    acks, source, _sink, _clock, _told = parts
    acks.track([rec(0)])
    acks.settle([rec(0)])
    assert source.answered[Ack.ACCEPT] == [(IN, 0, 0)]


def test_commit_flushes_accepts_and_sends_the_acknowledgements(parts):
    acks, source, sink, _clock, told = parts
    sink.poll_acks = False
    acks.track([rec(0)])
    sink.send_all([out(rec(0))])
    assert acks.commit()
    assert [e[0] for e in source.events] == ["send", "flush", "ack", "accept", "commit"]
    assert told.commits == [True]


def test_an_acknowledgement_of_a_record_no_longer_waiting_is_stale(parts):
    acks, source, sink, _clock, _told = parts
    acks.track([rec(0)])
    sink.send_all([out(rec(0)), out(rec(0))])  # answered twice (delivered again meanwhile)
    acks.poll()
    assert source.answered[Ack.ACCEPT] == [(IN, 0, 0)]
    assert acks.stale_acks == 1


def test_a_record_held_near_the_end_of_its_lock_is_warned_about(parts):
    acks, _source, sink, clock, _told = parts
    sink.poll_acks = False
    acks.track([rec(0, received=clock.now)])
    with capture_logs() as logs:
        clock.advance(LOCK_WARNING * LOCK_S - 1)
        acks.poll()
        assert not [line for line in logs if line["event"] == "share_lock_expiring"]
        clock.advance(1)
        acks.poll()
    (warning,) = [line for line in logs if line["event"] == "share_lock_expiring"]
    assert warning["unanswered"] == 1 and warning["lock_s"] == LOCK_S


def test_owned_reports_the_members(parts):
    acks, *_ = parts
    assert acks.owned() == MEMBERS
