"""Ratios between systems and the targets they are held to. Pure: result dicts in, verdict dicts out.

A verdict is ``{"name", "value", "op", "threshold", "passed"}``; ``passed`` is None when there is no target
or when a figure it needs is missing (a system that did not finish), never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.scenarios import BATCH_LOOP, PASSTHROUGH, PLAIN, SERVICE_LOOP_SIZE
from service.tools.harness.systems import SERVICE, Ratio

LATENCY_SLACK_MS = 10.0
LIGHT_P99_VS_PLAIN = 1.5
"""At light load the service's p99 may be at most this many times the plain loop's."""
LIGHT_CPU_VS_PLAIN = 2.0
"""At light load the service's CPU per event may be at most this many times the plain loop's: it parses,
runs the model and encodes a result per event, which the loop does not."""


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, or None when either is missing or the denominator is not positive."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def latency_bound_ms(max_wait_ms: float, batch_inference_ms: float | None) -> float | None:
    """The p99 the service may show at half load: one full window, two batch inferences (the batch ahead
    of it and its own) and a fixed allowance for the transport."""
    if batch_inference_ms is None:
        return None
    return max_wait_ms + 2 * batch_inference_ms + LATENCY_SLACK_MS


def _verdict(name: str, value: float | None, op: str, threshold: float | None) -> dict[str, Any]:
    if value is None or threshold is None:
        passed = None
    else:
        passed = value >= threshold if op == ">=" else value <= threshold
    rounded = None if value is None else round(value, 3)
    return {"name": name, "value": rounded, "op": op, "threshold": threshold, "passed": passed}


def throughput_of(systems: Mapping[str, Mapping[str, Any]], name: str) -> float | None:
    """A system's events/s from its throughput phase, or None if it has none (missing, not finished)."""
    phase = (systems.get(name) or {}).get("throughput") or {}
    return phase.get("events_per_s") if phase.get("complete", True) else None


def evaluate(
    ratios: Sequence[Ratio],
    systems: Mapping[str, Mapping[str, Any]],
    max_wait_ms: float,
    batch_inference_ms: float | None,
    load: float = 0.5,
    light_rate: float = 0.0,
) -> list[dict[str, Any]]:
    """Every throughput ratio of the scenario, then the service's latency target (its latency run was at
    ``load`` times its own drain rate, or that of the system its ``latency_load_of`` names, its stream
    regime; the target is stated for half), then, where the service had a light-load run at
    ``light_rate``: the light-load verdicts of :func:`_light`."""
    verdicts = []
    for r in ratios:
        value = ratio(throughput_of(systems, r.numerator), throughput_of(systems, r.denominator))
        verdicts.append(_verdict(f"{r.numerator} / {r.denominator} throughput", value, ">=", r.minimum))
    service = systems.get(SERVICE) or {}
    latency = service.get("latency") or {}
    bound = latency_bound_ms(max_wait_ms, batch_inference_ms)
    basis = f"{service['latency_load_of']}'s" if service.get("latency_load_of") else "its"
    verdicts.append(
        _verdict(
            f"{SERVICE} p99 latency at {load:.0%} of {basis} drain rate (ms)",
            latency.get("p99_ms"),
            "<=",
            None if bound is None else round(bound, 2),
        )
    )
    if (systems.get(SERVICE) or {}).get("light") is not None:
        verdicts += _light(systems, light_rate)
    return verdicts


def _light(systems: Mapping[str, Mapping[str, Any]], rate: float) -> list[dict[str, Any]]:
    """At ``rate``: the service's p99 and CPU per event against the plain loop's (the transport ceiling),
    its CPU per event against the consume(32) loop's; where the scenario has them, the loop's batching in
    the service (``service-loop-size``) against the loop (the service's own cost at the same batch size),
    and the service's transport without the model (``passthrough``) against the plain loop, reported
    only (what the service's bookkeeping costs per event)."""

    def light(name: str, figure: str) -> float | None:
        return ((systems.get(name) or {}).get("light") or {}).get(figure)

    at = f"at {rate:,.0f}/s"

    def cpu(name: str, of: str, most: float | None) -> dict[str, Any]:
        value = ratio(light(name, "cpu_us_per_event"), light(of, "cpu_us_per_event"))
        return _verdict(f"{name} / {of} CPU per event {at}", value, "<=", most)

    p99 = ratio(light(SERVICE, "p99_ms"), light(PLAIN, "p99_ms"))
    verdicts = [
        _verdict(f"{SERVICE} / {PLAIN} p99 latency {at}", p99, "<=", LIGHT_P99_VS_PLAIN),
        cpu(SERVICE, PLAIN, LIGHT_CPU_VS_PLAIN),
        cpu(SERVICE, BATCH_LOOP, 1.0),
    ]
    if SERVICE_LOOP_SIZE in systems:
        verdicts.append(cpu(SERVICE_LOOP_SIZE, BATCH_LOOP, 1.0))
    if PASSTHROUGH in systems:
        verdicts.append(cpu(PASSTHROUGH, PLAIN, None))
    return verdicts
