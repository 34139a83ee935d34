"""The service end to end against the real broker: results, dead letters, crashes and clean stops."""

from __future__ import annotations

import signal
import threading
from collections import Counter

import msgspec

from service.errors import Reason
from service.tools.generate import LOG_LABELS, METRIC_FEATURES, EventGenerator
from service.tools.poison import POISON_KINDS, make_poison
from tests.support.harness import (
    SERVICE_PARTITIONS,
    assert_order_per_partition,
    committed,
    dlq_source_of,
    end_offsets,
    metrics_events,
    produce,
    read_topic,
    source_of,
    start_on_topics,
    wait_for,
)

PARTITIONS = SERVICE_PARTITIONS


def test_every_input_gets_exactly_one_result_in_order(tmp_path, kafka_bootstrap, topics, group_id):
    items = metrics_events(2000, seed=11)
    coords = produce(kafka_bootstrap, topics["in"], items)
    service = start_on_topics(tmp_path, kafka_bootstrap, topics, group_id)
    try:
        outputs = read_topic(kafka_bootstrap, topics["out"], expected=len(items))
    finally:
        code = service.stop()
    assert code == 0, service.log()

    by_source = Counter(source_of(o) for o in outputs)
    assert set(by_source) == set(coords)
    assert max(by_source.values()) == 1
    assert_order_per_partition(outputs)

    sent = {c: item for c, item in zip(coords, items, strict=True)}
    for out in outputs[:200]:
        key, _value = sent[source_of(out)]
        assert out.key == key
        value = msgspec.json.decode(out.value)
        assert value["source"]["topic"] == topics["in"]
        assert value["model"]["name"] == "metrics-anomaly"
        assert isinstance(value["result"]["score"], float)
        assert isinstance(value["result"]["is_anomaly"], bool)
        assert 1 <= value["batch_size"] <= drain_ceiling(service.log())
        assert value["timestamps"]["produced_ms"] >= value["timestamps"]["event_ms"]
        assert out.headers["trace-id"].startswith(b"t-")  # input headers pass through
    assert committed(kafka_bootstrap, group_id, topics["in"], PARTITIONS) == end_offsets(
        kafka_bootstrap, topics["in"], PARTITIONS
    )
    assert '"event": "started"' in service.log() or '"event":"started"' in service.log()


def drain_ceiling(log: str) -> int:
    """The drain ceiling the service measured at start-up (its ``batch_sizes`` line)."""
    line = next(line for line in log.splitlines() if '"event": "batch_sizes"' in line)
    return msgspec.json.decode(line)["drain_max_size"]


def test_a_late_backlog_drains_past_max_size_and_live_traffic_returns_to_stream_sizes(
    tmp_path, kafka_bootstrap, topics, group_id
):
    """The defaults on a backlog of 30,000 events: batches grow past MAX_SIZE (16) toward the ceiling
    measured at warm-up; events sent one by one once the backlog is answered ride in stream-sized
    batches again."""
    backlog = metrics_events(30_000, seed=12)
    produce(kafka_bootstrap, topics["in"], backlog)
    service = start_on_topics(tmp_path, kafka_bootstrap, topics, group_id)
    try:
        drained = read_topic(kafka_bootstrap, topics["out"], expected=len(backlog))
        live = metrics_events(40, seed=13)
        # One at a time: nothing is late.
        sent = {coord for event in live for coord in produce(kafka_bootstrap, topics["in"], [event])}
        outputs = read_topic(kafka_bootstrap, topics["out"], expected=len(backlog) + len(live))
    finally:
        code = service.stop()
    assert code == 0, service.log()
    ceiling = drain_ceiling(service.log())
    assert ceiling > 16
    drain_sizes = [msgspec.json.decode(o.value)["batch_size"] for o in drained]
    assert max(drain_sizes) > 16
    assert max(drain_sizes) <= ceiling
    live_sizes = [msgspec.json.decode(o.value)["batch_size"] for o in outputs if source_of(o) in sent]
    assert len(live_sizes) == len(live)
    assert max(live_sizes) <= 16


