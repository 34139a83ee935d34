"""``microbatch sweep --pipeline``: the whole service per batch size, on a real broker.

The engine sweep times ``prepare`` + preprocess + ``run`` + postprocess alone, which overstates what a
large batch is worth when Kafka, decoding and result encoding cost as much as the model (a tiny model's
engine knee is far above the service's). So for each batch size the engine sweep measured, the real service
(``python -m service run``, its own process, exactly as the bench runs it) drains a backlog of generated
events with the batch size pinned: ``MIN_SIZE = MAX_SIZE = size``, adaptive off. Its rate is measured the
bench's way (the harness, ``service/tools/harness``), from the first to the last output timestamp, on fresh
topics that are deleted afterwards. Only reference models qualify: their events can be generated.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

_MIN_EVENTS = 2_000
_POOL_EVENTS = 20_000
_REFERENCE_SIZE = 16
# The reference models whose events can be generated: their event kind, and a rough events/s of the service
# at its defaults on a small CPU machine (it only sizes the backlogs). The bench's scenarios A and B
# (bench/scenarios.py) serve the same models with the same figures.
_DRAINED = {"metrics-anomaly": ("metrics", 100_000.0), "log-classifier": ("logs", 4_000.0)}


def scenario_for(model: str | None) -> Any:
    """The scenario serving reference model ``model`` (its event kind and its service system, as the
    bench's scenario of that model has them), or None for any other model."""
    from service.tools.harness.systems import SERVICE, Scenario, System

    if model not in _DRAINED:
        return None
    kind, rate_hint = _DRAINED[model]
    service = System(SERVICE, "service, default settings", ("service", "run"), True, rate_hint, defaults=True)
    return Scenario(
        key="sweep", title=f"{model} per batch size", model=model, kind=kind, systems=(service,), ratios=()
    )


def backlog_events(rate_hint: float, size: int, drain_s: float) -> int:
    """How many events give about ``drain_s`` seconds of work at batch ``size``, from the service's rough
    rate at full-size batches. Small batches are slower (per-batch overhead), so the backlog shrinks below
    16; never below :data:`_MIN_EVENTS`."""
    return max(_MIN_EVENTS, round(rate_hint * drain_s * min(1.0, size / _REFERENCE_SIZE)))


def open_bench(settings: Any, bootstrap: str, drain_s: float, log_dir: Path) -> Any:
    """The harness the drains run in, once a broker answers at ``bootstrap``. Raises
    BrokerUnavailableError otherwise, before any measuring starts."""
    from service.tools.harness.runner import Harness, Options

    options = Options(
        scenario="sweep",
        quick=False,
        bootstrap=bootstrap,
        partitions=4,
        drain_s=drain_s,
        latency_s=0.0,
        settle_s=0.0,
        latency_load=0.5,
        latency_repeats=0,
        light_rate=0.0,
        seed=1,
        out=log_dir / "unused.json",
        log_dir=log_dir,
    )
    harness = Harness(options, settings)
    harness.check_broker()
    return harness


def measure_pipeline(bench: Any, base: Any, sizes: list[int]) -> dict[int, dict[str, Any]]:
    """Drain a backlog through the service of scenario ``base`` at each of ``sizes``; ``{size: figures}``
    with ``events_per_s`` (None when the drain did not finish), ``complete``, ``cpu_percent``,
    ``mean_batch_size``."""
    from tqdm import tqdm

    from service.tools.harness.systems import SERVICE
    from service.tools.harness.workload import cycle, make_events

    service = next(system for system in base.systems if system.name == SERVICE)
    pool = make_events(base.kind, _POOL_EVENTS, bench.options.seed)
    figures: dict[int, dict[str, Any]] = {}
    for size in tqdm(sizes, desc="pipeline", unit="size", leave=False):
        scenario = dataclasses.replace(
            base,
            key=f"sweep{size}",
            systems=(service,),
            ratios=(),
            max_batch_size=size,
            # Over the caller's MICROBATCH_BATCH__* too: the size is what is being measured.
            env=(
                ("BATCH__MIN_SIZE", str(size)),
                ("BATCH__MAX_SIZE", str(size)),
                ("BATCH__ADAPTIVE", "false"),
            ),
        )
        events = cycle(pool, backlog_events(service.rate_hint, size, bench.options.drain_s))
        phase = bench.throughput_phase(scenario, service, events)
        figures[size] = {
            "events_per_s": phase["events_per_s"] if phase["complete"] else None,
            "complete": phase["complete"],
            "cpu_percent": phase["cpu_percent"],
            "mean_batch_size": phase["mean_batch_size"],
        }
    return figures
