"""Broker faults against the real service process: restarts (SIGTERM and SIGKILL), a frozen broker, an
output topic that does not exist (back-pressure), and a dead-letter topic that does not exist.

Everything runs on the ``fault_broker`` (its own port, topic auto-creation OFF), never on the session
broker. Each test ends with :func:`service.tools.verify.verify` over the real topics: nothing lost, and the
duplicates it reports are printed (``-s``) and held to the bound stated beside each test.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from confluent_kafka import KafkaError, Message, Producer

from service.tools.generate import METRIC_FEATURES, EventGenerator
from service.tools.poison import make_poison
from service.tools.processes import Child
from service.tools.topics import TopicAdmin
from service.tools.verify import verify
from tests.support.harness import (
    dlq_source_of,
    free_port,
    http_get,
    metrics_events,
    produce,
    read_topic,
    wait_for,
)
from tests.support.streams import (
    PARTITIONS,
    LogWatch,
    Probe,
    StreamProducer,
    alive,
    check_report,
    hold,
    start_streamed,
    stop_service,
    stream_topics,
    tail,
)

# Broker restart: a steady stream, the broker stopped (SIGTERM) then later killed (SIGKILL), each time for
# BROKER_DOWN_S. The producer stops after the second recovery, so the input holds well under the cap.
RESTART_RATE = 150  # events/s
RESTART_MAX_EVENTS = 30_000  # cap on the stream (200 s at RESTART_RATE); in practice ~10k are produced
BROKER_DOWN_S = 10.0
FLOWING_AGAIN = 300  # new results after a restart that count as "results flow again"
CAUGHT_UP_LAG = 2 * RESTART_RATE  # uncommitted inputs that count as "commits caught up" (2 s of stream)

# Output back-pressure: a backlog far beyond MAX_IN_FLIGHT and an output topic that does not exist yet.
BACKPRESSURE_EVENTS = 10_000
BACKPRESSURE_MAX_IN_FLIGHT = 500
MAX_POLL_INTERVAL_MS = 10_000
PAUSED_HOLD_S = 1.5 * MAX_POLL_INTERVAL_MS / 1000  # stay paused this long: past max.poll.interval.ms
RSS_GROWTH_BOUND_MIB = 64
# Unknown-topic deliveries fail after 2 s instead of librdkafka's default 30 s.
PRODUCER_EXTRA = json.dumps({"topic.metadata.propagation.max.ms": 2000})

# Frozen broker. FREEZE_S is above the consumer's session timeout (6 s), so the group session is lost,
# and below the single-node KRaft broker's own broker.session.timeout.ms (9 s): a longer SIGSTOP makes
# the broker fence itself, answer one Metadata request with 0 brokers after SIGCONT, and librdkafka
# 2.16 then drops its only broker and stays disconnected (see the report; not a service behaviour).
FREEZE_S = 7.0
PAUSED_LOSS_EVENTS = 3_000
PAUSED_LOSS_DRAIN_TIMEOUT_S = 60  # a healthy drain of 3000 events takes a few seconds

# DLQ unavailable: per partition, PER_PARTITION messages; poison from local index FIRST_POISON + 10 * p on,
# then every POISON_EVERY-th; all the rest good.
PER_PARTITION = 400
FIRST_POISON = 100
POISON_EVERY = 25
# Back-off 0.1 s doubling to 5 s: the 7th attempt comes ~10 s after the first, several auto-commits later.
RETRIED_ATTEMPTS = 7

# Bounded waits (generous: a loaded 2-core CI machine).
FIRST_RESULTS_TIMEOUT_S = 90
RECOVERY_TIMEOUT_S = 120
DRAIN_TIMEOUT_S = 150


# -- helpers -------------------------------------------------------------------------------------------


def _backlog_without_output_topic(
    tmp_path: Path, fault_broker, fault_topic_factory, group: str, events: int, seed: int, **extra: str
) -> tuple[dict[str, str], list, Child]:
    """A backlog of ``events`` and a service whose output topic does not exist (auto-create is off), with
    the in-flight limit at BACKPRESSURE_MAX_IN_FLIGHT: it fills up and pauses."""
    topics = stream_topics(fault_topic_factory, output=f"out-missing-{uuid.uuid4().hex[:12]}")
    items = metrics_events(events, seed=seed)
    produce(fault_broker.bootstrap, topics["in"], items)
    service = start_streamed(
        tmp_path,
        fault_broker.bootstrap,
        group,
        topics,
        input__max_in_flight=str(BACKPRESSURE_MAX_IN_FLIGHT),
        kafka__producer_extra=PRODUCER_EXTRA,
        **extra,
    )
    return topics, items, service


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def _topic_exists(admin: TopicAdmin, name: str) -> bool:
    md = admin.client.list_topics(timeout=10)
    return name in md.topics and md.topics[name].error is None


def _group_members(admin: TopicAdmin, group: str) -> list[Any]:
    description = admin.client.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    return list(description.members)


# -- 3. broker restart -----------------------------------------------------------------------------------


def _outage(
    fault: Callable[[], None],
    recover: Callable[[], None],
    service: Child,
    probe: Probe,
    topics: dict[str, str],
    down_s: float = BROKER_DOWN_S,
    also: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Take the broker away with ``fault`` for ``down_s`` (calling ``also`` twice a second meanwhile),
    ``recover`` it, wait until results flow and commits have caught up with the stream again. Returns what
    was measured."""
    uncommitted = probe.lag(topics["in"])
    assert uncommitted >= 0, "the broker did not answer before the fault"
    t0 = time.monotonic()
    fault()
    hold(down_s, service, also)
    recover()
    t_up = time.monotonic()
    wait_for(lambda: alive(service) and probe.total(topics["out"]) >= 0, 60, "the broker answering")
    at_restart = probe.total(topics["out"])
    wait_for(
        lambda: alive(service) and probe.total(topics["out"]) >= at_restart + FLOWING_AGAIN,
        RECOVERY_TIMEOUT_S,
        "results flowing again after the broker restart",
    )
    flowing_s = time.monotonic() - t_up
    wait_for(
        lambda: alive(service) and 0 <= probe.lag(topics["in"]) <= CAUGHT_UP_LAG,
        RECOVERY_TIMEOUT_S,
        "commits caught up with the stream again",
    )
    return {
        "uncommitted_at_fault": uncommitted,
        "broker_away_s": round(t_up - t0, 1),
        "flowing_again_after_s": round(flowing_s, 1),
        "committing_again_after_s": round(time.monotonic() - t_up, 1),
    }


