"""The Grafana dashboard, the queries in docs/DEPLOY.md and the alert rules against a real Prometheus
(Debian's ``prometheus``) scraping a real service on the real broker, with the compose stack's own
Prometheus configuration: every query is sent as Grafana sends it, and each answer is held to what the
test made happen (events in, results and dead letters out by reason, the batches cut, lag per partition,
commits)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np
import pytest
from confluent_kafka import Consumer

from service.engine.drain import LIMIT as DRAIN_LIMIT
from service.errors import Reason
from service.flow.records import InputRecord
from service.observability.metrics import size_buckets
from service.tools.reader import read_at_least
from service.tools.topics import TopicAdmin
from tests.support import prometheus
from tests.support.broker import make_topic_factory
from tests.support.harness import (
    SERVICE_PARTITIONS,
    end_offsets,
    free_port,
    http_get,
    needs_installed,
    scrape,
    start_on_topics,
    wait_for,
)
from tests.support.prometheus import Prometheus, config_for, dashboard_queries, documented_queries, grafana

EVENTS = 3000
RATE = 600  # events/s: light traffic, so the window and the adaptive sizes cut batches of several sizes
POISON = 0.03
SERVICE = "microbatch"  # the `service` label the compose configuration gives the service's targets
MAX_SIZE = 16
BIN = Path(sys.executable).parent / "microbatch"


PARTITIONS = {"in": SERVICE_PARTITIONS, "out": SERVICE_PARTITIONS, "dlq": 1}


def _count(bootstrap: str, topics: dict[str, str], which: str) -> int:
    return sum(end_offsets(bootstrap, topics[which], PARTITIONS[which]).values())


def _total(bootstrap: str, topics: dict[str, str]) -> int:
    return _count(bootstrap, topics, "out") + _count(bootstrap, topics, "dlq")


def _rebalance(bootstrap: str, group_id: str, topic: str) -> None:
    """A second member joins the group and leaves again: the service hands partitions over, with the
    synchronous commit that ``microbatch_commit_seconds`` times, and gets them back."""
    joiner = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "partition.assignment.strategy": "cooperative-sticky",
            "enable.auto.commit": False,
        }
    )
    try:
        joiner.subscribe([topic])

        def assigned() -> bool:
            joiner.poll(0.2)
            return bool(joiner.assignment())

        wait_for(assigned, 60, "a second member assigned partitions")
    finally:
        joiner.close()


def _near(value: float, expected: float, share: float = 0.1) -> bool:
    """Within ``share`` of ``expected``, or 1 either side of a small count."""
    return abs(value - expected) <= max(share * expected, 1.0)


def _quantile(sizes: Counter[int], q: float) -> int:
    """The smallest batch size at or above quantile ``q`` of the batches: what ceil(histogram_quantile)
    gives when every size has its own bucket."""
    rank, seen = q * sizes.total(), 0
    for size in sorted(sizes):
        seen += sizes[size]
        if seen >= rank:
            return size
    raise AssertionError(sizes)


@dataclass(frozen=True)
class Run:
    """What the test made happen, and what Prometheus answered about it at ``at``."""

    topics: dict[str, str]
    results: list[InputRecord]
    dead: list[InputRecord]
    started: float
    answered: float
    at: float
    window: int
    """Seconds each rate looks back over: the whole run, from before the first event."""
    panels: dict[tuple[str, str], prometheus.Result]
    """Every dashboard query by (panel title, legend)."""
    documented: dict[str, prometheus.Result]
    variable: list[str]
    rules: list[dict]

    def one(self, title: str, legend: str) -> float:
        return self.panels[title, legend].value()

    def per_s(self, count: int) -> float:
        """What a rate over the whole run shows for ``count`` events."""
        return count / self.window


@pytest.fixture(scope="module")
def run(tmp_path_factory, kafka_bootstrap: str, admin: TopicAdmin) -> Iterator[Run]:
    """One service on fresh topics, scraped every second by Prometheus; light traffic with poison; a
    second group member joining and leaving; then every query, once."""
    needs_installed(prometheus.missing())
    tmp_path = tmp_path_factory.mktemp("dashboard")
    factory = make_topic_factory(admin)
    make_topic = next(factory)
    topics = {which: make_topic(partitions, which) for which, partitions in PARTITIONS.items()}
    group_id = f"g-dashboard-{uuid.uuid4().hex[:8]}"
    port = free_port()
    service = start_on_topics(tmp_path, kafka_bootstrap, topics, group_id, metrics__port=port)
    try:
        with Prometheus(config_for(port), tmp_path / "prometheus") as prom:
            wait_for(lambda: http_get(port, "/readyz")[0] == 200, 90, "/readyz 200")
            wait_for(prom.last_scrape_ok, 30, "prometheus scraping the service")
            started = time.time()
            wait_for(lambda: time.time() - started > 2 * prometheus.SCRAPE_S, 5, "a scrape before any event")

            produce = [str(BIN), "produce", "--kind", "metrics", "--topic", topics["in"], "--seed", "17"]
            produce += ["--count", str(EVENTS), "--rate", str(RATE), "--poison-ratio", str(POISON)]
            env = {**os.environ, "MICROBATCH_KAFKA__BOOTSTRAP_SERVERS": kafka_bootstrap}
            subprocess.run(produce, check=True, capture_output=True, env=env, timeout=120)
            wait_for(lambda: _total(kafka_bootstrap, topics) >= EVENTS, 60, "every event answered")
            client = {"bootstrap.servers": kafka_bootstrap}
            results, dead = (
                read_at_least(client, topics[w], _count(kafka_bootstrap, topics, w), timeout_s=30, settle_s=0)
                for w in ("out", "dlq")
            )
            answered = time.time()

            _rebalance(kafka_bootstrap, group_id, topics["in"])

            def settled() -> bool:
                m = scrape(port)
                return (
                    m["microbatch_assigned_partitions"] == SERVICE_PARTITIONS
                    and m["microbatch_commit_seconds_count"] >= 1
                    and m["microbatch_in_flight_events"] == 0
                )

            wait_for(settled, 60, "the partitions back and the handover's commit timed")
            scraped = time.time()
            wait_for(lambda: time.time() - scraped > 2 * prometheus.SCRAPE_S, 5, "two more scrapes")
            at = time.time()
            window = math.ceil(at - started) + 2  # from before the first event: every series starts at 0
            yield Run(
                topics=topics,
                results=results,
                dead=dead,
                started=started,
                answered=answered,
                at=at,
                window=window,
                panels={
                    (p.title, p.legend): prom.query(grafana(p.expr, SERVICE, window), at)
                    for p in dashboard_queries()
                },
                documented={expr: prom.query(expr, at) for expr in documented_queries()},
                variable=prom.api("label/service/values", **{"match[]": "microbatch_ready"}),
                rules=prom.api("rules")["groups"],
            )
    finally:
        assert service.stop() == 0, service.log()
        next(factory, None)  # the topics are deleted


def test_the_dashboard_filter_is_the_label_the_compose_configuration_gives(run):
    assert run.variable == [SERVICE]


def test_counters_show_the_events_in_and_the_results_and_dead_letters_out_by_reason(run):
    """Rates over the whole run: within the extrapolation Prometheus applies at the window's edge."""
    assert len(run.results) + len(run.dead) == EVENTS
    assert 0 < len(run.dead) < EVENTS * POISON * 2
    assert _near(run.one("Events in /s", "in") * run.window, EVENTS)
    assert _near(run.one("Results out /s", "out") * run.window, len(run.results))
    assert _near(run.one("Dead letters /s", "dead letters") * run.window, len(run.dead))
    lines = (("events in", EVENTS), ("results out", len(run.results)), ("dead letters", len(run.dead)))
    for legend, expected in lines:
        assert _near(run.one("Throughput", legend) * run.window, expected), legend
    reasons = Counter(dict(d.headers or []).get("error.reason", b"").decode() for d in run.dead)
    by_reason = run.panels["Dead letters by reason", "{{reason}}"].by("reason")
    for reason, rate in by_reason.items():
        assert _near(rate * run.window, reasons.get(reason, 0)), (reason, rate * run.window, reasons)
    assert set(reasons) <= set(by_reason) and len(by_reason) == len(Reason)  # every one: 0 where none came


