"""Smoke tests of the local broker: idempotent produce, then consume back in a fresh group; what kafka.sh
configures it with."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.support.broker import external_bootstrap

N_MESSAGES = 100
N_KEYS = 10
PARTITIONS = 3


def test_produce_consume_roundtrip(
    kafka_bootstrap: str, topic_factory: Callable[..., str], group_id: str
) -> None:
    topic = topic_factory(partitions=PARTITIONS, prefix="smoke")

    producer = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    delivered: list[tuple[int, int, bytes, bytes]] = []
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    for i in range(N_MESSAGES):
        producer.produce(topic, key=f"key-{i % N_KEYS}", value=f"{i}", on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0, "messages still in the producer queue after flush"
    assert errors == []
    assert len(delivered) == N_MESSAGES

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumed: list[tuple[int, int, bytes, bytes]] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(consumed) < N_MESSAGES and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=N_MESSAGES, timeout=0.5):
                assert msg.error() is None, msg.error()
                consumed.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()

    # Count and keys.
    assert len(consumed) == N_MESSAGES
    assert {k for _, _, k, _ in consumed} == {f"key-{i}".encode() for i in range(N_KEYS)}
    assert sorted(v for _, _, _, v in consumed) == sorted(f"{i}".encode() for i in range(N_MESSAGES))

    # Each key lives in exactly one partition, and the keys were spread over the partitions.
    key_partitions: dict[bytes, set[int]] = defaultdict(set)
    for partition, _, key, _ in consumed:
        key_partitions[key].add(partition)
    assert all(len(parts) == 1 for parts in key_partitions.values())
    assert len({p for parts in key_partitions.values() for p in parts}) > 1

    # Per partition: consumed in offset order, exactly what was delivered there, and each key's
    # values in the order they were produced.
    by_partition: dict[int, list[tuple[int, bytes, bytes]]] = defaultdict(list)
    for partition, offset, key, value in consumed:
        by_partition[partition].append((offset, key, value))
    delivered_by_partition: dict[int, list[tuple[int, bytes, bytes]]] = defaultdict(list)
    for partition, offset, key, value in delivered:
        delivered_by_partition[partition].append((offset, key, value))
    for partition, records in by_partition.items():
        offsets = [offset for offset, _, _ in records]
        assert offsets == list(range(len(records))), f"partition {partition}: offsets {offsets}"
        assert records == sorted(delivered_by_partition[partition])
        per_key: dict[bytes, list[int]] = defaultdict(list)
        for _, key, value in records:
            per_key[key].append(int(value))
        for key, values in per_key.items():
            assert values == sorted(values), f"partition {partition} key {key!r} out of order"

    # The group's committed offsets reached the end of every partition.
    assert {tp.partition: tp.offset for tp in committed} == {
        p: len(by_partition.get(p, [])) for p in range(PARTITIONS)
    }


def test_log_cleaner_buffer_leaves_the_heap_to_clients(kafka_bootstrap: str) -> None:
    """kafka.sh gives the log cleaner's dedupe buffer 16 MiB instead of Kafka's 128 MiB: that buffer lives
    on the heap for good once __consumer_offsets is first cleaned, and at 128 MiB of a 512 MiB heap G1
    collected back to back under load, stalling every client for 100-300 ms at a time. A misspelt
    property would be ignored by the broker, so this reads back what it runs with."""
    if external_bootstrap():
        pytest.skip("an external broker (KAFKA_BOOTSTRAP_SERVERS) is not configured by kafka.sh")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    broker = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = admin.describe_configs([broker])[broker].result(timeout=30)
    assert int(configs["log.cleaner.dedupe.buffer.size"].value) == 16 * 1024 * 1024