@pytest.mark.timeout(420)
def test_broker_restart_sigterm_then_sigkill_mid_stream(
    tmp_path, fault_broker, fault_topic_factory, group_id
):
    """The broker goes away twice under a steady stream of RESTART_RATE events/s: a clean stop (SIGTERM),
    then a SIGKILL, each for BROKER_DOWN_S. One service process lives through both (never exits, never
    restarts), produces results again each time the broker is back, and in the end has answered every
    input.

    Duplicates bound, per fault: what was not committed when it struck, plus the stream consumed until
    the group had settled again (RESTART_RATE x (time away + time until results flowed + 5 s)).

    The probes meanwhile: /healthz stays 200 throughout (the loop keeps coming round: a restart would not
    help), /readyz turns 503 once no broker has answered for BROKER_TIMEOUT_S, and 200 again after."""
    bootstrap = fault_broker.bootstrap
    topics = stream_topics(fault_topic_factory)
    stream = StreamProducer(
        bootstrap, topics["in"], metrics_events(RESTART_MAX_EVENTS, seed=31), RESTART_RATE
    )
    port = free_port()
    service = start_streamed(
        tmp_path, bootstrap, group_id, topics, metrics__port=str(port), metrics__broker_timeout_s="3"
    )
    during: list[tuple[int, str]] = []
    live: list[int] = []

    def probe_health() -> None:
        during.append(http_get(port, "/readyz"))
        live.append(http_get(port, "/healthz")[0])

    probe = Probe(bootstrap, group_id)
    logs = LogWatch(service)
    pid = service.proc.pid
    faults: dict[str, dict[str, Any]] = {}
    try:
        wait_for(
            lambda: alive(service) and probe.committed_total(topics["in"]) >= FLOWING_AGAIN,
            FIRST_RESULTS_TIMEOUT_S,
            "first commits",
        )
        assert http_get(port, "/readyz")[0] == 200
        faults["SIGTERM"] = _outage(
            fault_broker.stop, fault_broker.start, service, probe, topics, also=probe_health
        )
        wait_for(lambda: http_get(port, "/readyz")[0] == 200, 30, "ready again after the broker came back")
        faults["SIGKILL"] = _outage(fault_broker.kill, fault_broker.start, service, probe, topics)
        produced = stream.finish()
        wait_for(lambda: alive(service) and probe.drained(topics["in"]), DRAIN_TIMEOUT_S, "all committed")
    finally:
        stream.cancel()
        fault_broker.start()  # idempotent; the next test needs a broker even if this one failed mid-fault
        code = stop_service(service)
        probe.close()
    assert service.proc.pid == pid and code == 0, tail(service)
    assert len(logs.events("started")) == 1, "the service started more than once"
    assert set(live) == {200}, live
    unready = [body for status, body in during if status == 503]
    assert unready and all("no broker reachable" in body for body in unready), during
    report = verify({"bootstrap.servers": bootstrap}, topics["in"], topics["out"], topics["dlq"])
    print(
        f"\nbroker restarts: readyz during the first outage {[status for status, _ in during]} "
        f"produced={produced} faults={faults} "
        f"kafka_errors={len(logs.events('kafka_error'))} "
        f"partitions_lost={len(logs.events('partitions_lost'))} "
        f"partitions_revoked={len(logs.events('partitions_revoked'))} "
        f"delivery_failed={len(logs.events('delivery_failed'))}"
    )
    # The test's own producer is not idempotent: a retry across the outage may write an input twice.
    assert report.total("inputs") >= produced
    bound = sum(
        f["uncommitted_at_fault"] + RESTART_RATE * (f["broker_away_s"] + f["flowing_again_after_s"] + 5)
        for f in faults.values()
    )
    check_report(report, int(bound))


