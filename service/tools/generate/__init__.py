"""Synthetic monitoring and log events: what the reference models are trained on and the load generator sends.

Pure module (stdlib + numpy). Everything is drawn from one seed, so the same seed gives the same events, and
different seeds give independent samples of the same world: the fleet (services, hosts, their baselines) is
fixed, only the traffic and the variable parts of messages change. That is what lets a model trained on one
seed be evaluated on another.

Metrics events are JSON-able dicts ``{"ts", "host", "service", <METRIC_FEATURES>...}``. Normal behaviour is
driven by one latent load per host (per-service baseline x diurnal cycle x host weight x noise) from which the
features follow with realistic couplings (cpu ~ load, latency grows with utilisation, open connections follow
Little's law, bytes follow requests, gc pauses follow memory). Anomalies come in :data:`ANOMALY_KINDS`: loud
ones (cpu spike, memory leak, latency blowup with error burst, network saturation) and subtle ones that stay
inside every feature's normal range and only break the correlations (cpu runaway, connection leak, egress
drop).

Log events are ``{"ts", "host", "service", "level", "message"}``, labelled by :data:`LOG_LABELS`. Messages
come from many templates per class with variable parts and vocabulary shared between classes; the level is
drawn per class with overlapping distributions so it does not determine the label.

Host rows (:func:`host_rows`, :func:`host_dataset`, ``_hosts.py``) are what host metrics agents report about
one host in one interval, in :data:`HOST_FEATURES` (OpenTelemetry semantic-convention names), from hosts of
several sizes and regimes with injected incidents (:data:`INCIDENT_KINDS`); :mod:`.agents` renders them as
collectd, Telegraf and OTLP hostmetrics messages.
"""

from __future__ import annotations

import random

import numpy as np

from service.tools.generate._hosts import (
    CI_MACHINE,
    HOST_FEATURES,
    HOST_REGIMES,
    HOST_REQUIRED,
    IDLE_MACHINE,
    INCIDENT_KINDS,
    HostDataset,
    HostSeries,
    HostSpec,
    Incident,
    host_dataset,
    host_rows,
)
from service.tools.generate._logs import LABEL_MIX, LEVEL_CDF, TEMPLATES, context_tail
from service.tools.generate._metrics import inject_anomalies, metrics_events, normal_metrics
from service.tools.generate._world import (
    ANOMALY_KINDS,
    DEFAULT_START_MS,
    FLEET,
    LOG_LABELS,
    LOG_LEVELS,
    LOGS_INTERVAL_MS,
    METRIC_FEATURES,
    METRICS_INTERVAL_MS,
)

__all__ = [
    "ANOMALY_KINDS",
    "CI_MACHINE",
    "DEFAULT_START_MS",
    "HOST_FEATURES",
    "HOST_REGIMES",
    "HOST_REQUIRED",
    "IDLE_MACHINE",
    "INCIDENT_KINDS",
    "LOG_LABELS",
    "LOG_LEVELS",
    "METRIC_FEATURES",
    "EventGenerator",
    "HostDataset",
    "HostSeries",
    "HostSpec",
    "Incident",
    "host_dataset",
    "host_rows",
]


