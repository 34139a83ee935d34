"""`microbatch backfill` as a process against the real broker: a time range re-scored with the live group
untouched, resumed runs, verify over a range, partitions split over processes, and a transactional input
whose partitions end on transaction markers."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from service.tools.reader import offsets_lookup
from service.tools.verify import range_of, verify
from tests.support.harness import (
    SERVICE_PARTITIONS,
    committed,
    metrics_events,
    read_topic,
    source_of,
    start_backfill,
    summary_of,
)

pytestmark = pytest.mark.integration

HOUR_MS = 3_600_000
PER_ERA = 200


def produce_stamped(bootstrap: str, topic: str, events: list[tuple[bytes, bytes]], start_ms: int) -> None:
    """Each event to partition i % 4, stamped 1 ms apart from ``start_ms`` (CreateTime)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i, (key, value) in enumerate(events):
        producer.produce(topic, value, key, partition=i % SERVICE_PARTITIONS, timestamp=start_ms + i)
    assert producer.flush(30) == 0


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def commit_offsets(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_a_time_range_is_rescored_resumable_and_the_live_group_is_untouched(
    tmp_path, kafka_bootstrap, topics, group_id, guarantee
):
    """Exactly-once: the job's offsets, each with the range as its metadata, are committed inside its
    transactions, so the rerun finds the range done just the same."""
    conf = {"bootstrap.servers": kafka_bootstrap}
    now_ms = datetime.now(UTC).timestamp() * 1000
    eras = [int(now_ms) - (3 - k) * HOUR_MS for k in range(3)]  # 3 h, 2 h and 1 h ago
    for k, start_ms in enumerate(eras):
        produce_stamped(kafka_bootstrap, topics["in"], metrics_events(PER_ERA, seed=k), start_ms)
    live = {p: 7 for p in range(SERVICE_PARTITIONS)}
    commit_offsets(kafka_bootstrap, group_id, topics["in"], live)

    first, last = iso(eras[1]), iso(eras[2])  # the middle era: [2 h ago, 1 h ago)
    delivery = {"kafka__group_id": group_id, "delivery__guarantee": guarantee}
    job = start_backfill(
        tmp_path, kafka_bootstrap, topics, "middle", "--from", first, "--to", last, **delivery
    )
    assert job.proc.wait(timeout=120) == 0, job.log()[-3000:]
    summary = summary_of(job)
    assert summary["done"] is True
    assert summary["events"] == PER_ERA
    assert summary["results"] + summary["dead_letters"] == PER_ERA

    # Exactly the middle era was answered, once each.
    middle = {
        (i % SERVICE_PARTITIONS, PER_ERA // SERVICE_PARTITIONS + i // SERVICE_PARTITIONS)
        for i in range(PER_ERA)
    }
    answered = Counter(source_of(o) for o in read_topic(kafka_bootstrap, topics["out"], PER_ERA, timeout=30))
    assert set(answered) == middle
    assert max(answered.values()) == 1

    # The live group's offsets did not move; the job's group holds the range's end.
    assert committed(kafka_bootstrap, group_id, topics["in"], SERVICE_PARTITIONS) == live
    per_partition = PER_ERA // SERVICE_PARTITIONS
    job_group = f"{group_id}-backfill-middle"
    assert committed(kafka_bootstrap, job_group, topics["in"], SERVICE_PARTITIONS) == {
        p: 2 * per_partition for p in range(SERVICE_PARTITIONS)
    }

    # verify over the same range: nothing lost; over the whole topic: the two other eras are.
    in_range = range_of(conf, topics["in"], first, last)
    ranged = verify(conf, topics["in"], topics["out"], topics["dlq"], 60, in_range=in_range)
    assert ranged.ok and ranged.total("items") == PER_ERA and ranged.total("duplicates") == 0
    assert verify(conf, topics["in"], topics["out"], topics["dlq"], 60).total("lost") == 2 * PER_ERA

    # The same job again, with the default bounds (the whole topic): its commits record the range it
    # covered, so it has nothing left to do, says its flags were not used, and produces nothing.
    written = _output_end(conf, topics["out"])  # exactly-once: the results and the commit markers
    again = start_backfill(tmp_path, kafka_bootstrap, topics, "middle", **delivery)
    assert again.proc.wait(timeout=120) == 0, again.log()[-3000:]
    assert summary_of(again)["events"] == 0
    assert again.events("backfill_nothing_to_do")
    assert len(again.events("backfill_range_of_the_job")[0]["partitions"]) == SERVICE_PARTITIONS
    assert _output_end(conf, topics["out"]) == written >= PER_ERA


def _output_end(conf: dict[str, str], topic: str) -> int:
    """Offsets written to ``topic`` so far, over its partitions."""
    with offsets_lookup(conf) as lookup:
        return sum(lookup.watermarks((topic, p))[1] for p in range(SERVICE_PARTITIONS))


def test_partitions_split_over_two_processes_and_transaction_markers_end_them(
    tmp_path, kafka_bootstrap, topics
):
    events = metrics_events(400, seed=5)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tx-{topics['in']}"})
    producer.init_transactions(30)
    for chunk in range(4):  # four transactions: every partition ends on a commit marker
        producer.begin_transaction()
        for i, (key, value) in enumerate(events[chunk * 100 : (chunk + 1) * 100]):
            producer.produce(topics["in"], value, key, partition=i % SERVICE_PARTITIONS)
        producer.commit_transaction(30)

    jobs = [
        start_backfill(tmp_path, kafka_bootstrap, topics, "split", "--partitions", f"{i}/2") for i in range(2)
    ]
    for job in jobs:
        assert job.proc.wait(timeout=120) == 0, job.log()[-3000:]
    assert sorted(summary_of(job)["events"] for job in jobs) == [200, 200]
    conf = {"bootstrap.servers": kafka_bootstrap}
    report = verify(conf, topics["in"], topics["out"], topics["dlq"], 60)
    assert report.ok and report.total("items") == 400 and report.total("duplicates") == 0
    ranges = [job.events("backfill_range")[0]["partitions"] for job in jobs]
    assert sorted(ranges[0]) == [f"{topics['in']}[0]", f"{topics['in']}[2]"]
    assert sorted(ranges[1]) == [f"{topics['in']}[1]", f"{topics['in']}[3]"]


def test_latest_is_the_last_stable_offset_so_an_open_transaction_does_not_hold_the_end(
    tmp_path, kafka_bootstrap, topics
):
    events = metrics_events(120, seed=9)
    producer = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "transactional.id": f"tx-open-{topics['in']}",
            "transaction.timeout.ms": 300_000,  # stays open for the whole test unless aborted
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i, (key, value) in enumerate(events[:100]):
        producer.produce(topics["in"], value, key, partition=i % SERVICE_PARTITIONS)
    producer.commit_transaction(30)
    producer.begin_transaction()  # 20 more, written but neither committed nor aborted
    for i, (key, value) in enumerate(events[100:]):
        producer.produce(topics["in"], value, key, partition=i % SERVICE_PARTITIONS)
    assert producer.flush(30) == 0
    try:
        job = start_backfill(tmp_path, kafka_bootstrap, topics, "open-tx")
        # The high watermark is past the open records: a range ending there would wait for the
        # transaction (minutes). The last stable offset ends it at the committed records.
        assert job.proc.wait(timeout=90) == 0, job.log()[-3000:]
        assert summary_of(job)["events"] == 100
        # The range ends before the open records (25 committed ones and the commit marker per partition,
        # then 5 open): a committed-only consumer's watermark is the last stable offset, not the high
        # watermark. Were the open ones committed later, a range that counted them would have been called
        # done without them.
        ranges = job.events("backfill_range")[0]["partitions"]
        assert {name: end for name, (_start, end) in ranges.items()} == {
            f"{topics['in']}[{p}]": 26 for p in range(SERVICE_PARTITIONS)
        }
    finally:
        producer.abort_transaction(30)
