"""Ratios between systems and the targets they are held to. Pure: result dicts in, verdict dicts out.

A verdict is ``{"name", "value", "op", "threshold", "passed"}``; ``passed`` is None when there is no target
or when a figure it needs is missing (a system that did not finish), never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from service.tools.bench.scenarios import SERVICE, Ratio

LATENCY_SLACK_MS = 10.0


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
) -> list[dict[str, Any]]:
    """Every throughput ratio of the scenario, then the service's latency target (its latency run was at
    ``load`` times its own drain rate; the target is stated for half)."""
    verdicts = []
    for r in ratios:
        value = ratio(throughput_of(systems, r.numerator), throughput_of(systems, r.denominator))
        verdicts.append(_verdict(f"{r.numerator} / {r.denominator} throughput", value, ">=", r.minimum))
    latency = (systems.get(SERVICE) or {}).get("latency") or {}
    bound = latency_bound_ms(max_wait_ms, batch_inference_ms)
    verdicts.append(
        _verdict(
            f"{SERVICE} p99 latency at {load:.0%} of its drain rate (ms)",
            latency.get("p99_ms"),
            "<=",
            None if bound is None else round(bound, 2),
        )
    )
    return verdicts
