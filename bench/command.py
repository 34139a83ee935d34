"""``python -m bench`` (``make bench``): the service against its baselines, side by side, on the real broker.

Scenario A (transport-bound, ``metrics-anomaly``) compares the service with a plain consume -> produce loop
(the transport ceiling), the service's own transport without the model, and a naive one-message-at-a-time
loop; scenario B (model-bound, ``log-classifier``) with raw ONNX Runtime and the naive loop. Both also drain
the backlog with ``microbatch backfill`` and compare it with the service and with raw ONNX Runtime at the
backfill's batch size. Method and modules: docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from service.config import KafkaSettings, Settings
from service.errors import UsageError

if TYPE_CHECKING:
    from service.tools.harness.runner import Options

RESULTS_DIR = Path("bench/results")

# --quick: small backlogs and short runs, for the smoke test; the figures are not for comparison.
_QUICK = {"drain_seconds": 0.5, "latency_seconds": 2.0, "settle_seconds": 0.5}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Define the command's options."""
    parser.add_argument("--scenario", choices=("A", "B", "C", "all"), default="all")
    parser.add_argument("--quick", action="store_true", help="small backlogs and short runs (smoke test)")
    parser.add_argument(
        "--bootstrap", default=None, help=f"brokers (default {KafkaSettings.env('bootstrap_servers')})"
    )
    parser.add_argument("--partitions", type=int, default=4, help="partitions of every input topic")
    parser.add_argument(
        "--drain-seconds",
        type=float,
        default=None,
        help="about how long each system's backlog lasts, and how long raw ONNX Runtime is timed (12)",
    )
    parser.add_argument("--latency-seconds", type=float, default=None, help="length of each latency run (15)")
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=None,
        help="seconds of each latency run sent at its rate but not measured (2)",
    )
    parser.add_argument(
        "--latency-load",
        type=float,
        default=0.5,
        help="latency run rate as a share of the system's own backlog-drain rate (0.5)",
    )
    parser.add_argument(
        "--latency-repeats",
        type=int,
        default=None,
        help="latency runs of the service; the one with the median p99 is reported (3; --quick: 1)",
    )
    parser.add_argument(
        "--light-rate",
        type=float,
        default=2000.0,
        help=(
            "events/s of the light-load runs (service, plain loop, passthrough, consume(32) loop); "
            "0: none (2000)"
        ),
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the generated events")
    parser.add_argument(
        "--out", type=Path, default=None, help="results file (default bench/results/bench-<UTC time>.json)"
    )
    parser.add_argument("--log-dir", type=Path, default=Path(".local/bench"), help="the systems' logs")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run the selected scenarios; exit 0, or 1 when a system did not answer every input. Raises
    UsageError when the ``bench`` extra is not installed."""
    return run_bench(options(args, settings), settings)


def options(args: argparse.Namespace, settings: Settings) -> Options:
    """The run's options from the command's arguments (:func:`add_arguments`). Raises UsageError when the
    ``bench`` extra is not installed."""
    try:
        from service.tools.harness.runner import Options
    except ImportError as exc:  # tqdm, psutil: the bench extra
        raise UsageError(
            "bench", f"needs the 'bench' extra (pip install 'microbatch[bench]'): {exc}"
        ) from None
    quick = args.quick
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Options(
        scenario=args.scenario,
        quick=quick,
        bootstrap=args.bootstrap or settings.kafka.bootstrap_servers,
        partitions=args.partitions,
        drain_s=_given(args.drain_seconds, _QUICK["drain_seconds"] if quick else 12.0),
        latency_s=_given(args.latency_seconds, _QUICK["latency_seconds"] if quick else 15.0),
        settle_s=_given(args.settle_seconds, _QUICK["settle_seconds"] if quick else 2.0),
        latency_load=args.latency_load,
        latency_repeats=max(1, int(_given(args.latency_repeats, 1 if quick else 3))),
        light_rate=max(0.0, args.light_rate),
        seed=args.seed,
        out=args.out or RESULTS_DIR / f"bench-{stamp}.json",
        log_dir=args.log_dir,
    )


def _given(value: float | None, default: float) -> float:
    """An option's value; None (not given) means ``default`` (0 is a value, unlike with ``or``)."""
    return default if value is None else value


def run_bench(options: Options, settings: Settings) -> int:
    """Run, write the results file, print the Markdown tables. Exit 1 if any system lost or stalled."""
    from bench import machine, report
    from bench.runner import Bench

    bench = Bench(options, settings)
    bench.check_broker()
    if machine.autogroup(machine.AUTOGROUP):
        print(
            "note: kernel.sched_autogroup_enabled=1 shares CPU per session, so a broker on this machine "
            "stalls its clients when short of CPU (latency tails of 100-300 ms on 2 cores); for comparable "
            "latency figures run with it at 0 (sysctl -w kernel.sched_autogroup_enabled=0)",
            file=sys.stderr,
        )
    result = bench.run()
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(result, indent=2) + "\n")
    print(report.render(result))
    print(f"results: {options.out} ({result['run']['duration_s']:.0f}s)", file=sys.stderr)
    if bench.incomplete:
        print(f"incomplete: {', '.join(bench.incomplete)}", file=sys.stderr)
        return 1
    return 0
