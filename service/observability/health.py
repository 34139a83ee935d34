"""What ``/healthz`` and ``/readyz`` answer. Pure: the loop and the clients set plain attributes (from
their own threads; each is one assignment), and the HTTP thread reads them with an injected clock.

- **Live** (``/healthz``): the process is not stuck. Before the loop starts (model load, warm-up, waiting
  for brokers, all bounded by their own timeouts) it is live; after that, the loop must have come round
  within ``liveness_timeout_s``. A commit may block for up to ``MICROBATCH_OUTPUT__FLUSH_TIMEOUT_S``, so
  the timeout must stay above that (the settings check it).
- **Ready** (``/readyz``): the model is warmed up, the loop runs (partitions assigned, or waiting for an
  assignment: both are normal for a member of a group) and not shutting down, and a broker has been
  reachable within ``broker_timeout_s``, and no permission the service needs (READ on its group or an
  input topic, WRITE on an output topic) has been refused for longer than that: a member that cannot join
  its group, or cannot write its results, is up but does no work.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Health:
    liveness_timeout_s: float
    broker_timeout_s: float
    clock: Callable[[], float] = time.monotonic
    warmed_up: bool = False
    loop_at: float | None = None
    """When the loop last came round; None until it starts."""
    stopping: bool = False
    brokers_down_since: float | None = None
    """Set when the client reports every broker down; cleared when one is up again."""
    assigned: int = 0
    refused: dict[str, float] = field(default_factory=dict)
    """Each permission the cluster refuses, by name, and since when; replaced, never changed in place, so
    the probes' thread always reads a whole one."""

    def tick(self) -> None:
        """The loop came round. Called every iteration: one attribute store."""
        self.loop_at = self.clock()

    def brokers(self, up: bool) -> None:
        """What the client last said about its brokers: any up, or all down."""
        if up:
            self.brokers_down_since = None
        elif self.brokers_down_since is None:
            self.brokers_down_since = self.clock()

    def access(self, permission: str, refused: bool) -> None:
        """The cluster refused ``permission`` (kept from the first refusal on), or it works again."""
        if refused:
            if permission not in self.refused:
                self.refused = {**self.refused, permission: self.clock()}
        elif permission in self.refused:
            self.refused = {k: v for k, v in self.refused.items() if k != permission}

    def live(self) -> tuple[bool, str]:
        """(live?, why) for ``/healthz``."""
        if self.loop_at is None:
            return True, "starting"
        stalled = self.clock() - self.loop_at
        if stalled > self.liveness_timeout_s:
            return False, f"the consume loop has not come round for {stalled:.0f}s"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        """(ready?, why) for ``/readyz``."""
        if not self.warmed_up:
            return False, "loading and warming up the model"
        if self.stopping:
            return False, "shutting down"
        if self.loop_at is None:
            return False, "connecting to the brokers"
        down = self.brokers_down_since
        if down is not None and self.clock() - down > self.broker_timeout_s:
            return False, f"no broker reachable for {self.clock() - down:.0f}s"
        now = self.clock()
        for permission, since in self.refused.items():
            if now - since > self.broker_timeout_s:
                return False, f"not authorised: {permission} refused for {now - since:.0f}s"
        live, why = self.live()
        if not live:
            return False, why
        return True, "ok" if self.assigned else "ok, waiting for a partition assignment"
