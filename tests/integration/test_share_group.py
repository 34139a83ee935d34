"""Share groups (KIP-932) against the real broker: more replicas than partitions, each record answered once
it is done, and a record that no member ever answers dead-lettered on its last delivery."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from service.errors import EnvironmentNotReadyError, Reason
from service.tools.processes import Child
from service.tools.topics import TopicAdmin
from service.tools.verify import verify
from tests.support.broker import FaultBroker, private_broker
from tests.support.harness import (
    dlq_source_of,
    metrics_events,
    produce,
    read_topic,
    share_group_configs,
    start_on_topics,
    wait_for,
)
from tests.support.streams import StreamProducer, check_report, stop_service
from tests.support.supervise import Supervised

SHARE = {"kafka__group_type": "share"}


def _replica(
    tmp_path: Path, name: str, bootstrap: str, topics: dict[str, str], group_id: str, **extra
) -> Child:
    log_dir = tmp_path / name
    log_dir.mkdir()
    return start_on_topics(log_dir, bootstrap, topics, group_id, **SHARE, **extra)


def _answered(bootstrap: str, topics: dict[str, str]) -> bool:
    report = verify(
        {"bootstrap.servers": bootstrap}, topics["in"], topics["out"], topics["dlq"], timeout_s=10
    )
    return report.total("lost") == 0


def test_four_replicas_on_two_partitions_all_take_work(tmp_path, kafka_bootstrap, topic_factory, group_id):
    """A consumer group would leave two of the four idle; a share group hands records to every member.
    Nothing is lost, nothing answered twice, and a poison record is dead-lettered (then accepted)."""
    topics = {name: topic_factory(2, prefix=name) for name in ("in", "out", "dlq")}
    services = [_replica(tmp_path, name, kafka_bootstrap, topics, group_id) for name in "abcd"]
    try:
        wait_for(lambda: all(s.events("started") for s in services), 120, "four replicas started")
        items = metrics_events(2_000, seed=61)
        items[5] = (items[5][0], b"not json")
        stream = StreamProducer(kafka_bootstrap, topics["in"], items, rate=200)
        wait_for(lambda: stream.produced == len(items), 60, "the stream produced")
        stream.finish()
        wait_for(lambda: _answered(kafka_bootstrap, topics), 120, "every input answered")
    finally:
        codes = [stop_service(service) for service in services]
    assert codes == [0, 0, 0, 0], [service.log()[-2000:] for service in services]
    report = verify({"bootstrap.servers": kafka_bootstrap}, topics["in"], topics["out"], topics["dlq"])
    check_report(report, 0)
    assert report.total("inputs") == 2_000 and report.total("dead_letters") == 1
    totals = [service.events("stopped")[-1]["totals"]["events_in"] for service in services]
    assert all(total > 0 for total in totals), f"a replica took no work: {totals}"
    assert [len(s.events("share_group_experimental")) for s in services] == [1, 1, 1, 1]


def test_a_record_that_kills_the_process_is_dead_lettered_on_its_last_delivery(
    tmp_path, kafka_bootstrap, topic_factory, group_id
):
    """The record SIGKILLs the service whenever it is processed; the service is restarted (as the kubelet
    would). The group (two deliveries at most, the brokers' shortest lock) hands it out again once the
    dead member's lock runs out: on that last delivery it is dead-lettered unprocessed, with its own
    reason, and the stream goes on. One record per fetch and per producer batch, and one member, so the
    crash holds no other record (every record a process holds when it dies counts a delivery)."""
    topics = {name: topic_factory(1, prefix=name) for name in ("in", "out", "dlq")}
    share_group_configs(
        kafka_bootstrap, group_id, share_delivery_count_limit="2", share_record_lock_duration_ms="15000"
    )
    items = metrics_events(40, seed=62)
    crash = 20
    event = msgspec.json.decode(items[crash][1]) | {"fault": "crash"}
    items[crash] = (items[crash][0], msgspec.json.encode(event))
    # One producer batch each: a share group acquires whole batches, however few records a member asks for.
    coords = [coord for item in items for coord in produce(kafka_bootstrap, topics["in"], [item])]
    service = Supervised(
        _replica(
            tmp_path,
            "a",
            kafka_bootstrap,
            topics,
            group_id,
            model__processor="tests.support.faulty:FaultyProcessor",
            kafka__share_members="1",
            kafka__share_max_records="1",
        ),
        frozenset({-signal.SIGKILL}),
    )
    try:
        wait_for(lambda: _answered(kafka_bootstrap, topics), 150, "every input answered")
    finally:
        code = stop_service(service)
    assert code == 0, service.log()[-3000:]
    assert service.exits == [-signal.SIGKILL], "killed once, by its first delivery"
    report = verify({"bootstrap.servers": kafka_bootstrap}, topics["in"], topics["out"], topics["dlq"])
    check_report(report, 0)
    (letter,) = read_topic(kafka_bootstrap, topics["dlq"], expected=1, timeout=10)
    assert dlq_source_of(letter) == coords[crash]
    assert letter.headers["error.reason"].decode() == Reason.DELIVERY_LIMIT


NO_SHARE_PORT = int(os.environ.get("KAFKA_NO_SHARE_PORT", "19592"))


@pytest.fixture(scope="module")
def broker_without_share_groups() -> Iterator[FaultBroker]:
    """A broker of its own, formatted with share groups off (the feature ``share.version`` at 0)."""
    with private_broker(NO_SHARE_PORT, "no-share", KAFKA_FEATURES="share.version=0") as broker:
        yield broker


def test_brokers_without_share_groups_stop_the_service_with_one_line(tmp_path, broker_without_share_groups):
    admin = TopicAdmin({"bootstrap.servers": broker_without_share_groups.bootstrap})
    topics = {name: f"{name}-{uuid.uuid4().hex[:8]}" for name in ("in", "out", "dlq")}
    admin.create(list(topics.values()), 1)
    service = _replica(tmp_path, "a", broker_without_share_groups.bootstrap, topics, "no-share")
    code = service.proc.wait(timeout=120)
    assert code == EnvironmentNotReadyError.exit_code == 3, service.log()[-3000:]
    (line,) = [line for line in service.log().splitlines() if line.startswith("microbatch: ")]
    assert "share.version" in line and "MICROBATCH_KAFKA__GROUP_TYPE=consumer" in line
    assert "Traceback" not in service.log()