# -- 4. output back-pressure ---------------------------------------------------------------------------


def _sample_while_paused(
    service: Child, admin: TopicAdmin, group: str, rss: list[float], members: list[int]
) -> None:
    """One sample: the child's RSS, and that it is still the group's one member, owning every partition."""
    rss.append(_rss_mib(service.proc.pid))
    found = _group_members(admin, group)
    members.append(len(found))
    assert len(found) == 1, f"the service left the group while paused: {found}"
    assert len(found[0].assignment.topic_partitions) == PARTITIONS, found[0].assignment.topic_partitions


@pytest.mark.timeout(300)
def test_output_topic_missing_pauses_consumer_stays_in_group_then_drains(
    tmp_path, fault_broker, fault_topic_factory, fault_admin, group_id
):
    """The output topic does not exist (auto-create is off) while BACKPRESSURE_EVENTS wait: deliveries
    fail and are retried, the consumer pauses at MAX_IN_FLIGHT and keeps polling (still the group's member
    long after max.poll.interval.ms), memory stays flat; once the topic exists it resumes and drains.

    Duplicates bound: 0 (no crash, no rebalance; a failed delivery never reached the broker)."""
    bootstrap = fault_broker.bootstrap
    topics, items, service = _backlog_without_output_topic(
        tmp_path,
        fault_broker,
        fault_topic_factory,
        group_id,
        BACKPRESSURE_EVENTS,
        seed=41,
        kafka__max_poll_interval_ms=str(MAX_POLL_INTERVAL_MS),
    )
    logs = LogWatch(service)
    probe = Probe(bootstrap, group_id)
    created: list[str] = []
    rss: list[float] = []
    members: list[int] = []
    try:
        wait_for(lambda: alive(service) and logs.events("consumer_paused"), 90, "consumer_paused")
        wait_for(
            lambda: alive(service) and logs.events("delivery_failed", topic=topics["out"]),
            60,
            "delivery_failed for the missing output topic",
        )
        hold(
            PAUSED_HOLD_S,
            service,
            also=lambda: _sample_while_paused(service, fault_admin, group_id, rss, members),
        )
        assert not _topic_exists(fault_admin, topics["out"]), "the output topic was auto-created"
        assert logs.events("partitions_lost") == [] and logs.events("partitions_revoked") == []
        assert logs.events("consumer_resumed") == [], "resumed although nothing could be delivered"
        paused_at = logs.events("consumer_paused")[0]["in_flight"]
        max_in_flight = max([r["in_flight"] for r in logs.events("stats")] + [paused_at])
        # Paused once in flight reached the limit; at most one consume call (<= one batch) came in after.
        # A batch is at most MAX_SIZE, or the drain ceiling while cheap batches stretch or a backlog drains.
        ceiling = logs.events("batch_sizes")[0]["drain_max_size"]
        assert max_in_flight <= BACKPRESSURE_MAX_IN_FLIGHT + ceiling
        assert max(rss) - rss[0] <= RSS_GROWTH_BOUND_MIB, rss

        fault_admin.create([topics["out"]], PARTITIONS)
        created.append(topics["out"])
        t_created = time.monotonic()
        wait_for(lambda: alive(service) and logs.events("consumer_resumed"), 90, "consumer_resumed")
        resumed_after_s = time.monotonic() - t_created
        wait_for(lambda: alive(service) and probe.drained(topics["in"]), DRAIN_TIMEOUT_S, "all committed")
    finally:
        code = stop_service(service)
        probe.close()
    try:
        assert code == 0, tail(service)
        report = verify({"bootstrap.servers": bootstrap}, topics["in"], topics["out"], topics["dlq"])
        print(
            f"\noutput topic missing: events={len(items)} paused_at_in_flight={paused_at} "
            f"max_in_flight={max_in_flight} rss_mib={min(rss):.1f}..{max(rss):.1f} ({len(rss)} samples) "
            f"group_members={set(members)} ({len(members)} checks over {PAUSED_HOLD_S:.0f}s paused) "
            f"delivery_failed={len(logs.events('delivery_failed'))} resumed_after_s={resumed_after_s:.1f} "
            f"pause_cycles={len(logs.events('consumer_paused'))}"
        )
        assert report.total("inputs") == len(items)
        check_report(report, 0)
        assert report.total("out_of_order") == 0, "results of a partition out of offset order after retries"
    finally:
        fault_admin.delete(created)  # best effort: made outside fault_topic_factory


