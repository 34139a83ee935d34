"""Host metrics as real agents ship them, through the real service on the real broker, assembled into rows
per host and interval and scored by ``host-anomaly``: a private ``collectd`` (Debian's collectd-core) with its
default plugins reading this machine, and Telegraf's and the OpenTelemetry Collector's messages of generated
hosts, a normal one and one with incidents."""

from __future__ import annotations

from collections import Counter

import msgspec
import pytest

from service.tools import collectd
from service.tools.generate import HOST_FEATURES, HostSpec, Incident, host_rows
from service.tools.generate.agents import render
from service.tools.rowcheck import check_rows, expected_rows, features_of, listed, model_metadata
from tests.support.harness import end_offsets, needs_installed, produce, read_topic, start_on_topics, wait_for

MAX_FLAGGED = 0.10  # the bar for an idle machine; the aim is 5%
COLLECTD_ROWS = 25  # intervals of 1 s: rows scored while collectd runs


def _results(outputs) -> dict[tuple[str, int], dict]:
    """Row results by (key, interval time); exactly one per row (checked)."""
    values = [msgspec.json.decode(o.value) for o in outputs]
    rows = Counter((v["row"]["key"], v["row"]["time_ms"]) for v in values)
    assert all(n == 1 for n in rows.values()), f"a row answered twice: {rows.most_common(3)}"
    return {(v["row"]["key"], v["row"]["time_ms"]): v for v in values}


def _total(bootstrap: str, topic: str) -> int:
    return sum(end_offsets(bootstrap, topic, 4).values())


def test_collectd_on_this_machine_gives_scored_rows_and_few_flags(
    tmp_path, kafka_bootstrap, topics, group_id
):
    needs_installed(collectd.missing())
    run = start_on_topics(
        tmp_path,
        kafka_bootstrap,
        topics,
        group_id,
        model="host-anomaly",
        input__format="collectd-json",
        assemble__interval_s="1",
        assemble__max_wait_s="3",
    )
    host = "ci-host"
    daemon = collectd.Collectd(
        kafka_bootstrap, topics["in"], tmp_path / "collectd", interval=1.0, hostname=host
    )
    try:
        # collectd's own defaults: every CPU by state in jiffies, write_kafka's random keys and StoreRates.
        with daemon:
            wait_for(
                lambda: _total(kafka_bootstrap, topics["out"]) >= COLLECTD_ROWS,
                COLLECTD_ROWS * 3,
                f"{COLLECTD_ROWS} rows of collectd's intervals scored",
            )
        inputs = read_topic(kafka_bootstrap, topics["in"], expected=_total(kafka_bootstrap, topics["in"]))
        features = features_of("host-anomaly")
        coords = [((i.partition, i.offset), i.value) for i in inputs]
        rows = expected_rows(coords, "collectd-json", features, 1.0)
        outputs = read_topic(kafka_bootstrap, topics["out"], expected=len(rows) - 2, timeout=30)
        dead = read_topic(kafka_bootstrap, topics["dlq"], expected=0, timeout=2)
    finally:
        assert run.stop() == 0, run.log()

    results = _results(outputs)
    assert dead == [], [d.headers for d in dead]
    # The first interval has no CPU rates yet (collectd needs two reads): closed incomplete, not scored.
    assert len(results) >= len(rows) - 3, f"{len(results)} rows scored of {len(rows)}\n{run.log()}"
    for key, value in results.items():
        assert key[0] == host
        assert list(value["row"]["features"]) == features
        # Every message whose points the row reads is listed: answered by it, committed after it.
        assert listed(value, topics["in"]) == rows[key]
    flagged = [v["row"]["features"] for v in results.values() if v["result"]["is_anomaly"]]
    filled = Counter(f for v in results.values() for f in v["row"]["filled"])
    print(f"collectd: {len(inputs)} messages, {len(results)} rows, {len(flagged)} flagged, {dict(filled)}")
    assert len(flagged) <= MAX_FLAGGED * len(results), flagged


# -- Telegraf and the OpenTelemetry Collector: generated hosts, normal and with incidents ------------------

START = 1_796_000_000.0
INTERVAL_S = 10.0
INTERVALS = 48
MIN_RECALL = 0.8  # per incident kind, over its labelled rows (the model's held-out recall: docs/MODELS.md)
HOSTS = (
    HostSpec("web", cpus=4, regime="daily"),
    HostSpec("idle", cpus=2, memory_bytes=24 * 2**30, regime="idle"),
    HostSpec("mem", cpus=8, regime="busy"),
    HostSpec("net", cpus=4, regime="daily"),
    HostSpec("disk", cpus=4, regime="batch"),
    HostSpec("cpu", cpus=8, regime="daily"),
)
INCIDENTS = (
    Incident("mem", "memory_leak", start=START + 100, duration_s=300),
    Incident("net", "interface_errors", start=START + 150, duration_s=200),
    Incident("disk", "disk_filling", start=START + 100, duration_s=300),
    Incident("cpu", "cpu_saturation", start=START + 100, duration_s=300),
)


@pytest.mark.parametrize("agent", ["influx", "telegraf-json", "otlp-proto", "otlp-json"])
def test_agents_messages_of_normal_hosts_score_normal_and_incidents_are_flagged(
    tmp_path, kafka_bootstrap, topics, group_id, agent
):
    series = host_rows(21, list(HOSTS), START, INTERVAL_S, INTERVALS, list(INCIDENTS))
    messages = [(s.spec.name.encode(), value) for s in series for value in render(s, agent)]
    coords = produce(kafka_bootstrap, topics["in"], messages)
    required = msgspec.json.decode(model_metadata("host-anomaly")["microbatch.required"])
    inputs = zip(coords, (v for _k, v in messages), strict=True)
    rows = expected_rows(inputs, agent, HOST_FEATURES, INTERVAL_S, required)
    run = start_on_topics(
        tmp_path,
        kafka_bootstrap,
        topics,
        group_id,
        model="host-anomaly",
        input__format=agent,
        assemble__interval_s=str(INTERVAL_S),
    )
    try:
        outputs = read_topic(kafka_bootstrap, topics["out"], expected=len(rows))
        dead = read_topic(kafka_bootstrap, topics["dlq"], expected=0, timeout=2)
    finally:
        assert run.stop() == 0, run.log()

    results = list(_results(outputs).values())
    report = check_rows(rows, results, topics["in"])
    assert dead == [] and report.ok and report.whole == len(rows), report
    truth = {
        (s.spec.name, round(t * 1000)): None if window and label == "normal" else label
        for s in series
        for t, label, window in zip(s.times.tolist(), s.label_names(), s.in_window.tolist(), strict=True)
    }
    flagged: Counter[str | None] = Counter()
    seen: Counter[str | None] = Counter()
    for value in results:
        label = truth[(value["row"]["key"], value["row"]["time_ms"])]
        seen[label] += 1
        flagged[label] += bool(value["result"]["is_anomaly"])
    print(
        f"{agent}: {len(results)} rows; flagged by label "
        + str({k: f"{flagged[k]}/{n}" for k, n in seen.items()})
    )
    assert flagged["normal"] <= MAX_FLAGGED * seen["normal"]
    for incident in INCIDENTS:
        assert seen[incident.kind] and flagged[incident.kind] >= MIN_RECALL * seen[incident.kind], incident
