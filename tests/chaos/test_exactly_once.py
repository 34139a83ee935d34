"""Exactly-once under process faults: three instances SIGKILLed eight times with poison in the stream, and
a zombie (SIGSTOPped past its session timeout while another takes its partitions over, then SIGCONTed).
A ``read_committed`` reader must find every input answered, by a result or a dead letter, exactly once.

Each instance has an instance id of its own, and a killed one is replaced under the same id, as a
StatefulSet restarts a pod: the replacement's ``init_transactions`` aborts what the victim left open at
once (a replacement under a new id would leave it to the transaction timeout, and readers waiting).
"""

from __future__ import annotations

import random
import signal

import pytest

from service.tools.verify import format_report, verify
from tests.support.fleet import drain, fleet
from tests.support.harness import committed, metrics_events, wait_for
from tests.support.streams import StreamProducer

PARTITIONS = 6
INSTANCES = 3
KILLS = 8
EVENTS = 24_000
RATE = 600  # events/s: the stream outlasts the kills and restarts
SESSION_TIMEOUT_MS = 6000
PROGRESS_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 180.0


POISON_EVERY = 50


def _poisoned(seed: int, count: int = EVENTS) -> list[tuple[bytes, bytes]]:
    """Metrics events, one in POISON_EVERY replaced by a message that cannot be decoded (not JSON, or
    empty)."""
    items = metrics_events(count, seed=seed)
    for i in range(0, len(items), POISON_EVERY):
        items[i] = (items[i][0], b"not json" if i % (2 * POISON_EVERY) else b"")
    return items


def _settings(bootstrap: str, topics: dict[str, str], group_id: str) -> dict[str, str]:
    return {
        "kafka__bootstrap_servers": bootstrap,
        "kafka__group_id": group_id,
        "kafka__session_timeout_ms": str(SESSION_TIMEOUT_MS),
        "input__topics": topics["in"],
        "output__topic": topics["out"],
        "dlq__topic": topics["dlq"],
        "model__name": "metrics-anomaly",
        "delivery__guarantee": "exactly-once",
    }


def _topics(topic_factory) -> dict[str, str]:
    return {
        "in": topic_factory(partitions=PARTITIONS, prefix="eos-in"),
        "out": topic_factory(partitions=PARTITIONS, prefix="eos-out"),
        "dlq": topic_factory(partitions=1, prefix="eos-dlq"),
    }


def _check(bootstrap: str, topics: dict[str, str], produced: int) -> None:
    """Every input of the ``produced`` answered once, the poisoned ones by a dead letter."""
    report = verify({"bootstrap.servers": bootstrap}, topics["in"], topics["out"], topics["dlq"])
    print(format_report(report))
    summary = report.summary()
    assert summary["inputs"] == produced
    assert summary["lost"] == 0, [(p.partition, p.lost_offsets) for p in report.partitions]
    assert summary["duplicates"] == 0, summary
    assert summary["dead_letters"] == len(range(0, produced, POISON_EVERY)), summary


@pytest.mark.timeout(420)
def test_three_instances_and_eight_sigkills_with_poison_answer_each_input_once(
    tmp_path, kafka_bootstrap, topic_factory, group_id
):
    rng = random.Random(37)
    topics = _topics(topic_factory)
    items = _poisoned(seed=37)

    def answered() -> int:
        return sum(max(o, 0) for o in committed(kafka_bootstrap, group_id, topics["in"], PARTITIONS).values())

    stream = StreamProducer(kafka_bootstrap, topics["in"], items, RATE)
    with fleet(tmp_path, topics["in"], PARTITIONS, **_settings(kafka_bootstrap, topics, group_id)) as f:
        try:
            for number in range(INSTANCES):
                f.start(kafka__instance_id=f"r{number}")
            ids = {instance.name: f"r{n}" for n, instance in enumerate(f.instances)}
            for number in range(KILLS):
                target = answered() + rng.randint(300, 1500)
                what = f"answers before kill {number}"
                wait_for(lambda t=target: answered() >= t, PROGRESS_TIMEOUT_S, what)
                assert answered() < EVENTS, "the stream ran out before the kills: they proved nothing"
                victim = rng.choice(f.live())
                f.kill(victim)
                replacement = f.start(kafka__instance_id=ids[victim.name])  # the pod, restarted
                ids[replacement.name] = ids[victim.name]
            produced = stream.finish()
        finally:
            stream.cancel()
        drain(f, kafka_bootstrap, group_id, topics["in"], PARTITIONS, DRAIN_TIMEOUT_S)
        aborted = sum(len(i.events("transaction_aborted")) for i in f.instances)
    print(f"\n{produced} events, {KILLS} kills, {aborted} transactions aborted by the survivors")
    _check(kafka_bootstrap, topics, produced)


@pytest.mark.timeout(300)
def test_a_zombie_woken_after_its_group_moved_on_is_fenced_and_writes_nothing_twice(
    tmp_path, kafka_bootstrap, topic_factory, group_id
):
    topics = _topics(topic_factory)
    items = _poisoned(seed=38, count=6000)
    stream = StreamProducer(kafka_bootstrap, topics["in"], items, 300)
    settings = _settings(kafka_bootstrap, topics, group_id) | {"delivery__transaction_ms": "2000"}
    with fleet(tmp_path, topics["in"], PARTITIONS, **settings) as f:
        try:
            zombie = f.start(kafka__instance_id="z")
            other = f.start(kafka__instance_id="o")
            f.wait_stable(60, "both instances sharing the partitions")
            wait_for(lambda: zombie.events("transactions_ready"), 30, "the zombie ready")
            wait_for(lambda: zombie.events("partitions_assigned"), 30, "the zombie owning partitions")
            zombie.service.proc.send_signal(signal.SIGSTOP)  # with a 2 s transaction open
            try:
                wait_for(lambda: other.assignment() == set(range(PARTITIONS)), 60, "the other taking over")
            finally:
                zombie.service.proc.send_signal(signal.SIGCONT)
            wait_for(lambda: zombie.events("transaction_aborted"), 60, "the zombie's transaction aborted")
            produced = stream.finish()
        finally:
            stream.cancel()
        drain(f, kafka_bootstrap, group_id, topics["in"], PARTITIONS, DRAIN_TIMEOUT_S)
        fenced = [e for e in zombie.events("transaction_aborted") if e.get("fenced")]
    assert fenced, zombie.service.log()[-3000:]
    _check(kafka_bootstrap, topics, produced)
