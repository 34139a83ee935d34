"""The ``microbatch`` command (also ``python -m service``).

Exit codes come from the error types (``service/errors.py``): 0 success, 1 runtime failure, 2 invalid
configuration or usage, 3 environment not ready at start-up (no broker answered, an input topic is
missing).

Each command is a module with ``add_arguments(parser)`` and ``run(args, settings) -> exit code``. Only the
module of the command being run is imported, so ``microbatch run`` loads none of the tooling. The settings
are loaded (and logging configured) before the command runs, and the first bad one stops it; ``config``
alone reads them itself, to list every problem.

Developer tooling is not in the installed package: in a source checkout, ``make bench`` (``python -m bench``)
benchmarks the service against its baselines and ``make models`` (``python -m modelbuild``) rebuilds the
reference models.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

import structlog

from service.config import load_settings, misnamed
from service.errors import MicrobatchError
from service.observability import logs


@dataclass(frozen=True, slots=True)
class Command:
    help: str
    module: str
    settings: bool = True
    """Whether the CLI loads the settings for it; False: ``run(args, None)``, the command reads them."""

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


COMMANDS = {
    "run": Command("run the service (settings from MICROBATCH_* variables)", "service.app"),
    "config": Command(
        "print the settings in effect and where each came from; list every problem",
        "service.tools.config",
        settings=False,
    ),
    "backfill": Command(
        "score a range of the input topics with large batches, then exit", "service.backfill.command"
    ),
    "produce": Command("send generated log or metrics events to a topic", "service.tools.produce"),
    "demo": Command(
        "run the three reference models on generated traffic and print a summary", "service.tools.demo"
    ),
    "check": Command(
        "run sample values through the model with no Kafka and print the results", "service.tools.check"
    ),
    "verify": Command("check that every input has a result or a dead letter", "service.tools.verify"),
    "sweep": Command("measure throughput and latency per batch size", "service.tools.sweep.command"),
    "models": Command("list, verify or inspect the reference models", "service.tools.models"),
}

MOVED = {
    ("bench",): "make bench (python -m bench)",
    ("models", "build"): "make models (python -m modelbuild)",
}
"""Developer tooling that was a command, now in a source checkout only: its words, what to run instead."""
EPILOG = (
    "Developer tooling, in a source checkout only: "
    + "; ".join(f"'microbatch {' '.join(words)}' is now {instead}" for words, instead in MOVED.items())
    + "."
)


def parser(command: str | None) -> argparse.ArgumentParser:
    """The whole command line, with the options of ``command`` only (the others are not imported)."""
    # The docstring's first line, without its markup: help is read on a terminal.
    description = __doc__.splitlines()[0].replace("``", "")
    top = argparse.ArgumentParser(prog="microbatch", description=description, epilog=EPILOG)
    sub = top.add_subparsers(dest="command", required=True)
    for name, spec in COMMANDS.items():
        command_parser = sub.add_parser(name, help=spec.help)
        if name == command:
            spec.load().add_arguments(command_parser)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # The top-level parser has no options but --help, so the first other word is the command.
    words = [a for a in argv if not a.startswith("-")]
    chosen = words[0] if words else None
    top = parser(chosen if chosen in COMMANDS else None)
    for moved, instead in MOVED.items():
        if tuple(words[: len(moved)]) == moved:
            command = " ".join(moved)
            top.error(
                f"'microbatch {command}' is not a command of the installed service: "
                f"run {instead} in a source checkout"
            )
    args = top.parse_args(argv)
    spec = COMMANDS[args.command]
    return execute(spec.load(), args, settings=spec.settings)


def execute(command: ModuleType, args: argparse.Namespace, *, settings: bool = True) -> int:
    """Run ``command`` (a module with ``run(args, settings)``) with the settings and logging configured;
    its exit code, or the error's. A variable that looks like a setting but is none
    (``MICROBATCH_INPUT_TOPICS``) is logged as an ``unknown_setting`` warning and does not stop it:
    deployments carry such names for reasons of their own. ``settings=False``: ``run(args, None)``."""
    try:
        if not settings:
            code: int = command.run(args, None)
            return code
        loaded = load_settings()
        logs.configure(loaded.log)
        log = structlog.get_logger("microbatch")
        for name in misnamed():
            log.warning("unknown_setting", variable=name.variable, did_you_mean=name.closest)
        code = command.run(args, loaded)
        return code
    except MicrobatchError as exc:
        if exc.exit_code == 1:
            structlog.get_logger("microbatch").error("failed", error=str(exc))
        else:
            print(f"microbatch: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 1
