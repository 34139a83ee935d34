"""SIGKILL while fan-out messages are in flight: an OTLP logs request holds many log records, each answered
by its own result or dead letter, and its offset may be committed only once all of them are acknowledged.
A kill between the first and the last answer of a request must re-deliver the request (duplicates), never
leave a record unanswered."""

from __future__ import annotations

import random

from service.formats import load_format
from service.tools.generate import EventGenerator
from service.tools.generate.otlp import encode, logs_request
from service.tools.verify import format_report, verify
from tests.support.fleet import drain, fleet, kill_while_answering
from tests.support.harness import end_offsets, produce

PARTITIONS = 3
# About 20,000 answers: four kills wait for up to 4,800 answers, and each may re-deliver up to MAX_IN_FLIGHT
# items as duplicates (which count as answers too), so the backlog must outlast 12,800 of them.
REQUESTS = 720
MAX_RECORDS = 60  # records per request: 0..MAX_RECORDS, so one request spans several batches
INSTANCES = 2
KILLS = 4
SESSION_TIMEOUT_MS = 6000
MAX_IN_FLIGHT = 2000  # items: a few requests at a time, so a kill always finds some half answered
PROGRESS_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 180.0


def _requests(rng: random.Random) -> tuple[list[bytes], int, int]:
    """The input: requests of 0..MAX_RECORDS records, one record in ten with an empty body (a dead letter
    of that record alone). A request without records encodes to zero bytes: one dead letter
    (``empty_value``) for the whole message. Returns the values, the answers due and the dead letters due."""
    generator = EventGenerator(31)
    values, answers, bad = [], 0, 0
    for r in range(REQUESTS):
        events = generator.logs(rng.randint(0, MAX_RECORDS)) if r % 40 else []
        for event in events:
            if rng.random() < 0.1:
                event["message"] = ""
                bad += 1
        answers += len(events) or 1
        bad += 0 if events else 1
        values.append(encode(logs_request(events, seed=r), "proto"))
    return values, answers, bad


def test_sigkill_with_fan_out_messages_in_flight_loses_no_record(
    tmp_path, kafka_bootstrap, topic_factory, group_id
):
    rng = random.Random(7)
    topics = {
        "in": topic_factory(partitions=PARTITIONS, prefix="otlp"),
        "out": topic_factory(partitions=PARTITIONS, prefix="out"),
        "dlq": topic_factory(partitions=1, prefix="dlq"),
    }
    values, answers, bad = _requests(rng)
    # Keyed by node, as the Collector's exporter does with partition_logs_by_resource_attributes, so every
    # partition, and so every instance, has requests to answer when the kills come.
    produce(kafka_bootstrap, topics["in"], [(f"node-{r % 9}".encode(), v) for r, v in enumerate(values)])
    settings = {
        "kafka__bootstrap_servers": kafka_bootstrap,
        "kafka__group_id": group_id,
        "kafka__session_timeout_ms": str(SESSION_TIMEOUT_MS),
        "input__topics": topics["in"],
        "input__format": "otlp-proto",
        "input__max_in_flight": str(MAX_IN_FLIGHT),
        "output__topic": topics["out"],
        "dlq__topic": topics["dlq"],
        "model__name": "log-classifier",
    }

    def answered() -> int:
        return sum(end_offsets(kafka_bootstrap, topics["out"], PARTITIONS).values())

    # Without keys (the Collector sets none) the producer may leave a partition empty: nothing to commit.
    with fleet(tmp_path, topics["in"], PARTITIONS, **settings) as f:
        for _ in range(INSTANCES):
            f.start()
        kill_while_answering(f, rng, KILLS, answered, (300, 1200), answers - bad, PROGRESS_TIMEOUT_S)
        drain(f, kafka_bootstrap, group_id, topics["in"], PARTITIONS, DRAIN_TIMEOUT_S)

    report = verify(
        {"bootstrap.servers": kafka_bootstrap},
        topics["in"],
        topics["out"],
        topics["dlq"],
        fmt=load_format("otlp-proto"),
    )
    print(format_report(report))
    summary = report.summary()
    assert summary["inputs"] == REQUESTS
    assert summary["items"] == answers
    assert summary["lost"] == 0, [(p.partition, p.lost_offsets) for p in report.partitions]
    assert summary["dead_letters"] >= bad
    assert summary["results"] + summary["dead_letters"] - summary["duplicates"] == answers