def test_batch_size_panels_show_the_sizes_really_cut(run):
    """Every batch's results carry its size: the mean exactly, the percentiles as sizes cut."""
    by_size = Counter(msgspec.json.decode(r.value or b"")["batch_size"] for r in run.results)
    assert all(n % size == 0 for size, n in by_size.items()), by_size  # each batch answered whole
    batches = Counter({size: n // size for size, n in by_size.items()})
    assert len(batches) > 1, batches
    assert run.one("Batch size", "mean") == pytest.approx(by_size.total() / batches.total(), rel=1e-6)
    buckets = size_buckets(MAX_SIZE)
    for legend, q in (("p50", 0.5), ("p95", 0.95)):
        size, shown = _quantile(batches, q), run.one("Batch size", legend)
        if size <= MAX_SIZE:  # a bucket of its own: exact
            assert shown == size, (legend, shown, batches)
        else:  # a batch the stretch made larger: within its power of two
            upper = next(b for b in buckets if b >= size)
            assert buckets[buckets.index(upper) - 1] < shown <= upper, (legend, shown, batches)
    assert 4 <= run.one("Batch size", "target") <= DRAIN_LIMIT


def test_latency_and_time_panels_are_seconds_of_the_right_magnitude(run):
    p50, p95, p99 = (run.one("End-to-end latency", q) for q in ("p50", "p95", "p99"))
    assert 0 < p50 <= p95 <= p99 < 5
    latencies_s = [
        ((r.timestamp_ms or 0) - msgspec.json.decode(r.value or b"")["timestamps"]["event_ms"]) / 1000
        for r in run.results
    ]
    measured = float(np.percentile(latencies_s, 50))
    assert measured / 3 <= p50 <= measured * 3, (p50, measured)
    for title in ("Inference time per batch", "Queue wait"):
        low, high = run.one(title, "p50"), run.one(title, "p99")
        assert 0 <= low <= high < 1, (title, low, high)
    assert 0 < run.one("Commit time", "p50") <= run.one("Commit time", "p99") < 10


def test_state_panels_show_every_partition_read_to_its_end_and_nothing_held(run):
    lag = run.panels["Consumer lag by partition", "{{topic}}/{{partition}}"]
    assert sorted(labels["partition"] for labels, _ in lag.series) == [str(p) for p in range(4)]
    assert {labels["topic"] for labels, _ in lag.series} == {run.topics["in"]}
    assert all(value == 0 for _, value in lag.series)
    assert run.one("Consumer lag", "lag") == 0
    assert run.one("Partitions", "assigned") == SERVICE_PARTITIONS
    assert run.one("Partitions", "paused") == 0
    assert run.one("In-flight events", "{{service}} {{instance}}") == 0
    assert run.one("Ready replicas", "ready") == 1
    (model,) = run.panels["Model and provider", "{{name}} v{{version}} {{provider}}"].series
    assert model == ({"name": "metrics-anomaly", "version": "1", "provider": "CPUExecutionProvider"}, 1)


def test_padding_gpu_and_transaction_panels_have_no_data_where_they_do_not_apply(run):
    """metrics-anomaly does not pad, and this replica runs on CPU and at-least-once: "no data", not 0."""
    assert run.panels["Padding efficiency", "{{service}} {{instance}}"].series == []
    for title, legend in (
        ("GPU memory", "used {{instance}}"),
        ("GPU memory", "total {{instance}}"),
        ("GPU utilisation", "{{service}} {{instance}}"),
        ("Transactions (exactly-once)", "{{outcome}}"),
        ("Transaction commit time and age", "open for"),
    ):
        assert run.panels[title, legend].series == [], title


def test_commit_panels_show_the_auto_commits_and_none_failed(run):
    """Auto-commits about once a second while events flowed (librdkafka skips an interval with nothing
    new stored), plus the handover's synchronous one; none failed; the last one recent."""
    commits = run.one("Offset commits", "commits") * run.window
    assert (run.answered - run.started) / 3 <= commits <= run.window + 3, commits
    assert run.one("Offset commits", "failed") == 0
    assert run.one("Commit failures and batch splits", "commit failures") == 0
    assert run.one("Commit failures and batch splits", "batch splits") == 0
    assert 0 <= run.one("Since last commit", "since last commit") <= run.at - run.answered + 3


def test_every_documented_query_answers_and_only_padding_is_empty_for_this_model(run):
    assert run.documented
    for expr, result in run.documented.items():
        pads = "tokens_total" in expr or "padding" in expr
        assert (result.series == []) == pads, (expr, result.series)


def test_the_alert_rules_the_compose_prometheus_loads_all_evaluate(run):
    assert run.rules, "no rule groups loaded"
    for group in run.rules:
        for rule in group["rules"]:
            assert rule["health"] == "ok", rule
