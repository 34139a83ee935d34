"""The ``microbatch`` command (also ``python -m service``).

Exit codes: 0 success, 1 runtime failure, 2 invalid configuration or usage, 3 environment not ready at
start-up (no broker answered, an input topic is missing).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import structlog

from service import logs
from service.config import load_settings
from service.errors import ConfigError, EnvironmentNotReadyError, MicrobatchError

EXIT_OK, EXIT_FAILURE, EXIT_CONFIG, EXIT_ENVIRONMENT = 0, 1, 2, 3

# The broker limit (message.max.bytes) is about 1 MB by default, so a "too large" poison message must fit
# under it; that is only possible when the service's own limit is well below it.
_BROKER_DEFAULT_MAX_BYTES = 1_000_000


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="microbatch", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("run", help="run the service (settings from MICROBATCH_* variables)")

    produce = sub.add_parser("produce", help="send generated log or metrics events to a topic")
    produce.add_argument("--kind", choices=("logs", "metrics"), required=True)
    produce.add_argument("--topic", required=True)
    produce.add_argument("--count", type=int, default=1000)
    produce.add_argument("--rate", type=float, default=0.0, help="events per second; 0 = as fast as possible")
    produce.add_argument("--poison-ratio", type=float, default=0.0, help="share of malformed messages, 0..1")
    produce.add_argument("--seed", type=int, default=None)

    demo = sub.add_parser("demo", help="run both reference models on generated traffic and print a summary")
    demo.add_argument("--duration", type=float, default=30.0, help="seconds of traffic")
    demo.add_argument("--rate", type=float, default=300.0, help="events per second per model")
    demo.add_argument("--partitions", type=int, default=4)
    demo.add_argument("--poison-ratio", type=float, default=0.01)
    demo.add_argument("--keep-topics", action="store_true", help="do not delete the demo topics afterwards")

    verify = sub.add_parser("verify", help="check that every input has a result or a dead letter")
    verify.add_argument("--input", required=True, help="the input topic")
    verify.add_argument("--output", default=None, help="results topic (default MICROBATCH_OUTPUT__TOPIC)")
    verify.add_argument("--dlq", default=None, help="dead-letter topic (default MICROBATCH_DLQ__TOPIC)")
    verify.add_argument("--timeout", type=float, default=120.0, help="seconds to read each topic")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.add_argument(
        "--strict-order",
        action="store_true",
        help="also fail when answers are out of offset order (services with length bucketing off)",
    )

    from service import benchmark, sweep

    benchmark.add_arguments(sub.add_parser("bench", help="benchmark the service against its baselines"))
    sweep.add_arguments(sub.add_parser("sweep", help="measure throughput and latency per batch size"))

    models = sub.add_parser("models", help="list, verify or rebuild the reference models")
    msub = models.add_subparsers(dest="action", required=True)
    msub.add_parser("list", help="the reference models and their manifest entries")
    msub.add_parser("verify", help="check the committed files against the manifest's sha256")
    build = msub.add_parser("build", help="retrain and export the reference models (needs the models extra)")
    build.add_argument("--out", type=Path, default=None, help="output folder (default: the package's)")
    build.add_argument("--name", action="append", default=None, help="build only this model (repeatable)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = load_settings()
        logs.configure(settings.log)
        return _dispatch(args, settings)
    except ConfigError as exc:
        print(f"microbatch: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except EnvironmentNotReadyError as exc:
        print(f"microbatch: {exc}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    except MicrobatchError as exc:
        structlog.get_logger("microbatch").error("failed", error=str(exc))
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_FAILURE


def _dispatch(args: argparse.Namespace, settings) -> int:
    if args.command == "run":
        from service.app import run_service

        return run_service(settings)
    if args.command == "produce":
        return _produce(args, settings)
    if args.command == "verify":
        return _verify(args, settings)
    if args.command == "bench":
        from service import benchmark

        return benchmark.run(args, settings)
    if args.command == "sweep":
        from service import sweep

        return sweep.run(args, settings)
    if args.command == "demo":
        from service.demo import run_demo

        return run_demo(settings, args)
    return _models(args)


def _produce(args: argparse.Namespace, settings) -> int:
    from service.produce import produce_events

    if not 0.0 <= args.poison_ratio <= 1.0:
        raise ConfigError("--poison-ratio", "must be between 0 and 1")
    limit = settings.input.max_value_bytes
    too_large = limit + 1024 if limit + 1024 < _BROKER_DEFAULT_MAX_BYTES else None
    conf = settings.kafka.producer_config()
    report = produce_events(
        conf, args.topic, args.kind, args.count, args.rate, args.poison_ratio, args.seed, too_large
    )
    rate = report.sent / report.seconds if report.seconds else 0.0
    print(f"sent {report.sent} {args.kind} events to {args.topic} in {report.seconds:.1f}s ({rate:.0f}/s)")
    if report.poison:
        print(f"poison: {dict(sorted(report.poison.items()))}")
    return EXIT_OK


def _verify(args: argparse.Namespace, settings) -> int:
    """Exit 0 when nothing was lost (and, with --strict-order, nothing answered out of order), else 1."""
    import msgspec

    from service.verify import format_report, verify

    report = verify(
        settings.kafka.client_config(),
        args.input,
        args.output or settings.output.topic,
        args.dlq or settings.dlq.topic,
        args.timeout,
    )
    strict = args.strict_order
    print(msgspec.json.encode(report).decode() if args.json else format_report(report, strict_order=strict))
    return EXIT_OK if report.judge(strict_order=strict) else EXIT_FAILURE


def _models(args: argparse.Namespace) -> int:
    from service import reference

    if args.action == "list":
        for name, entry in sorted(reference.manifest()["models"].items()):
            quality = ", ".join(f"{k}={v}" for k, v in entry.get("quality", {}).items())
            print(f"{name:18} v{entry.get('version')}  {entry['file']}  {entry.get('processor')}  {quality}")
        return EXIT_OK
    if args.action == "verify":
        checks = reference.verify()
        for name, ok in sorted(checks.items()):
            print(f"{'ok ' if ok else 'BAD'} {name}")
        return EXIT_OK if all(checks.values()) else EXIT_FAILURE
    try:
        from service.modelbuild import build
    except ImportError as exc:
        print(f"microbatch: models build needs the 'models' extra (pip install 'microbatch[models]'): {exc}")
        return EXIT_CONFIG
    manifest = build(args.out or reference.MODELS_DIR, args.name)
    for name, entry in sorted(manifest["models"].items()):
        print(f"built {name}: {entry['file']} sha256={entry['sha256'][:12]} quality={entry.get('quality')}")
    return EXIT_OK
