"""SIGKILL while rows are being assembled: each host's row of an interval is fed by some thirty collectd
messages, and none of their offsets may be committed before the row's result is acknowledged. Kills (and
the rebalances they cause) in the middle of rows must re-deliver them whole, never leave a message
unanswered."""

from __future__ import annotations

import random
from collections import defaultdict

import msgspec

from service.tools.generate import HOST_FEATURES, host_rows
from service.tools.generate.agents import render
from service.tools.rowcheck import check_rows, expected_rows, model_metadata
from tests.support.fleet import drain, fleet, kill_while_answering
from tests.support.harness import end_offsets, produce, read_topic

PARTITIONS = 3
HOSTS = 12
INTERVALS = 60
INTERVAL_S = 10.0
INSTANCES = 2
KILLS = 4
SESSION_TIMEOUT_MS = 6000
MAX_IN_FLIGHT = 2000  # messages: a few intervals of every host at a time, so kills find rows half fed
PROGRESS_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 180.0


def _messages() -> list[tuple[bytes, bytes]]:
    """collectd's messages for every host, interval after interval (each host's burst in order), keyed by
    host as the docs ask (so a host's rows stay in one partition, and one replica)."""
    bursts: dict[tuple[int, str], list[bytes]] = defaultdict(list)
    for series in host_rows(41, hosts=HOSTS, interval_s=INTERVAL_S, count=INTERVALS):
        for value in render(series, "collectd"):
            time = msgspec.json.decode(value)[0]["time"]
            bursts[(round(time / INTERVAL_S), series.spec.name)].append(value)
    return [
        (host.encode(), value) for (_interval, host), values in sorted(bursts.items()) for value in values
    ]


def test_sigkill_during_assembly_loses_no_message(tmp_path, kafka_bootstrap, topic_factory, group_id):
    rng = random.Random(12)
    topics = {
        "in": topic_factory(partitions=PARTITIONS, prefix="collectd"),
        "out": topic_factory(partitions=PARTITIONS, prefix="out"),
        "dlq": topic_factory(partitions=1, prefix="dlq"),
    }
    messages = _messages()
    coords = produce(kafka_bootstrap, topics["in"], messages)
    required = msgspec.json.decode(model_metadata("host-anomaly")["microbatch.required"])
    rows = expected_rows(
        zip(coords, (v for _k, v in messages), strict=True),
        "collectd-json",
        HOST_FEATURES,
        INTERVAL_S,
        required,
    )
    assert len(rows) >= HOSTS * (INTERVALS - 1)  # the first interval has no CPU yet: incomplete
    settings = {
        "kafka__bootstrap_servers": kafka_bootstrap,
        "kafka__group_id": group_id,
        "kafka__session_timeout_ms": str(SESSION_TIMEOUT_MS),
        "input__topics": topics["in"],
        "input__format": "collectd-json",
        "input__max_in_flight": str(MAX_IN_FLIGHT),
        "output__topic": topics["out"],
        "dlq__topic": topics["dlq"],
        "model__name": "host-anomaly",
        "assemble__interval_s": str(INTERVAL_S),
        "assemble__max_wait_s": "5",
    }

    def answered() -> int:
        return sum(end_offsets(kafka_bootstrap, topics["out"], PARTITIONS).values())

    with fleet(tmp_path, topics["in"], PARTITIONS, **settings) as f:
        for _ in range(INSTANCES):
            f.start()
        kill_while_answering(f, rng, KILLS, answered, (5, 25), len(rows), PROGRESS_TIMEOUT_S)
        drain(f, kafka_bootstrap, group_id, topics["in"], PARTITIONS, DRAIN_TIMEOUT_S)

    results = [msgspec.json.decode(o.value) for o in read_topic(kafka_bootstrap, topics["out"], len(rows))]
    dead = read_topic(kafka_bootstrap, topics["dlq"], expected=0, timeout=2)
    report = check_rows(rows, results, topics["in"])
    print(f"{len(messages)} messages, {report}")
    assert dead == []
    assert report.ok, report
    assert report.whole == len(rows), "every row must come out whole at least once"
