"""Logs as real shippers write them, through the real service on the real broker: rsyslog's ``omkafka``
(a private ``rsyslogd`` fed by ``logger``), and OTLP logs requests as the OpenTelemetry Collector's Kafka
exporter writes them (built with the official ``opentelemetry-proto`` classes), in both encodings.

Agreement is with the labels ``log-classifier`` gives the same texts as generator JSON
(``tests/support/labels.py``)."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter

import msgspec
import pytest

from service.formats import load_format
from service.tools.generate import EventGenerator
from service.tools.generate.otlp import encode, logs_request
from service.tools.verify import verify
from tests.support import rsyslog
from tests.support.harness import needs_installed, produce, read_topic, start_on_topics
from tests.support.labels import agreement, reference_labels

AGREEMENT = 0.95
RECORDS_PER_REQUEST = 25


def service(tmp_path, bootstrap, topics, group_id, **settings):
    return start_on_topics(tmp_path, bootstrap, topics, group_id, model="log-classifier", **settings)


# -- OTLP logs, one result per log record ---------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["proto", "json"])
def test_otlp_logs_one_result_per_record_with_its_index(
    tmp_path, kafka_bootstrap, topics, group_id, encoding
):
    events = EventGenerator(11).logs(40 * RECORDS_PER_REQUEST)
    requests = [events[i : i + RECORDS_PER_REQUEST] for i in range(0, len(events), RECORDS_PER_REQUEST)]
    bad = {(r, 7) for r in range(0, len(requests), 8)}  # one record in every eighth request: an empty body
    values = []
    for r, chunk in enumerate(requests):
        sent = [dict(e, message="") if (r, i) in bad else e for i, e in enumerate(chunk)]
        values.append(encode(logs_request(sent, seed=r), encoding))
    unreadable = b"\x0a\xff\xff\xff" if encoding == "proto" else b"2026-12-01 not json"
    coords = produce(kafka_bootstrap, topics["in"], [(None, v) for v in [*values, unreadable]])
    fmt = f"otlp-{encoding}"
    run = service(
        tmp_path,
        kafka_bootstrap,
        topics,
        group_id,
        input__format=fmt,
        output__include_fields="resource.service.name,severity_text,trace_id",
    )
    good = len(events) - len(bad)
    try:
        results = read_topic(kafka_bootstrap, topics["out"], expected=good)
        dead = read_topic(kafka_bootstrap, topics["dlq"], expected=len(bad) + 1)
    finally:
        assert run.stop() == 0, run.log()

    answered = {}
    for out in results:
        value = msgspec.json.decode(out.value)
        source = value["source"]
        key = (source["partition"], source["offset"], source["index"])
        answered[key] = value
    expected = {
        (*coords[r], i): event
        for r, chunk in enumerate(requests)
        for i, event in enumerate(chunk)
        if (r, i) not in bad
    }
    assert len(results) == good, "a duplicate or a missing result"
    assert set(answered) == set(expected)
    for key, value in answered.items():
        assert value["fields"]["resource.service.name"] == expected[key]["service"]
        assert value["fields"]["severity_text"] == expected[key]["level"]
        assert len(value["fields"]["trace_id"]) == 32
    reference = reference_labels([e["message"] for e in expected.values()])
    pairs = [(expected[k]["message"], v["result"]["label"]) for k, v in answered.items()]
    share = agreement(pairs, reference)
    print(f"{fmt}: {len(results)} results, {len(dead)} dead letters, agreement {share:.3f}")
    assert share >= AGREEMENT

    by_index = {d.headers.get("source.index") for d in dead}
    reasons = Counter(d.headers["error.reason"].decode() for d in dead)
    assert reasons == {
        "invalid_event": len(bad),
        f"invalid_{'protobuf' if encoding == 'proto' else 'json'}": 1,
    }
    assert by_index == {b"7", None}  # the bad records by position; the unreadable message as a whole
    for letter in dead:
        source = (int(letter.headers["source.partition"]), int(letter.headers["source.offset"]))
        assert letter.value == [*values, unreadable][coords.index(source)]  # the whole original message

    report = verify(
        {"bootstrap.servers": kafka_bootstrap},
        topics["in"],
        topics["out"],
        topics["dlq"],
        fmt=load_format(fmt),
    )
    assert report.summary()["items"] == len(events) + 1
    assert report.ok, report.summary()
    assert report.summary()["duplicates"] == 0


# -- rsyslog's omkafka ----------------------------------------------------------------------------------


def _lines(n: int, seed: int) -> list[str]:
    return [e["message"] for e in EventGenerator(seed).logs(n)]


def _rsyslog_run(tmp_path, kafka_bootstrap, topic_factory, group_id, template, lines, **settings):
    """Lines through logger -> rsyslogd -> omkafka -> the service; its results, in input-offset order.
    (With the JSON template, the line is inside a JSON string, where rsyslog writes ``/`` as ``\\/``.)"""
    topics = {
        "in": topic_factory(partitions=1, prefix="rsyslog"),
        "out": topic_factory(partitions=1, prefix="out"),
        "dlq": topic_factory(partitions=1, prefix="dlq"),
    }
    with rsyslog.Rsyslog(kafka_bootstrap, topics["in"], tmp_path / "rsyslog", template) as daemon:
        daemon.send(lines, tag="checkout", priority="local3.warning", pid=4242)
        inputs = read_topic(kafka_bootstrap, topics["in"], expected=len(lines))
    assert len(inputs) == len(lines), daemon.diagnostics()
    # omkafka writes to partition 0 in the order logger sent: offset i is line i.
    for out, line in zip(sorted(inputs, key=lambda o: o.offset), lines, strict=True):
        text = msgspec.json.decode(out.value)["message"] if template else out.value.decode()
        assert line in text, (out.value, line)
    run = service(tmp_path, kafka_bootstrap, topics, group_id, **settings)
    try:
        results = read_topic(kafka_bootstrap, topics["out"], expected=len(lines))
        dead = read_topic(kafka_bootstrap, topics["dlq"], expected=0, timeout=1)
    finally:
        assert run.stop() == 0, run.log()
    assert dead == [], [d.headers for d in dead]
    decoded = [msgspec.json.decode(r.value) for r in results]
    return sorted(decoded, key=lambda v: v["source"]["offset"]), [o.value for o in inputs]


def test_rsyslog_default_template_with_the_syslog_format_and_no_other_setting(
    tmp_path, kafka_bootstrap, topic_factory, group_id
):
    needs_installed(rsyslog.missing())
    lines = _lines(300, seed=21)
    results, values = _rsyslog_run(
        tmp_path, kafka_bootstrap, topic_factory, group_id, None, lines, input__format="syslog"
    )
    assert values[0].startswith(b"20") and b" checkout[4242]: " in values[0]  # RSYSLOG_FileFormat
    assert [r["source"]["offset"] for r in results] == list(range(len(lines)))  # every line, once
    assert all("index" not in r["source"] for r in results)
    pairs = [(line, r["result"]["label"]) for line, r in zip(lines, results, strict=True)]
    share = agreement(pairs, reference_labels(lines))
    print(f"rsyslog: {len(results)} results, agreement {share:.3f}")
    assert share >= AGREEMENT


def test_rsyslog_json_template_with_the_json_format_and_included_fields(
    tmp_path, kafka_bootstrap, topic_factory, group_id
):
    needs_installed(rsyslog.missing())
    lines = _lines(200, seed=22)
    results, values = _rsyslog_run(
        tmp_path,
        kafka_bootstrap,
        topic_factory,
        group_id,
        rsyslog.JSON_TEMPLATE,
        lines,
        output__include_fields="host,app,severity,facility",
    )
    assert msgspec.json.decode(values[0])["app"] == "checkout"
    assert [r["source"]["offset"] for r in results] == list(range(len(lines)))
    for r in results:
        assert r["fields"]["app"] == "checkout"
        assert r["fields"]["severity"] == "warning"
        assert r["fields"]["facility"] == "local3"
        assert r["fields"]["host"]
    pairs = [(line, r["result"]["label"]) for line, r in zip(lines, results, strict=True)]
    share = agreement(pairs, reference_labels(lines))
    print(f"rsyslog: {len(results)} results, agreement {share:.3f}")
    assert share >= AGREEMENT


# -- plain producers ------------------------------------------------------------------------------------

KCAT = shutil.which("kcat")


def test_kcat_lines_with_the_text_format(tmp_path, kafka_bootstrap, topic_factory, group_id):
    needs_installed(None if KCAT else "kcat not found: apt-get install kcat")
    topics = {name: topic_factory(partitions=1, prefix=name) for name in ("in", "out", "dlq")}
    lines = _lines(150, seed=23)
    # kcat -P sends one message per line of its input, without the newline.
    subprocess.run(
        [KCAT, "-P", "-b", kafka_bootstrap, "-t", topics["in"]],
        input="".join(f"{line}\n" for line in lines).encode(),
        check=True,
        timeout=60,
    )
    run = service(tmp_path, kafka_bootstrap, topics, group_id, input__format="text")
    try:
        results = read_topic(kafka_bootstrap, topics["out"], expected=len(lines))
    finally:
        assert run.stop() == 0, run.log()
    decoded = sorted((msgspec.json.decode(r.value) for r in results), key=lambda v: v["source"]["offset"])
    assert [v["source"]["offset"] for v in decoded] == list(range(len(lines)))
    pairs = [(line, v["result"]["label"]) for line, v in zip(lines, decoded, strict=True)]
    share = agreement(pairs, reference_labels(lines))
    print(f"kcat: {len(results)} results, agreement {share:.3f}")
    assert share >= AGREEMENT
