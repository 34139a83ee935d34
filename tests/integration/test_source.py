"""service/kafka/source.py on the real broker: the lag it reads per assigned partition follows the
assignment through cooperative rebalances (it keeps the assignment from the rebalance callbacks rather
than asking the client, whose answer waits for librdkafka's main thread)."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, Producer

from service.config import KafkaSettings
from service.flow.records import TopicPartition
from service.kafka.source import Source

PARTITIONS = 4
DEADLINE_S = 60


class Listener:
    """The rebalance listener the loop would be: it only records what it was told."""

    def __init__(self) -> None:
        self.assigned: set[TopicPartition] = set()

    def on_assigned(self, tps: list[TopicPartition]) -> None:
        self.assigned |= set(tps)

    def on_revoked(self, tps: list[TopicPartition]) -> None:
        self.assigned -= set(tps)

    def on_lost(self, tps: list[TopicPartition]) -> None:
        self.assigned -= set(tps)


def _until(step: Callable[[], None], done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        step()


def test_the_lag_covers_exactly_the_partitions_assigned_through_rebalances(
    kafka_bootstrap: str, topic_factory: Callable[..., str], group_id: str
) -> None:
    topic = topic_factory(partitions=PARTITIONS, prefix="source-lag")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for partition in range(PARTITIONS):
        for i in range(5):
            producer.produce(topic, value=b"x", partition=partition, key=str(i).encode())
    assert producer.flush(30) == 0

    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, group_id=group_id)
    source, listener = Source(settings), Listener()
    source.subscribe([topic], listener)
    consumed = 0

    def consume() -> None:
        nonlocal consumed
        consumed += len(source.consume(100, 0.2))

    everything = {(topic, p) for p in range(PARTITIONS)}
    try:
        _until(consume, lambda: consumed == 5 * PARTITIONS, "the first 20 messages")
        assert source.lag() == dict.fromkeys(everything, 0)

        # A second member joins (the same cooperative protocol): some partitions move to it, and the
        # lag stops covering them.
        other = Consumer({**settings.consumer_config(), "auto.offset.reset": "earliest"})
        other.subscribe([topic])
        _until(lambda: (consume(), other.poll(0.2)), lambda: len(listener.assigned) < PARTITIONS, "a share")
        _until(lambda: (consume(), other.poll(0.2)), lambda: len(other.assignment()) > 0, "its share")
        ours = listener.assigned
        assert ours and ours.isdisjoint({(p.topic, p.partition) for p in other.assignment()})
        assert set(source.lag()) == ours

        # It leaves: every partition comes back to the lag.
        other.close()
        _until(consume, lambda: listener.assigned == everything, "the partitions back")
        assert set(source.lag()) == everything
    finally:
        source.close()
