"""service/observability/server.py: the three paths over real HTTP on a free local port."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from service.observability.health import Health
from service.observability.metrics import Metrics
from service.observability.server import MetricsServer


@pytest.fixture
def served(clock):
    metrics = Metrics()
    health = Health(liveness_timeout_s=60, broker_timeout_s=30, clock=clock)
    server = MetricsServer("127.0.0.1", 0, metrics.registry, health)
    yield server, metrics, health
    server.close()


def get(server: MetricsServer, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_metrics_are_served_in_the_prometheus_text_format(served):
    server, metrics, _ = served
    metrics.consumed.inc(41)
    status, body = get(server, "/metrics")
    assert status == 200
    assert "# TYPE microbatch_events_consumed_total counter" in body
    assert "microbatch_events_consumed_total 41.0" in body


def test_probes_answer_200_or_503_with_the_reason(served, clock):
    server, _, health = served
    assert get(server, "/healthz") == (200, "starting\n")
    assert get(server, "/readyz") == (503, "loading and warming up the model\n")
    health.warmed_up = True
    health.tick()
    assert get(server, "/readyz")[0] == 200
    clock.advance(61)
    status, body = get(server, "/healthz")
    assert status == 503 and "has not come round" in body


def test_unknown_paths_are_404(served):
    server, _, _ = served
    assert get(server, "/")[0] == 404


def test_a_taken_port_raises():
    first = MetricsServer("127.0.0.1", 0, Metrics().registry, Health(60, 30))
    try:
        with pytest.raises(OSError):
            MetricsServer("127.0.0.1", first.port, Metrics().registry, Health(60, 30))
    finally:
        first.close()
