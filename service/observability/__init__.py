"""Observability: the stats line, Prometheus metrics, the health probes and their HTTP port, and logging.

The loop reports to one facade, :class:`Telemetry`, which feeds the rest; the clients report permissions the
cluster refuses to :class:`AccessReport`.
"""

from service.observability.access import AccessReport
from service.observability.health import Health
from service.observability.metrics import Metrics
from service.observability.server import MetricsServer
from service.observability.stats import Stats
from service.observability.telemetry import Telemetry

__all__ = ["AccessReport", "Health", "Metrics", "MetricsServer", "Stats", "Telemetry"]
