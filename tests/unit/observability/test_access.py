"""service/observability/access.py: a refused permission is counted each time, logged once when the refusal
starts and once when it ends, and told to the probes."""

from __future__ import annotations

from structlog.testing import capture_logs

from service.flow.records import Permission
from service.observability.access import AccessReport
from service.observability.health import Health
from service.observability.metrics import Metrics


def test_each_refusal_is_counted_and_a_refusal_is_logged_when_it_starts_and_when_it_ends(clock):
    metrics, health = Metrics(), Health(60, 30, clock=clock)
    report = AccessReport(metrics, health)
    write = Permission("WRITE", "topic", "results")
    with capture_logs() as logs:
        for _ in range(3):
            report(write, True)
        report(Permission("READ", "group", "scorers"), True)
        report(write, False)
        report(write, False)
    count = metrics.registry.get_sample_value
    labels = {"operation": "WRITE", "resource": "topic", "name": "results"}
    assert count("microbatch_authorization_failures_total", labels) == 3
    group = {"operation": "READ", "resource": "group", "name": "scorers"}
    assert count("microbatch_authorization_failures_total", group) == 1
    events = [(e["event"], e["permission"]) for e in logs]
    assert events == [
        ("not_authorised", "WRITE on topic 'results'"),
        ("not_authorised", "READ on group 'scorers'"),
        ("authorised", "WRITE on topic 'results'"),
    ]
    assert "grant WRITE on topic 'results'" in logs[0]["hint"]
    assert list(health.refused) == ["READ on group 'scorers'"]
