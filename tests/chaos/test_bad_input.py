"""Bad input against the real service and the session broker: a model that raises, returns NaN or is slow
on some items (scenario 5), and every kind of malformed message of the poison catalogue (scenario 6).

What must hold every time: each bad item, and only it, reaches the dead-letter topic with its documented
reason and its original key, value and headers; every healthy item gets exactly one result, promptly, even
right behind a bad one in the same partition; the service keeps its place in the group; nothing is lost
(service.tools.verify) and, with no restart, nothing is duplicated.
"""

from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass

import msgspec
import pytest
from confluent_kafka import Producer

from service.errors import Reason
from service.tools.generate import METRIC_FEATURES, EventGenerator
from service.tools.poison import DEEP_NESTING_LEVELS, POISON_KINDS, WRONG_TYPE_VALUES, make_poison
from service.tools.processes import Child
from service.tools.verify import verify
from tests.support.faulty import SLOW_S
from tests.support.harness import (
    Output,
    committed,
    end_offsets,
    read_topic,
    start_on_topics,
    wait_for,
)

PARTITIONS = 2

# Scenario 5: healthy metrics events, some of them marked with a fault for tests.support.faulty.
FAULTY_EVENTS = 400
RAISE_AT = range(7, FAULTY_EVENTS, 50)  # 8 items: the batch fails until each is alone
NAN_AT = range(23, FAULTY_EVENTS, 50)  # 8 items: NaN score
SLOW_AT = (101, 202, 303)  # 3 items, each stalls its batch SLOW_S seconds
MAX_POLL_INTERVAL_MS = 10_000  # > any batch's stall (SLOW_S), so the group must never evict the service
assert MAX_POLL_INTERVAL_MS > 4 * SLOW_S * 1000

# Scenario 6: per partition, every poison kind (and every wrong-type variant) followed by two good events.
GOOD_AFTER_POISON = 2
MAX_VALUE_BYTES = 256 * 1024  # the configured limit; too_large and 1.5 MB values are above it
BIG_VALUE_BYTES = 1_500_000  # a real 1 MB+ value: the topics need max.message.bytes raised
BIG_TOPIC_CONFIG = {"max.message.bytes": "4000000"}
# The broker stamps input records on arrival, so a result's produced_ms - event_ms is the service's delay.
INPUT_TOPIC_CONFIG = BIG_TOPIC_CONFIG | {"message.timestamp.type": "LogAppendTime"}
PROMPT_MS = 10_000  # a good event right behind a poison one is answered within this (loaded 2-core CI)

EXTRA_FIELD_EVENTS = 150  # each sent twice: plain, and with extra fields of every JSON type

DUPLICATES_BOUND = 0  # no restart and a clean SIGTERM: nothing may be answered twice
RESULTS_TIMEOUT_S = 120

# Keys and headers are opaque bytes to the service: these must come back byte for byte.
KEYS: tuple[bytes | None, ...] = (None, b"", b"\x00\xff\xfe key \x80", bytes(range(256)), "clé".encode())


def _headers(i: int) -> list[tuple[str, bytes | None]]:
    return [
        ("trace-id", f"t-{i}".encode()),
        ("binary", b"\xff\xfe\x00\x80 not utf-8 \xc3"),
        ("repeated", b"first"),
        ("repeated", b"\xc3\x28"),
        ("no-value", None),
    ]


@dataclass(frozen=True)
class Msg:
    partition: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


Coord = tuple[int, int]


def _producer(bootstrap: str) -> Producer:
    return Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "message.max.bytes": 5_000_000}
    )


