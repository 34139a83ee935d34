"""What runs and what it is fed: a system under test, and the scenario (one model, its events, its settings)
it runs in. Pure data.

``microbatch sweep --pipeline`` drains the service of a one-system scenario; the bench of a source checkout
(``bench/scenarios.py``) declares its scenarios, the systems compared in each and the ratios between them,
with these.
"""

from __future__ import annotations

from dataclasses import dataclass

SERVICE = "service"


@dataclass(frozen=True, slots=True)
class System:
    """One process to measure.

    ``argv`` follows ``python -m`` (the in-process systems get their run options appended). ``kafka``
    systems consume and produce through the broker (backlog drain plus a latency run); the others are
    timed in-process and report their own figures. ``rate_hint`` is a rough events/s on a small CPU
    machine; it only sizes the backlog so that each system gets about the requested number of seconds of
    work (the measured rate never depends on it).
    """

    name: str
    label: str
    argv: tuple[str, ...]
    kafka: bool
    rate_hint: float
    kind: str | None = None
    """The events this system reads, when not the scenario's ``kind``."""
    env: tuple[tuple[str, str], ...] = ()
    """Settings of this system only (after the scenario's own)."""
    items_per_message: int = 1
    """Items, and so outputs, per input message: ``RECORDS_PER_REQUEST`` for OTLP requests. ``rate_hint``
    and the latency run's rate count items."""
    defaults: bool = False
    """Run with the service's default batch settings: the scenario's ``max_batch_size`` is not applied."""
    latency: bool = True
    """Give it a latency run at ``latency_load`` of its drain rate (after its drain)."""
    light: bool = False
    """Give it a light-load latency run too, at the fixed ``--light-rate``."""
    pin_to: str | None = None
    """Pin ``BATCH__MAX_SIZE`` to the batch size THIS system measured at its warm-up (measured first): the
    defaults row's knee (its drain ceiling), or the size the backfill cut its batches at."""
    drain_regime: bool = True
    """False: ``BATCH__DRAIN_MAX_SIZE`` = its ``BATCH__MAX_SIZE``, so it never leaves the stream regime."""
    load_of: str | None = None
    """Its latency runs go at ``latency_load`` of THIS system's drain rate (None: of its own). That system
    is measured first."""
    ends: bool = False
    """It exits by itself (0) once its backlog is done: ``microbatch backfill``, started with a ``--job``
    named after the run's fresh input topic (a new job each run). The runner waits for that exit instead
    of stopping it; a system still running then is stopped, and any exit but 0 leaves it incomplete."""


@dataclass(frozen=True, slots=True)
class Ratio:
    """``numerator`` / ``denominator`` throughput; ``minimum`` is the target (None: reported only)."""

    numerator: str
    denominator: str
    minimum: float | None = None


@dataclass(frozen=True, slots=True)
class Scenario:
    key: str
    title: str
    model: str
    kind: str
    """The event kind of ``service.tools.generate`` the model reads: ``metrics`` or ``logs``."""
    systems: tuple[System, ...]
    ratios: tuple[Ratio, ...]
    max_batch_size: int | None = None
    """``BATCH__MAX_SIZE`` for every system of the scenario (the service, and raw ONNX Runtime's batches);
    None keeps the settings' own. Part of the scenario, as a user would set it after ``microbatch sweep``."""
    env: tuple[tuple[str, str], ...] = ()
    """Further settings for every system, ``("BATCH__ADAPTIVE", "false")`` style; they win over all but a
    system's own ``env`` (``microbatch sweep --pipeline`` pins the batch size with them)."""
