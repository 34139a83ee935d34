"""The service's light-load runs beside the plain loop's, round after round: CPU per event and latency of
each setting as multiples of the plain loop's in the same round, then the medians. Scenario A's events and
rate (2,000/s), measured as ``make bench`` measures its light-load rows, without the rest of the bench.

    .venv/bin/python bench/compare_light.py ROUNDS [LABEL=SETTINGS ...]

Each ``SETTINGS`` is a JSON object of environment variables for the service's runs (``{}``: the defaults),
for example ``linger0='{"MICROBATCH_BATCH__LINGER_MS": "0"}'``. The broker is
``MICROBATCH_KAFKA__BOOTSTRAP_SERVERS`` (default ``127.0.0.1:9092``).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.runner import Bench
from bench.scenarios import PLAIN, selected
from service.config import load_settings
from service.tools.harness.runner import Options
from service.tools.harness.systems import SERVICE
from service.tools.harness.workload import make_events

RATE = 2000.0
POOL = 60_000
SEED = 7


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    variants = [arg.split("=", 1) for arg in sys.argv[2:]] or [["defaults", "{}"]]
    settings = load_settings()
    options = Options(
        scenario="A",
        quick=False,
        bootstrap=settings.kafka.bootstrap_servers,
        partitions=4,
        drain_s=12.0,
        latency_s=15.0,
        settle_s=2.0,
        latency_load=0.5,
        latency_repeats=1,
        light_rate=RATE,
        seed=SEED,
        out=Path(".local/bench/compare-light.json"),
        log_dir=Path(".local/bench"),
    )
    bench = Bench(options, settings)
    bench.check_broker()
    scenario = selected("A")[0]
    systems = {system.name: system for system in scenario.systems}
    pool = make_events(scenario.kind, POOL, SEED, 1)
    ratios: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in variants}
    for round_ in range(rounds):
        plain = bench.latency_phase(scenario, systems[PLAIN], pool, RATE, f"light-plain-{round_}")
        for label, env in variants:
            with _env(json.loads(env)):
                run = bench.latency_phase(scenario, systems[SERVICE], pool, RATE, f"light-{label}-{round_}")
            cpu = run["cpu_us_per_event"] / plain["cpu_us_per_event"]
            p99 = run["p99_ms"] / plain["p99_ms"]
            ratios[label].append((cpu, p99))
            print(
                f"round {round_ + 1} {label}: CPU {run['cpu_us_per_event']} us/event against "
                f"{plain['cpu_us_per_event']} ({cpu:.2f}x), p50/p99 {run['p50_ms']}/{run['p99_ms']} ms "
                f"against {plain['p50_ms']}/{plain['p99_ms']} ({p99:.2f}x)",
                flush=True,
            )
    for label, pairs in ratios.items():
        cpu = statistics.median(c for c, _ in pairs)
        p99 = statistics.median(p for _, p in pairs)
        print(f"{label}: CPU per event {cpu:.2f}x the plain loop's, p99 {p99:.2f}x (medians of {rounds})")


@contextmanager
def _env(env: dict[str, str]) -> Iterator[None]:
    """This process's environment, which the service's runs inherit, with ``env`` added meanwhile."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


if __name__ == "__main__":
    main()
