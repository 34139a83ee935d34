"""The service's light-load runs beside the plain loop's, round after round: CPU per event and p99 of each
setting as multiples of the plain loop's in the same round, then the medians. Scenario A's events at its
light rate (``--light-rate``, 2,000/s; or ``--rate``), measured as ``make bench`` measures its light-load
rows, without the rest of the bench.

    .venv/bin/python bench/compare_light.py [--rounds 3] [--rate R] [--seen] [bench options] \
        [LABEL=SETTINGS ...]

Each ``SETTINGS`` is a JSON object of environment variables for the service's runs (``{}``: the defaults),
for example ``linger0='{"MICROBATCH_BATCH__LINGER_MS": "0"}'``. ``--seen`` times every result when a
read_committed reader sees it rather than when it was produced, the way exactly-once runs are always timed:
at-least-once and exactly-once on one footing. The other options are ``python -m bench``'s
(``--bootstrap``, ``--seed``, ``--latency-seconds``, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from bench import command
from bench.runner import Bench
from bench.scenarios import PLAIN, selected
from service.config import load_settings
from service.tools.harness.systems import SERVICE
from service.tools.harness.workload import make_events

POOL = 60_000  # distinct events, cycled


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench/compare_light.py", description=__doc__.splitlines()[0])
    command.add_arguments(parser)
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of the plain loop and every setting (3)"
    )
    parser.add_argument("--rate", type=float, default=None, help="events/s (default: --light-rate)")
    parser.add_argument("--seen", action="store_true", help="time results when a reader sees them")
    parser.add_argument("variants", nargs="*", metavar="LABEL=SETTINGS", default=["defaults={}"])
    args = parser.parse_args(argv)
    settings = load_settings()
    options = command.options(args, settings)
    bench = Bench(options, settings)
    bench.seen_latency = args.seen
    bench.check_broker()
    # --scenario picks the events and the model (A unless one is named); the plain loop is A's either way.
    scenario = selected(args.scenario if args.scenario != "all" else "A")[0]
    systems = {system.name: system for system in (*selected("A")[0].systems, *scenario.systems)}
    pool = make_events(scenario.kind, POOL, options.seed, 1)
    rate = args.rate or options.light_rate
    variants = [variant.split("=", 1) for variant in args.variants]
    ratios: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in variants}
    p99s: dict[str, list[float]] = {label: [] for label, _ in variants}
    for round_ in range(args.rounds):
        plain = bench.latency_phase(scenario, systems[PLAIN], pool, rate, f"light-plain-{round_}")
        for label, env in variants:
            with _env(json.loads(env)):
                run = bench.latency_phase(scenario, systems[SERVICE], pool, rate, f"light-{label}-{round_}")
            cpu = run["cpu_us_per_event"] / plain["cpu_us_per_event"]
            p99 = run["p99_ms"] / plain["p99_ms"]
            ratios[label].append((cpu, p99))
            p99s[label].append(run["p99_ms"])
            print(
                f"round {round_ + 1} {label}: CPU {run['cpu_us_per_event']} us/event against "
                f"{plain['cpu_us_per_event']} ({cpu:.2f}x), p50/p99 {run['p50_ms']}/{run['p99_ms']} ms "
                f"against {plain['p50_ms']}/{plain['p99_ms']} ({p99:.2f}x)",
                flush=True,
            )
    for label, pairs in ratios.items():
        cpu = statistics.median(c for c, _ in pairs)
        p99 = statistics.median(p for _, p in pairs)
        print(
            f"{label}: CPU per event {cpu:.2f}x the plain loop's, p99 {p99:.2f}x, p99 "
            f"{statistics.median(p99s[label]):g} ms (medians of {args.rounds})"
        )


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