def test_poison_goes_to_dlq_with_reason_and_original_bytes(tmp_path, kafka_bootstrap, topics, group_id):
    limit = 4096
    good = metrics_events(2000, seed=12)
    kinds = sorted(POISON_KINDS)
    gen = EventGenerator(99)
    poison = []
    for i, event in enumerate(gen.metrics(200)):
        kind = kinds[i % len(kinds)]
        poison.append((kind, make_poison(kind, event, METRIC_FEATURES[0], too_large_bytes=2 * limit)))
    # Interleave: a poison message after every 10 good ones, so bad and good share batches and partitions.
    items: list[tuple[bytes | None, bytes | None]] = []
    expected_reason = {}
    for i, pair in enumerate(good):
        items.append(pair)
        if i % 10 == 9:
            kind, value = poison[i // 10]
            expected_reason[len(items)] = (kind, value)
            items.append((f"poison-{kind}".encode(), value))
    coords = produce(kafka_bootstrap, topics["in"], items)
    service = start_on_topics(tmp_path, kafka_bootstrap, topics, group_id, input__max_value_bytes=limit)
    try:
        outputs = read_topic(kafka_bootstrap, topics["out"], expected=len(good))
        dead = read_topic(kafka_bootstrap, topics["dlq"], expected=len(poison))
    finally:
        assert service.stop() == 0, service.log()

    poison_at = {coords[i]: kv for i, kv in expected_reason.items()}
    assert len(dead) == len(poison)
    for record in dead:
        kind, original = poison_at[dlq_source_of(record)]
        assert record.headers["error.reason"].decode() == POISON_KINDS[kind], kind
        assert record.value == original, kind
        assert record.headers["source.topic"].decode() == topics["in"]
        assert record.headers["error.message"]
    good_coords = set(coords) - set(poison_at)
    assert {source_of(o) for o in outputs} == good_coords
    assert len(outputs) == len(good_coords)
    reasons = Counter(r.headers["error.reason"].decode() for r in dead)
    assert set(reasons) == {r.value for r in POISON_KINDS.values()}
    assert Reason.INFERENCE_ERROR.value not in reasons


def test_log_classifier_labels_log_lines(tmp_path, kafka_bootstrap, topics, group_id):
    events, labels = EventGenerator(5).logs_labeled(400)
    items = [(e["host"].encode(), msgspec.json.encode(e)) for e in events]
    coords = produce(kafka_bootstrap, topics["in"], items)
    service = start_on_topics(tmp_path, kafka_bootstrap, topics, group_id, model="log-classifier")
    try:
        outputs = read_topic(kafka_bootstrap, topics["out"], expected=len(items))
    finally:
        assert service.stop() == 0, service.log()
    truth = {c: LOG_LABELS[label] for c, label in zip(coords, labels, strict=True)}
    assert {source_of(o) for o in outputs} == set(coords)
    predicted = {source_of(o): msgspec.json.decode(o.value)["result"]["label"] for o in outputs}
    accuracy = sum(predicted[c] == truth[c] for c in coords) / len(coords)
    assert accuracy >= 0.85


def _produce_in_background(bootstrap, topic, items, chunks=20):
    """Send ``items`` in chunks from a thread, so the service is mid-stream when the test disturbs it."""
    done = threading.Event()

    def run():
        step = len(items) // chunks
        for i in range(0, len(items), step):
            produce(bootstrap, topic, items[i : i + step])
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done


def _results_so_far(bootstrap, topic) -> int:
    return sum(end_offsets(bootstrap, topic, PARTITIONS).values())


def _start_mid_stream(tmp_path, kafka_bootstrap, topics, group_id, seed):
    """Stream 6000 events in the background and return once the service has produced 500 results."""
    items = metrics_events(6000, seed=seed)
    done = _produce_in_background(kafka_bootstrap, topics["in"], items)
    service = start_on_topics(tmp_path, kafka_bootstrap, topics, group_id, batch__max_size=4)
    wait_for(lambda: _results_so_far(kafka_bootstrap, topics["out"]) >= 500, 60, "first results")
    return items, done, service


def test_sigkill_mid_stream_loses_nothing(tmp_path, kafka_bootstrap, topics, group_id):
    items, done, first = _start_mid_stream(tmp_path, kafka_bootstrap, topics, group_id, seed=13)
    assert first.stop(signal.SIGKILL) == -signal.SIGKILL
    killed_at = _results_so_far(kafka_bootstrap, topics["out"])
    done.wait(60)
    second = start_on_topics(tmp_path, kafka_bootstrap, topics, group_id)
    try:
        outputs = read_topic(kafka_bootstrap, topics["out"], expected=len(items), timeout=90)
    finally:
        assert second.stop() == 0, second.log()
    assert killed_at < len(items), "the kill came after the stream ended; the test proved nothing"
    ends = end_offsets(kafka_bootstrap, topics["in"], PARTITIONS)
    expected = {(p, o) for p, end in ends.items() for o in range(end)}
    by_source = Counter(source_of(o) for o in outputs)
    assert expected - set(by_source) == set(), "lost inputs"
    duplicates = sum(n - 1 for n in by_source.values())
    # Only what was consumed but not yet committed can repeat: at most a few seconds of auto-commit lag.
    assert duplicates <= killed_at


def test_sigterm_commits_what_was_processed_and_restart_has_no_duplicates(
    tmp_path, kafka_bootstrap, topics, group_id
):
    items, done, first = _start_mid_stream(tmp_path, kafka_bootstrap, topics, group_id, seed=14)
    assert first.stop(signal.SIGTERM) == 0, first.log()
    processed = read_topic(
        kafka_bootstrap, topics["out"], expected=_results_so_far(kafka_bootstrap, topics["out"])
    )
    commits = committed(kafka_bootstrap, group_id, topics["in"], PARTITIONS)
    done_by_partition: dict[int, set[int]] = {p: set() for p in range(PARTITIONS)}
    for out in processed:
        partition, offset = source_of(out)
        done_by_partition[partition].add(offset)
    for p, offsets in done_by_partition.items():
        expected_commit = max(offsets) + 1 if offsets else None
        if expected_commit is None:
            assert commits[p] < 0  # nothing consumed there, nothing committed
            continue
        assert commits[p] == expected_commit, f"partition {p}"
        assert offsets == set(range(commits[p])), f"partition {p}: gap below the commit"

    done.wait(60)
    second = start_on_topics(tmp_path, kafka_bootstrap, topics, group_id)
    try:
        outputs = read_topic(kafka_bootstrap, topics["out"], expected=len(items), timeout=90)
    finally:
        assert second.stop() == 0, second.log()
    by_source = Counter(source_of(o) for o in outputs)
    assert len(by_source) == len(items)
    assert max(by_source.values()) == 1, "a clean stop must not cause duplicates"