@pytest.mark.timeout(300)
def test_broker_frozen_mid_stream(tmp_path, fault_broker, fault_topic_factory, group_id):
    """SIGSTOP the broker for FREEZE_S under a steady stream of RESTART_RATE events/s (the consumer's group
    session times out meanwhile), then SIGCONT: the service survives, rejoins, produces results again
    and in the end has answered every input.

    Duplicates bound: what was not committed when the freeze began, plus the stream consumed until the
    group had settled again (RESTART_RATE x (freeze + time until results flowed + 5 s))."""
    bootstrap = fault_broker.bootstrap
    topics = stream_topics(fault_topic_factory)
    stream = StreamProducer(
        bootstrap, topics["in"], metrics_events(RESTART_MAX_EVENTS, seed=42), RESTART_RATE
    )
    service = start_streamed(tmp_path, bootstrap, group_id, topics)
    logs = LogWatch(service)
    probe = Probe(bootstrap, group_id)
    try:
        wait_for(
            lambda: alive(service) and probe.committed_total(topics["in"]) >= FLOWING_AGAIN,
            FIRST_RESULTS_TIMEOUT_S,
            "first commits",
        )
        measured = _outage(fault_broker.freeze, fault_broker.thaw, service, probe, topics, down_s=FREEZE_S)
        uncommitted, flowing_after_s = measured["uncommitted_at_fault"], measured["flowing_again_after_s"]
        produced = stream.finish()
        wait_for(lambda: alive(service) and probe.drained(topics["in"]), DRAIN_TIMEOUT_S, "all committed")
    finally:
        stream.cancel()
        fault_broker.thaw()  # harmless when not frozen; never leave it stopped
        code = stop_service(service)
        probe.close()
    assert code == 0, tail(service)
    assert len(logs.events("started")) == 1, "the service started more than once"
    report = verify({"bootstrap.servers": bootstrap}, topics["in"], topics["out"], topics["dlq"])
    print(
        f"\nbroker frozen {FREEZE_S}s: produced={produced} uncommitted_at_freeze={uncommitted} "
        f"flowing_again_after_s={flowing_after_s:.1f} "
        f"partitions_lost={len(logs.events('partitions_lost'))} "
        f"partitions_revoked={len(logs.events('partitions_revoked'))}"
    )
    assert report.total("inputs") >= produced
    check_report(report, int(uncommitted + RESTART_RATE * (FREEZE_S + flowing_after_s + 5)))