class EventGenerator:
    """Seeded source of metrics and log events.

    Each call continues the generator's simulated clocks and random stream, so consecutive calls give new
    events with increasing timestamps. Two generators built with the same ``seed`` (and ``start_ms``) produce
    identical sequences of calls' results; ``seed=None`` draws fresh entropy.
    """

    def __init__(self, seed: int | None = None, *, start_ms: int = DEFAULT_START_MS) -> None:
        self._rng = np.random.default_rng(seed)
        # Python's Random is ~10x cheaper per call than numpy's scalar draws; used to fill message slots.
        self._py = random.Random(int(self._rng.integers(2**63)))
        self._metrics_clock = float(start_ms)
        self._logs_clock = float(start_ms)

    # ------------------------------------------------------------------ metrics

    def metrics(self, n: int, anomaly_ratio: float = 0.02) -> list[dict]:
        """``n`` metrics events; each is an anomaly independently with probability ``anomaly_ratio``."""
        return self.metrics_with_kinds(n, anomaly_ratio)[0]

    def metrics_labeled(self, n: int, anomaly_ratio: float) -> tuple[list[dict], np.ndarray]:
        """Like :meth:`metrics`, plus a bool array, True where the event is an anomaly."""
        events, kinds = self.metrics_with_kinds(n, anomaly_ratio)
        return events, kinds > 0

    def metrics_with_kinds(self, n: int, anomaly_ratio: float) -> tuple[list[dict], np.ndarray]:
        """Like :meth:`metrics`, plus an int array of indices into :data:`ANOMALY_KINDS` (0 = normal)."""
        if not 0.0 <= anomaly_ratio <= 1.0:
            raise ValueError(f"anomaly_ratio must be in [0, 1], got {anomaly_ratio}")
        rng = self._rng
        ts = self._advance("_metrics_clock", n, METRICS_INTERVAL_MS)
        host = rng.integers(len(FLEET.hosts), size=n)
        values = normal_metrics(rng, ts, host)
        kinds = np.zeros(n, dtype=np.int64)
        is_anomaly = rng.random(n) < anomaly_ratio
        n_anom = int(is_anomaly.sum())
        if n_anom:
            # Loud kinds are more common in practice, but subtle ones are a good share of what matters.
            weights = np.array([0.17, 0.15, 0.17, 0.13, 0.14, 0.12, 0.12])
            kinds[is_anomaly] = rng.choice(np.arange(1, len(ANOMALY_KINDS)), size=n_anom, p=weights)
            inject_anomalies(rng, values, host, kinds)
        return metrics_events(ts, host, values), kinds

    # ------------------------------------------------------------------ logs

    def logs(self, n: int) -> list[dict]:
        """``n`` log events with a realistic class mix (mostly routine)."""
        return self.logs_labeled(n)[0]

    def logs_labeled(self, n: int) -> tuple[list[dict], np.ndarray]:
        """Like :meth:`logs`, plus an int array of indices into :data:`LOG_LABELS`."""
        rng = self._rng
        ts = self._advance("_logs_clock", n, LOGS_INTERVAL_MS).tolist()
        labels = rng.choice(len(LOG_LABELS), size=n, p=LABEL_MIX)
        host = rng.integers(len(FLEET.hosts), size=n)
        # Vectorised draws; the per-event loop below only formats strings.
        levels = (rng.random(n)[:, None] >= LEVEL_CDF[labels]).sum(axis=1).tolist()
        with_tail = (rng.random(n) < 0.45).tolist()
        py = self._py
        hosts, svc_names = FLEET.hosts, FLEET.service_names
        svc_of = FLEET.service_index.tolist()
        events: list[dict] = []
        for i, (label, h) in enumerate(zip(labels.tolist(), host.tolist(), strict=True)):
            templates = TEMPLATES[label]
            message = templates[py.randrange(len(templates))].render(py)
            if with_tail[i]:
                message = f"{message} {context_tail(py)}"
            events.append(
                {
                    "ts": ts[i],
                    "host": hosts[h],
                    "service": svc_names[svc_of[h]],
                    "level": LOG_LEVELS[levels[i]],
                    "message": message,
                }
            )
        return events, labels.astype(np.int64)

    # ------------------------------------------------------------------ helpers

    def _advance(self, clock: str, n: int, mean_ms: float) -> np.ndarray:
        """Next ``n`` increasing epoch-ms timestamps (Poisson arrivals) of one simulated clock."""
        start = getattr(self, clock)
        t = start + np.cumsum(self._rng.exponential(mean_ms, size=n))
        if n:
            setattr(self, clock, float(t[-1]))
        return t.astype(np.int64)
