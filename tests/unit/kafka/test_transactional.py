"""service/kafka/transactional.py with a fake producer: a transaction commits only once every output in it
was acknowledged (otherwise it aborts: committed, its outputs would be visible while their inputs'
offsets stayed behind), and each call to the coordinator is guarded against a stall."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from service.config import KafkaSettings
from service.errors import StalledError, TransactionAborted, TransactionStateError
from service.flow.records import InputRecord, OutRecord, TopicPartition
from service.kafka.stall import GRACE_S, Stall
from service.kafka.transactional import TransactionalSink

TIMEOUT_S = 30.0


class Report:
    def __init__(self, produced: tuple) -> None:
        self._topic, self._value, self._key = produced[:3]

    def topic(self) -> str:
        return self._topic

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value


class Producer:
    """Queues what is produced; the test delivers it. Records the transactional calls; ``during`` runs
    inside ``commit_transaction`` (a call that blocks)."""

    def __init__(self) -> None:
        self.queued: list[tuple] = []
        self.calls: list[str] = []
        self.during = lambda: None

    def produce(self, topic, value, key, partition, callback, on_delivery, timestamp, headers) -> None:
        self.queued.append((topic, value, key, callback))

    def deliver(self) -> None:
        queued, self.queued = self.queued, []
        for produced in queued:
            produced[3](None, Report(produced))

    def poll(self, timeout_s: float) -> int:
        return 0

    def __len__(self) -> int:
        return len(self.queued)

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send_offsets_to_transaction(self, offsets, group, timeout_s) -> None:
        self.calls.append(f"offsets {[(tp.partition, tp.offset) for tp in offsets]}")

    def commit_transaction(self, timeout_s: float) -> None:
        self.calls.append("commit")
        self.during()

    def abort_transaction(self, timeout_s: float) -> None:
        self.calls.append("abort")
        self.queued = []  # purged


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def offsets_of(offsets: dict[TopicPartition, int]):
    return [KafkaTopicPartition(t, p, o) for (t, p), o in offsets.items()], object()


def out(offset: int) -> OutRecord:
    source = InputRecord("in", 0, offset, None, b"{}", None, None, 0.0)
    return OutRecord("out", None, b"r", None, source)


@pytest.fixture
def parts():
    producer, clock, exits = Producer(), Clock(), []
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:9", group_id="g", instance_id="i")
    stall = Stall(exits.append, clock, watch=False)
    sink = TransactionalSink(settings, offsets_of, "dlq", TIMEOUT_S, stall=stall)
    sink._producer = producer  # type: ignore[assignment]
    return sink, producer, clock, exits, stall


def test_a_transaction_whose_outputs_are_all_acknowledged_commits_with_the_offsets(parts):
    sink, producer, *_ = parts
    sink.send_all([out(0), out(1)])
    producer.deliver()
    assert [r.offset for r in sink.poll()] == [0, 1]
    sink.commit({("in", 0): 2})
    assert producer.calls == ["begin", "offsets [(0, 2)]", "commit"]
    assert sink.opened() is None


def test_outputs_not_acknowledged_at_commit_abort_the_transaction(parts):
    """The flush before the commit timed out (a leader gone): committing would make outputs visible whose
    inputs' offsets only their acknowledgements would have moved."""
    sink, producer, *_ = parts
    sink.send_all([out(0)])
    producer.deliver()
    sink.poll()
    sink.send_all([out(1)])  # never acknowledged
    with pytest.raises(TransactionAborted, match=r"not acknowledged within 30s \(1 batches\)"):
        sink.commit({("in", 0): 1})
    assert producer.calls == ["begin", "abort"]
    # The next transaction starts clean.
    sink.send_all([out(1)])
    producer.deliver()
    sink.poll()
    sink.commit({("in", 0): 2})
    assert producer.calls[2:] == ["begin", "offsets [(0, 2)]", "commit"]


def test_a_commit_that_blocks_past_its_timeout_ends_the_process(parts):
    sink, producer, clock, exits, stall = parts

    def blocked() -> None:
        clock.now += TIMEOUT_S + GRACE_S
        stall.check()  # what the watcher thread does meanwhile

    producer.during = blocked
    sink.send_all([out(0)])
    producer.deliver()
    sink.poll()
    sink.commit({("in", 0): 1})
    assert exits == [StalledError.exit_code]


def test_a_failed_delivery_is_the_reason_given(parts):
    sink, producer, *_ = parts
    sink.send_all([out(0)])
    topic, value, key, callback = producer.queued.pop()
    callback(KafkaError(KafkaError._MSG_TIMED_OUT), Report((topic, value, key)))
    with pytest.raises(TransactionAborted, match="delivery to out failed"):
        sink.commit({})


def test_an_abort_the_coordinator_refuses_asks_for_a_restart(parts):
    """Seen when an abort met a coordinator that had just moved: fatal INVALID_TXN_STATE. Only a restart
    under the same transactional id ends the transaction, so the exit code is the one that asks for it."""
    sink, producer, *_ = parts

    def refused(timeout_s: float) -> None:
        raise KafkaException(
            KafkaError(KafkaError.INVALID_TXN_STATE, "Failed to end transaction", fatal=True)
        )

    producer.abort_transaction = refused  # type: ignore[method-assign]
    sink.send_all([out(0)])  # never acknowledged: the commit aborts instead
    with pytest.raises(TransactionStateError) as raised:
        sink.commit({("in", 0): 1})
    assert raised.value.exit_code == 6
    assert "restart under transactional id 'g.i'" in str(raised.value)