@pytest.mark.timeout(300)
def test_paused_consumer_resumes_after_losing_its_partitions(
    tmp_path, fault_broker, fault_topic_factory, fault_admin, group_id
):
    """Back-pressure and a group fault together: the consumer is paused (the output topic does not exist
    yet) when a FREEZE_S broker freeze costs it its group session and its partitions. After the thaw it
    rejoins; once the output topic exists, everything must drain.

    Duplicates bound: PAUSED_LOSS_EVENTS (nothing was committed before the loss; each input repeats at
    most once)."""
    bootstrap = fault_broker.bootstrap
    topics, items, service = _backlog_without_output_topic(
        tmp_path,
        fault_broker,
        fault_topic_factory,
        group_id,
        PAUSED_LOSS_EVENTS,
        seed=43,
        output__flush_timeout_s="2",  # the rebalance callbacks flush; nothing can be delivered yet
    )
    logs = LogWatch(service)
    probe = Probe(bootstrap, group_id)
    created: list[str] = []
    frozen = False
    try:
        wait_for(lambda: alive(service) and logs.events("consumer_paused"), 90, "consumer_paused")
        fault_broker.freeze()
        frozen = True
        hold(FREEZE_S, service)
        fault_broker.thaw()
        frozen = False
        wait_for(
            lambda: alive(service) and len(logs.events("partitions_assigned")) >= 2,
            RECOVERY_TIMEOUT_S,
            "the partitions assigned again after the thaw",
        )
        lost = logs.events("partitions_lost") + logs.events("partitions_revoked")
        assert lost, "the freeze did not cost the consumer its partitions; the test proved nothing"
        fault_admin.create([topics["out"]], PARTITIONS)
        created.append(topics["out"])
        wait_for(
            lambda: alive(service) and probe.drained(topics["in"]),
            PAUSED_LOSS_DRAIN_TIMEOUT_S,
            "all committed after the output topic appeared",
        )
    finally:
        if frozen:
            fault_broker.thaw()
        code = stop_service(service)
        probe.close()
    try:
        assert code == 0, tail(service)
        report = verify({"bootstrap.servers": bootstrap}, topics["in"], topics["out"], topics["dlq"])
        assert report.total("inputs") == len(items)
        check_report(report, len(items))
    finally:
        fault_admin.delete(created)  # best effort: made outside fault_topic_factory


# -- 7. dead-letter topic unavailable ------------------------------------------------------------------


def _poison_layout() -> list[tuple[int, bytes, bytes]]:
    """(partition, key, value) in production order; poison keys start with ``poison-``."""
    events = EventGenerator(71).metrics(PARTITIONS * PER_PARTITION, 0.05)
    rows: list[tuple[int, bytes, bytes]] = []
    for i, event in enumerate(events):
        partition, local = i % PARTITIONS, i // PARTITIONS
        first = FIRST_POISON + 10 * partition
        if local >= first and (local - first) % POISON_EVERY == 0:
            value = make_poison("not_json", event, METRIC_FEATURES[0], too_large_bytes=0)
            assert value is not None
            rows.append((partition, f"poison-{i}".encode(), value))
        else:
            rows.append((partition, event["host"].encode(), msgspec.json.encode(event)))
    return rows


