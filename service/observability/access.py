"""Permissions the cluster refuses while the service runs (``service.kafka.access`` names them): counted,
logged when a refusal starts and when it ends, and told to the probes, which fail after a bound."""

from __future__ import annotations

import structlog

from service.flow.records import Permission
from service.observability.health import Health
from service.observability.metrics import Metrics

_log = structlog.get_logger("microbatch.access")


class AccessReport:
    """The clients' ``Access`` callback. Called on the loop's thread (inside consume and poll)."""

    def __init__(self, metrics: Metrics, health: Health) -> None:
        self._metrics = metrics
        self._health = health

    def __call__(self, permission: Permission, refused: bool) -> None:
        """The cluster refused ``permission`` (each refusal counted), or it was seen to work again."""
        name = str(permission)
        if refused:
            self._metrics.authorization_failures.labels(
                operation=permission.operation, resource=permission.resource, name=permission.name
            ).inc()
            if name not in self._health.refused:
                _log.error(
                    "not_authorised",
                    permission=name,
                    hint=f"grant {name} to the service's principal (docs/SECURITY.md lists the ACLs); "
                    "nothing is committed past what waits for it, and it resumes once granted",
                )
        elif name in self._health.refused:
            _log.info("authorised", permission=name)
        self._health.access(name, refused)
