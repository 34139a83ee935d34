"""service/kafka/ranges.py without a broker: the backfill's reader reports where partitions ended, which
the service's consumer ignores; both report a refused topic the same way."""

from __future__ import annotations

from types import SimpleNamespace

from confluent_kafka import KafkaError

from service.config import KafkaSettings
from service.flow.records import Permission
from service.kafka import ClientHooks, RangeReader, Source


def message(topic: str, partition: int, offset: int) -> SimpleNamespace:
    return SimpleNamespace(topic=lambda: topic, partition=lambda: partition, offset=lambda: offset)


def test_partition_ends_are_taken_once_and_only_by_the_range_reader():
    eof = KafkaError(KafkaError._PARTITION_EOF)
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    reader, source = RangeReader(settings), Source(settings)
    try:
        assert reader.take_ends() == {}
        reader._on_message_error(message("in", 0, 7), eof)  # type: ignore[arg-type]
        reader._on_message_error(message("in", 1, 3), eof)  # type: ignore[arg-type]
        reader._on_message_error(message("in", 0, 9), eof)  # type: ignore[arg-type]
        assert reader.take_ends() == {("in", 0): 9, ("in", 1): 3}
        assert reader.take_ends() == {}
        source._on_message_error(message("in", 0, 7), eof)  # type: ignore[arg-type]  # not an error
        assert not hasattr(source, "take_ends")
    finally:
        reader.close()
        source.close()


def test_a_refused_topic_is_reported_by_either():
    refused = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    for kind in (Source, RangeReader):
        seen: list[tuple[Permission, bool]] = []
        client = kind(settings, ClientHooks(access=lambda p, r, seen=seen: seen.append((p, r))))
        try:
            client._on_message_error(message("in", 0, 7), refused)  # type: ignore[arg-type]
        finally:
            client.close()
        assert seen == [(Permission("READ", "topic", "in"), True)]