def _produce_to_partitions(bootstrap: str, topic: str, rows: list[tuple[int, bytes, bytes]]) -> list[int]:
    """Produce each row to its partition, in order; return the offsets."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    offsets: list[int | None] = [None] * len(rows)

    def delivered(index: int, err: KafkaError | None, msg: Message) -> None:
        assert err is None, err
        offsets[index] = msg.offset()

    for i, (partition, key, value) in enumerate(rows):
        producer.produce(
            topic, value, key, partition=partition, on_delivery=lambda e, m, i=i: delivered(i, e, m)
        )
        producer.poll(0)
    assert producer.flush(60) == 0
    assert all(o is not None for o in offsets)
    return offsets  # type: ignore[return-value]


def _wait_dlq_retries(
    service: Child, logs: LogWatch, topics: dict[str, str], poison: set[tuple[int, int]]
) -> list[dict[str, Any]]:
    """Wait until a dead letter was retried RETRIED_ATTEMPTS times; check what delivery_failed says."""

    def retried() -> bool:
        failed = logs.events("delivery_failed", topic=topics["dlq"])
        return any(r["attempt"] >= RETRIED_ATTEMPTS for r in failed)

    wait_for(lambda: alive(service) and retried(), 90, "dead letters retried with back-off")
    failed = logs.events("delivery_failed", topic=topics["dlq"])
    assert {(r["source_partition"], r["source_offset"]) for r in failed} <= poison
    assert all(r["source_topic"] == topics["in"] and r["error"] and r["level"] == "error" for r in failed)
    # One back-off per topic: the dead letters are sent again together, waiting longer each time.
    delays = [r["retry_in_s"] for r in failed]
    assert delays == sorted(delays) and delays[-1] > delays[0], f"no back-off: {delays}"
    return failed


@pytest.mark.timeout(300)
def test_dlq_missing_holds_commits_at_first_poison_then_drains(
    tmp_path, fault_broker, fault_topic_factory, fault_admin, group_id
):
    """The DLQ topic does not exist (auto-create off) while poison is mixed into good events. Good events
    still get results; dead letters fail and are retried with back-off (logged as delivery_failed); no
    partition commits past its first poison message. Once the DLQ exists every poison message lands there
    with its original bytes, and the commits reach the end.

    Duplicates bound: 0 (no crash, no rebalance; a failed delivery never reached the broker)."""
    bootstrap = fault_broker.bootstrap
    topics = stream_topics(fault_topic_factory, dlq=f"dlq-missing-{uuid.uuid4().hex[:12]}")
    rows = _poison_layout()
    offsets = _produce_to_partitions(bootstrap, topics["in"], rows)
    poison_coords = {
        (p, offsets[i]): value for i, (p, key, value) in enumerate(rows) if key.startswith(b"poison-")
    }
    first_poison = {p: min(o for q, o in poison_coords if q == p) for p in range(PARTITIONS)}
    # A fresh topic: offsets are the per-partition indexes.
    assert first_poison == {p: FIRST_POISON + 10 * p for p in range(PARTITIONS)}
    good = len(rows) - len(poison_coords)
    service = start_streamed(tmp_path, bootstrap, group_id, topics, kafka__producer_extra=PRODUCER_EXTRA)
    logs = LogWatch(service)
    probe = Probe(bootstrap, group_id)
    created: list[str] = []
    try:
        wait_for(
            lambda: alive(service) and probe.total(topics["out"]) >= good,
            FIRST_RESULTS_TIMEOUT_S,
            f"results for all {good} good events",
        )
        wait_for(
            lambda: alive(service) and probe.committed_or_none(topics["in"]) == first_poison,
            60,
            "commits up to (not past) the first poison message of each partition",
        )

        failed = _wait_dlq_retries(service, logs, topics, set(poison_coords))
        held = probe.committed(topics["in"])
        assert held == first_poison, (
            f"committed past a poison message whose dead letter is undelivered: {held}"
        )
        assert probe.total(topics["out"]) == good, "a poison message got a result, or a result was repeated"
        assert not _topic_exists(fault_admin, topics["dlq"]), "the DLQ topic was auto-created"

        fault_admin.create([topics["dlq"]], 1)
        created.append(topics["dlq"])
        wait_for(
            lambda: alive(service) and probe.drained(topics["in"]), DRAIN_TIMEOUT_S, "all inputs committed"
        )
        dead = read_topic(bootstrap, topics["dlq"], expected=len(poison_coords), timeout=60)
    finally:
        code = stop_service(service)
        probe.close()
    try:
        assert code == 0, tail(service)
        by_source = {dlq_source_of(d): d for d in dead}
        assert set(by_source) == set(poison_coords)
        for coord, record in by_source.items():
            assert record.value == poison_coords[coord], coord
            assert record.headers["error.reason"] == b"invalid_json"
            assert record.headers["source.topic"].decode() == topics["in"]
        report = verify({"bootstrap.servers": bootstrap}, topics["in"], topics["out"], topics["dlq"])
        print(
            f"\ndlq missing: events={len(rows)} good={good} poison={len(poison_coords)} "
            f"first_poison={first_poison} held_commits={held} delivery_failed={len(failed)}+ "
            f"max_attempt={max(r['attempt'] for r in failed)} dead_letters={len(dead)}"
        )
        assert report.total("inputs") == len(rows)
        assert report.total("dead_letters") >= len(poison_coords)
        check_report(report, 0)
    finally:
        fault_admin.delete(created)  # best effort: made outside fault_topic_factory