def _produce(producer: Producer, topic: str, messages: list[Msg]) -> list[Coord]:
    """Send in order, each to its partition; wait for every ack; return each one's (partition, offset)."""
    coords: list[Coord | None] = [None] * len(messages)
    errors = []

    def delivered(index: int, err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            coords[index] = (msg.partition(), msg.offset())

    for i, m in enumerate(messages):
        producer.produce(
            topic,
            m.value,
            m.key,
            partition=m.partition,
            headers=m.headers,
            on_delivery=lambda e, r, i=i: delivered(i, e, r),
        )
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors
    assert all(c is not None for c in coords)
    return coords  # type: ignore[return-value]


def _count(service: Child, event: str) -> int:
    return len(service.events(event))


def _assigned(service: Child, topic: str) -> set[str]:
    parts: set[str] = set()
    for e in service.events("partitions_assigned"):
        parts |= {p for p in e.get("partitions", []) if p.startswith(f"{topic}[")}
    return parts


def _wait_assigned(service: Child, topic: str) -> None:
    def ready() -> bool:
        assert service.proc.poll() is None, f"service exited early:\n{service.log()[-3000:]}"
        return len(_assigned(service, topic)) == PARTITIONS

    wait_for(ready, 90, "the service to be assigned every input partition")


def _service(tmp_path, bootstrap, topics, group_id, **extra) -> Child:
    return start_on_topics(tmp_path, bootstrap, topics, group_id, log__stats_interval_s="2", **extra)


def _result_source(rec: Output) -> Coord:
    value = msgspec.json.decode(rec.value)
    return value["source"]["partition"], value["source"]["offset"]


def _dlq_source(rec: Output) -> Coord:
    return int(rec.header("source.partition")), int(rec.header("source.offset"))


def _verify(bootstrap: str, topics: dict[str, str]):
    report = verify({"bootstrap.servers": bootstrap}, topics["in"], topics["out"], topics["dlq"], 60)
    print(report.summary())
    assert report.total("lost") == 0, report.summary()
    assert report.total("out_of_order") == 0, report.summary()
    assert report.total("duplicates") <= DUPLICATES_BOUND, report.summary()
    return report


def _stop(service: Child) -> None:
    code = service.stop()
    assert code == 0, f"exit {code}:\n{service.log()[-3000:]}"


def _assert_passed_through(rec: Output, sent: Msg, extra_headers: int = 0) -> None:
    """Key and headers unchanged: same bytes, same order, repeated and null-valued headers included."""
    assert rec.key == sent.key
    got = rec.header_list[: len(rec.header_list) - extra_headers] if extra_headers else rec.header_list
    assert got == sent.headers


# -- scenario 5: a model that fails, returns NaN or is slow on some items ---------------------------------


def test_faulty_model_costs_only_the_failing_items(tmp_path, kafka_bootstrap, admin, topic_factory, group_id):
    topics = {
        "in": topic_factory(partitions=PARTITIONS, prefix="in"),
        "out": topic_factory(partitions=PARTITIONS, prefix="out"),
        "dlq": topic_factory(partitions=1, prefix="dlq"),
    }
    fault_at = {i: "raise" for i in RAISE_AT} | {i: "nan" for i in NAN_AT} | {i: "slow" for i in SLOW_AT}
    messages = []
    for i, plain in enumerate(EventGenerator(51).metrics(FAULTY_EVENTS, 0.05)):
        event = plain | {"fault": fault_at[i]} if i in fault_at else plain
        messages.append(Msg(i % PARTITIONS, event["host"].encode(), msgspec.json.encode(event), _headers(i)))
    # A backlog, so every batch is full (16) and each faulty item shares its batch with healthy ones.
    coords = _produce(_producer(kafka_bootstrap), topics["in"], messages)
    sent = dict(zip(coords, messages, strict=True))
    fault_of = {coords[i]: f for i, f in fault_at.items()}
    expected_reason = {"raise": Reason.INFERENCE_ERROR, "nan": Reason.INVALID_OUTPUT}
    bad = {c for c, f in fault_of.items() if f in expected_reason}
    healthy = set(coords) - bad

    service = _service(
        tmp_path,
        kafka_bootstrap,
        topics,
        group_id,
        model__processor="tests.support.faulty:FaultyProcessor",
        kafka__session_timeout_ms="6000",
        kafka__max_poll_interval_ms=str(MAX_POLL_INTERVAL_MS),
    )
    try:
        results = read_topic(kafka_bootstrap, topics["out"], len(healthy), RESULTS_TIMEOUT_S)
        dead = read_topic(kafka_bootstrap, topics["dlq"], len(bad), RESULTS_TIMEOUT_S)
        # Still a member, alone and stable, holding every partition: no eviction, no rebalance.
        description = admin.client.describe_consumer_groups([group_id])[group_id].result(timeout=30)
        log_before_stop = service.events()
    finally:
        _stop(service)

    events = [e.get("event") for e in log_before_stop]
    print(
        f"events={len(messages)} raise={len(RAISE_AT)} nan={len(NAN_AT)} slow={len(SLOW_AT)} "
        f"splits={events.count('batch_failed_splitting')} results={len(results)} dead_letters={len(dead)}"
    )
    assert events.count("partitions_assigned") == 1, "a rebalance happened"
    assert "partitions_revoked" not in events and "partitions_lost" not in events
    assert "MAXPOLL" not in json.dumps(log_before_stop)
    assert str(description.state).endswith("STABLE"), description.state
    assert len(description.members) == 1
    held = {(tp.topic, tp.partition) for tp in description.members[0].assignment.topic_partitions}
    assert held == {(topics["in"], p) for p in range(PARTITIONS)}
    # The batches holding a 'raise' item were split: healthy batch-mates were answered, not rejected.
    assert events.count("batch_failed_splitting") >= len(RAISE_AT)

    assert sorted(_dlq_source(r) for r in dead) == sorted(bad), "exactly the failing items, once each"
    for rec in dead:
        coord = _dlq_source(rec)
        assert rec.header("error.reason").decode() == expected_reason[fault_of[coord]].value
        assert rec.value == sent[coord].value
        _assert_passed_through(rec, sent[coord], extra_headers=5)
        if fault_of[coord] == "raise":
            assert b"InjectedFault" in rec.header("error.message")
    assert sorted(_result_source(r) for r in results) == sorted(healthy)
    for rec in results:
        coord = _result_source(rec)
        _assert_passed_through(rec, sent[coord])
        score = msgspec.json.decode(rec.value)["result"]["score"]
        assert isinstance(score, float)
    slow_answered = {c for c, f in fault_of.items() if f == "slow"} & {_result_source(r) for r in results}
    assert len(slow_answered) == len(SLOW_AT)

    report = _verify(kafka_bootstrap, topics)
    assert report.total("dead_letters") == len(bad)
    assert report.total("results") == len(healthy)


# -- scenario 6: the poison catalogue ---------------------------------------------------------------------


def _poison_cases() -> list[tuple[str, bytes | None, Reason]]:
    """(label, value, reason) for every catalogued kind; wrong_type once per variant, deterministically."""
    event = EventGenerator(61).metrics(1)[0]
    field = METRIC_FEATURES[0]
    cases = []
    for kind, reason in sorted(POISON_KINDS.items()):
        if kind == "wrong_type":
            cases += [(f"wrong_type:{v.decode()}", v, reason) for v in WRONG_TYPE_VALUES]
        else:
            cases.append((kind, make_poison(kind, event, field, 2 * MAX_VALUE_BYTES), reason))
    return cases


def _big_value() -> bytes:
    """A well-formed event padded with incompressible text to BIG_VALUE_BYTES: too large, nothing else."""
    event = EventGenerator(62).metrics(1)[0]
    noise = base64.b64encode(random.Random(62).randbytes(BIG_VALUE_BYTES)).decode()
    value = msgspec.json.encode(event | {"padding": ""})
    value = msgspec.json.encode(event | {"padding": noise[: BIG_VALUE_BYTES - len(value)]})
    assert len(value) == BIG_VALUE_BYTES
    return value


def _send_poison_then_good(
    bootstrap: str, topic: str, cases: list[tuple[str, bytes | None, Reason]]
) -> tuple[dict[Coord, tuple[str, Msg]], dict[Coord, str]]:
    """Per partition, each poison message then GOOD_AFTER_POISON good ones right behind it; sent (and
    acked) case by case, so each good one's Kafka timestamp says when it became available. Returns
    coord -> ("poison" | "good", message) and coord -> the case's label."""
    good = iter(EventGenerator(63).metrics(len(cases) * PARTITIONS * GOOD_AFTER_POISON))
    producer = _producer(bootstrap)
    sent: dict[Coord, tuple[str, Msg]] = {}
    label_of: dict[Coord, str] = {}
    n = 0
    for partition in range(PARTITIONS):
        for label, value, _reason in cases:
            if label == "big_1_5mb" and partition:
                continue  # one 1.5 MB value is enough
            batch = [Msg(partition, KEYS[n % len(KEYS)], value, _headers(n))]
            for _ in range(GOOD_AFTER_POISON):
                n += 1
                batch.append(
                    Msg(partition, KEYS[n % len(KEYS)], msgspec.json.encode(next(good)), _headers(n))
                )
            n += 1
            coords = _produce(producer, topic, batch)
            for i, (coord, msg) in enumerate(zip(coords, batch, strict=True)):
                sent[coord] = ("poison" if i == 0 else "good", msg)
                label_of[coord] = label
    return sent, label_of


def test_poison_catalogue_goes_to_dlq_without_blocking_its_partition(
    tmp_path, kafka_bootstrap, topic_factory, group_id
):
    topics = {
        "in": topic_factory(partitions=PARTITIONS, prefix="in", config=INPUT_TOPIC_CONFIG),
        "out": topic_factory(partitions=PARTITIONS, prefix="out"),
        "dlq": topic_factory(partitions=1, prefix="dlq", config=BIG_TOPIC_CONFIG),
    }
    cases = [*_poison_cases(), ("big_1_5mb", _big_value(), Reason.VALUE_TOO_LARGE)]
    deep = next(v for label, v, _ in cases if label == "deep_nesting")
    assert deep.count(b"[") == DEEP_NESTING_LEVELS  # the real thing: 100k levels, under the limit
    assert len(deep) <= MAX_VALUE_BYTES

    service = _service(
        tmp_path, kafka_bootstrap, topics, group_id, input__max_value_bytes=str(MAX_VALUE_BYTES)
    )
    try:
        _wait_assigned(service, topics["in"])
        sent, label_of = _send_poison_then_good(kafka_bootstrap, topics["in"], cases)
        poisons = {c for c, (what, _m) in sent.items() if what == "poison"}
        goods = set(sent) - poisons

        results = read_topic(kafka_bootstrap, topics["out"], len(goods), RESULTS_TIMEOUT_S)
        dead = read_topic(kafka_bootstrap, topics["dlq"], len(poisons), RESULTS_TIMEOUT_S)
        # Every dead letter was acked too: the commit reaches the end of every partition.
        ends = end_offsets(kafka_bootstrap, topics["in"], PARTITIONS)
        wait_for(
            lambda: committed(kafka_bootstrap, group_id, topics["in"], PARTITIONS) == ends,
            60,
            f"the commits to reach the end offsets {ends}",
        )
    finally:
        _stop(service)

    reasons = {label: reason for label, _v, reason in cases}
    print(f"cases={len(cases)} poison={len(poisons)} good={len(goods)} dead_letters={len(dead)}")
    assert sorted(_dlq_source(r) for r in dead) == sorted(poisons), "each poison message once, nothing else"
    for rec in dead:
        coord = _dlq_source(rec)
        label, msg = label_of[coord], sent[coord][1]
        assert rec.header("error.reason").decode() == reasons[label].value, label
        assert rec.value == msg.value, f"{label}: the dead letter must hold the original bytes"
        _assert_passed_through(rec, msg, extra_headers=5)
        assert rec.header("source.topic").decode() == topics["in"]
        assert rec.header("error.message"), label
        if label == "deep_nesting":
            assert b"nested too deeply" in rec.header("error.message")
        if label == "big_1_5mb":
            assert len(rec.value) == BIG_VALUE_BYTES
    assert {label_of[_dlq_source(r)] for r in dead} == set(reasons)

    assert sorted(_result_source(r) for r in results) == sorted(goods)
    latencies = []
    for rec in results:
        coord = _result_source(rec)
        _assert_passed_through(rec, sent[coord][1])
        stamps = msgspec.json.decode(rec.value)["timestamps"]
        latency = stamps["produced_ms"] - stamps["event_ms"]
        latencies.append(latency)
        assert latency <= PROMPT_MS, f"good event {coord} behind a {label_of[coord]} waited {latency} ms"
    print(
        f"good-after-poison latency ms: max={max(latencies)} median={sorted(latencies)[len(latencies) // 2]}"
    )

    report = _verify(kafka_bootstrap, topics)
    assert report.total("dead_letters") == len(poisons)
    assert report.total("results") == len(goods)


def _with_extras(event: dict, i: int) -> dict:
    """The same event plus fields of every JSON type that no processor asked for."""
    return event | {
        "labels": {"team": "payments", "region": "eu-west-1", "deep": {"a": [1, {"b": [None, True]}]}},
        "tags": ["canary", "ünïcødé ✓", 3, 4.5, None, False],
        "note": "line\nbreak \u0000 nul and \\ backslash \U0001f600",
        "missing_value": None,
        "flag": True,
        "big_int": 2**63 - 1,
        "neg_float": -1.5e300,
        "fault": "raise",  # only the test processor reads this; the features processor must ignore it
        "seq": i,
    }


def test_extra_fields_are_not_poison(tmp_path, kafka_bootstrap, topic_factory, group_id):
    topics = {
        "in": topic_factory(partitions=PARTITIONS, prefix="in"),
        "out": topic_factory(partitions=PARTITIONS, prefix="out"),
        "dlq": topic_factory(partitions=1, prefix="dlq"),
    }
    messages = []
    for i, event in enumerate(EventGenerator(71).metrics(EXTRA_FIELD_EVENTS, 0.05)):
        for variant in (event, _with_extras(event, i)):
            n = len(messages)
            messages.append(
                Msg(i % PARTITIONS, KEYS[n % len(KEYS)], msgspec.json.encode(variant), _headers(n))
            )
    coords = _produce(_producer(kafka_bootstrap), topics["in"], messages)
    sent = dict(zip(coords, messages, strict=True))

    service = _service(tmp_path, kafka_bootstrap, topics, group_id)
    try:
        results = read_topic(kafka_bootstrap, topics["out"], len(messages), RESULTS_TIMEOUT_S)
    finally:
        _stop(service)

    assert sorted(_result_source(r) for r in results) == sorted(coords)
    score = {}
    for rec in results:
        coord = _result_source(rec)
        _assert_passed_through(rec, sent[coord])
        score[coord] = msgspec.json.decode(rec.value)["result"]["score"]
    # Extra fields change nothing: each enriched event scores as its plain twin (sent just before it).
    for plain, enriched in zip(coords[0::2], coords[1::2], strict=True):
        assert score[enriched] == pytest.approx(score[plain], rel=1e-5, abs=1e-5)
    report = _verify(kafka_bootstrap, topics)
    assert report.total("dead_letters") == 0
    print(f"events={len(messages)} results={len(results)}")
