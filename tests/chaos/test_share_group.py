"""A share group under process faults: three replicas on a two-partition topic, SIGKILLed four times with
poison in the stream. Every input is answered (a result or a dead letter): a killed replica's records come
back to the group when their locks run out, and another member answers them. What comes twice is bounded
by what each victim held (its members' records, acquired and not answered)."""

from __future__ import annotations

import random

import pytest

from service.tools.topics import Watermarks
from service.tools.verify import format_report, verify
from tests.support.fleet import fleet
from tests.support.harness import metrics_events, share_group_configs, wait_for
from tests.support.streams import StreamProducer

PARTITIONS = 2
INSTANCES = 3
KILLS = 4
EVENTS = 12_000
RATE = 300  # events/s: the stream outlasts the kills
LOCK_MS = 15_000  # the brokers' shortest record lock: a victim's records come back sooner
MEMBERS, MAX_RECORDS = 2, 64
HELD_SLACK = 64  # beyond MEMBERS x MAX_RECORDS: the brokers acquire whole producer batches
POISON_EVERY = 50
PROGRESS_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 180.0


def _poisoned(seed: int) -> list[tuple[bytes, bytes]]:
    items = metrics_events(EVENTS, seed=seed)
    for i in range(0, len(items), POISON_EVERY):
        items[i] = (items[i][0], b"not json")
    return items


@pytest.mark.timeout(420)
def test_three_replicas_on_two_partitions_and_four_sigkills_lose_nothing(
    tmp_path, kafka_bootstrap, topic_factory, group_id
):
    rng = random.Random(41)
    topics = {
        "in": topic_factory(partitions=PARTITIONS, prefix="share-in"),
        "out": topic_factory(partitions=PARTITIONS, prefix="share-out"),
        "dlq": topic_factory(partitions=1, prefix="share-dlq"),
    }
    share_group_configs(kafka_bootstrap, group_id, share_record_lock_duration_ms=str(LOCK_MS))
    marks = Watermarks({"bootstrap.servers": kafka_bootstrap})

    def answered() -> int:
        return marks.count(topics["out"], PARTITIONS) + marks.count(topics["dlq"], 1)

    settings = {
        "kafka__bootstrap_servers": kafka_bootstrap,
        "kafka__group_id": group_id,
        "kafka__group_type": "share",
        "kafka__share_members": str(MEMBERS),
        "kafka__share_max_records": str(MAX_RECORDS),
        "input__topics": topics["in"],
        "output__topic": topics["out"],
        "dlq__topic": topics["dlq"],
        "model__name": "metrics-anomaly",
    }
    stream = StreamProducer(kafka_bootstrap, topics["in"], _poisoned(seed=41), RATE)
    with fleet(tmp_path, topics["in"], PARTITIONS, **settings) as f:
        try:
            for _ in range(INSTANCES):
                f.start()
            for number in range(KILLS):
                target = answered() + rng.randint(300, 1200)
                what = f"answers before kill {number}"
                wait_for(lambda t=target: answered() >= t, PROGRESS_TIMEOUT_S, what)
                assert answered() < EVENTS, "the stream ran out before the kills: they proved nothing"
                f.kill(rng.choice(f.live()))
                f.start()  # the pod, restarted
            produced = stream.finish()
        finally:
            stream.cancel()

        def all_answered() -> bool:
            report = verify({"bootstrap.servers": kafka_bootstrap}, *topics.values())
            return report.total("inputs") == produced and report.total("lost") == 0

        wait_for(all_answered, DRAIN_TIMEOUT_S, "every input answered")
    marks.close()
    report = verify({"bootstrap.servers": kafka_bootstrap}, *topics.values())
    print(format_report(report))
    summary = report.summary()
    bound = KILLS * (MEMBERS * MAX_RECORDS + HELD_SLACK)
    print(f"\n{produced} events, {KILLS} kills, duplicates {summary['duplicates']} (bound {bound})")
    assert summary["lost"] == 0, summary
    assert summary["dead_letters"] >= len(range(0, produced, POISON_EVERY)), summary
    assert summary["duplicates"] <= bound, summary
