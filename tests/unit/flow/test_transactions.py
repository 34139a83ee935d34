"""The exactly-once acknowledgement path with fakes and a fake clock: what goes into a transaction, when
it is committed, and what an abort rewinds."""

from __future__ import annotations

import pytest

from service.errors import TransactionAborted
from service.flow.records import InputRecord, OutRecord
from service.flow.transactions import Transactions
from tests.support.fakes import FakeClock, FakeSource, FakeTransactionalSink

IN = "in"
P0, P1 = (IN, 0), (IN, 1)


class Told:
    """The telemetry calls the strategy makes."""

    def __init__(self) -> None:
        self.transactions: list[tuple[bool, bool]] = []
        self.acked = 0

    def acknowledged(self, count: int) -> None:
        self.acked += count

    def transaction(self, committed: bool, seconds: float, fenced: bool = False) -> None:
        self.transactions.append((committed, fenced))


START = FakeClock().now  # records are consumed when the fixture's clock starts


def rec(offset: int, partition: int = 0) -> InputRecord:
    return InputRecord(IN, partition, offset, None, b"{}", None, None, START)


def out(record: InputRecord) -> OutRecord:
    return OutRecord("out", None, b"r", None, record)


@pytest.fixture
def parts():
    clock = FakeClock()
    events: list = []
    source = FakeSource([], clock, events)
    sink = FakeTransactionalSink(events, clock)
    told = Told()
    txns = Transactions(source, sink, 0.1, 5, 30.0, told, clock)  # type: ignore[arg-type]
    txns.assign([P0, P1])
    return txns, sink, clock, events, told


def consume(txns: Transactions, sink: FakeTransactionalSink, *records: InputRecord) -> None:
    txns.track(list(records))
    sink.send_all([out(r) for r in records])


def test_a_transaction_commits_with_the_offsets_its_delivered_outputs_complete(parts):
    txns, sink, clock, _events, told = parts
    consume(txns, sink, rec(0), rec(1), rec(5, partition=1))
    clock.advance(0.1)
    txns.poll()
    assert sink.committed == [{P0: 2, P1: 6}]
    consume(txns, sink, rec(2))
    clock.advance(0.1)
    txns.poll()
    assert sink.committed == [{P0: 2, P1: 6}, {P0: 3}]
    assert told.transactions == [(True, False), (True, False)]


def test_an_output_not_acknowledged_after_the_flush_aborts_rather_than_commits(parts):
    """Committed, the output would be visible while its input's offset, which only its acknowledgement
    moves, stayed behind: a restart would answer that input again."""
    txns, sink, clock, events, told = parts
    txns.track([rec(0), rec(1), rec(2)])
    sink.withheld = {(IN, 0, 2)}
    sink.flush_releases_withheld = False  # the flush timed out with 2 still in flight
    sink.send_all([out(rec(0)), out(rec(1)), out(rec(2))])
    clock.advance(0.1)
    with pytest.raises(TransactionAborted, match="not acknowledged"):
        txns.poll()
    assert sink.committed == []
    assert events[-1] == ("rewind", {P0: 0})
    assert told.transactions == [(False, False)]


def test_a_transaction_is_committed_when_it_is_due_and_not_before(parts):
    txns, sink, clock, _events, _told = parts
    consume(txns, sink, rec(0))
    clock.advance(0.09)
    txns.poll()
    assert sink.committed == []
    clock.advance(0.01)
    txns.poll()
    assert sink.committed == [{P0: 1}]


def test_a_transaction_is_committed_sooner_at_its_size_bound(parts):
    txns, sink, _clock, _events, _told = parts
    consume(txns, sink, *[rec(o) for o in range(4)])
    txns.poll()
    assert sink.committed == []
    consume(txns, sink, rec(4))
    txns.poll()
    assert sink.committed == [{P0: 5}]


def test_an_offset_stops_at_a_message_whose_assembled_row_is_still_open(parts):
    txns, sink, clock, _events, _told = parts
    txns.track([rec(0), rec(1), rec(2)])
    txns.expect([(rec(1), 2)])  # 1 fed two rows; one of them is still open
    sink.send_all([out(rec(0)), out(rec(1)), out(rec(2))])
    clock.advance(0.1)
    txns.poll()
    assert sink.committed == [{P0: 1}]
    txns.settle([rec(1)])  # its other row closed incomplete
    assert txns.commit()
    assert sink.committed[-1] == {P0: 3}


def test_an_abort_rewinds_every_partition_to_its_last_commit_and_forgets_what_was_tracked(parts):
    txns, sink, clock, events, told = parts
    consume(txns, sink, rec(0), rec(1), rec(7, partition=1))
    clock.advance(0.1)
    txns.poll()
    consume(txns, sink, rec(2), rec(3), rec(8, partition=1))
    sink.fail_with = "delivery to out failed"
    with pytest.raises(TransactionAborted) as aborted:
        txns.poll()
    assert aborted.value.partitions == {P0, P1}
    assert events[-1] == ("rewind", {P0: 2, P1: 8})
    assert txns.in_flight() == 0
    assert told.transactions[-1] == (False, False)
    consume(txns, sink, rec(2), rec(3), rec(8, partition=1))  # read again
    assert txns.commit()
    assert sink.committed[-1] == {P0: 4, P1: 9}


def test_a_partition_never_committed_is_rewound_to_where_it_was_first_read(parts):
    txns, sink, _clock, events, _told = parts
    consume(txns, sink, rec(40), rec(41))
    sink.abort_commits = 1
    with pytest.raises(TransactionAborted):
        txns.commit()
    assert events[-1] == ("rewind", {P0: 40})


def test_losing_partitions_aborts_the_open_transaction_and_rewinds_the_others(parts):
    txns, sink, _clock, events, told = parts
    consume(txns, sink, rec(0), rec(5, partition=1))
    with pytest.raises(TransactionAborted) as aborted:
        txns.lose([P1])
    assert ("txn_abort",) in events
    assert events[-1] == ("rewind", {P0: 0})
    assert aborted.value.partitions == {P0}
    assert told.transactions == [(False, True)]


def test_losing_partitions_with_nothing_sent_since_the_last_commit_aborts_nothing(parts):
    txns, sink, _clock, events, _told = parts
    consume(txns, sink, rec(0))
    assert txns.commit()
    txns.lose([P1])
    assert ("txn_abort",) not in events
    assert txns.owned() == 1


def test_a_revoked_partitions_offsets_never_go_in_a_later_transaction(parts):
    txns, sink, _clock, _events, _told = parts
    consume(txns, sink, rec(0), rec(3, partition=1))
    txns.poll()
    txns.revoke([P1])
    consume(txns, sink, rec(1))
    assert txns.commit()
    assert sink.committed == [{P0: 2}]


def test_an_input_that_waited_long_before_its_output_opens_no_transaction_due_at_once(parts):
    """An assembled row's first message may have waited its whole window: its transaction still gathers
    for half an interval."""
    txns, sink, clock, _events, _told = parts
    old = InputRecord(IN, 0, 0, None, b"{}", None, None, clock() - 30.0)
    txns.track([old])
    sink.send_all([out(old)])
    txns.poll()
    assert sink.committed == []
    clock.advance(0.06)
    txns.poll()
    assert sink.committed == [{P0: 1}]
