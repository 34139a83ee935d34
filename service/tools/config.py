"""``microbatch config``: the settings in effect, where each came from, and every problem with them at once.

Unlike the other commands it does not stop at the first bad setting (the CLI does not load the settings
for it: ``service.cli.Command.settings``). It checks what ``run`` checks before it connects: each value,
unknown and misnamed variables, the topics and the model choice. It never prints a secret: secrets and the
credential options of the ``*_EXTRA`` maps show as ``***``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from service.config import Diagnosis, Effective, Settings, diagnose
from service.errors import EXIT_OK, ConfigError

DESCRIPTION = (
    "Print the settings in effect: each MICROBATCH_* variable, its value (secrets as ***) and where it came "
    "from (default, environment, .env in the working directory, or a *_FILE setting's file). Then list every "
    "problem at once: invalid values, unknown variables (with the setting each resembles, including "
    "single-underscore names such as MICROBATCH_INPUT_TOPICS), and what 'microbatch run' would refuse "
    "before it connects (no input topic, no model). Exit 0 when there is none, 2 otherwise. "
    "docs/CONFIG.md describes every setting."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.add_argument(
        "--all",
        action="store_true",
        help="every setting (default: the common ones, and every one not at its default)",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")


def run(args: argparse.Namespace, _settings: Settings | None = None) -> int:
    diagnosis = diagnose(checks=(model_problems,))
    shown = [
        e for e in diagnosis.effective if args.all or e.info.common or e.source != "default" or e.invalid
    ]
    if args.format == "json":
        print(json.dumps(as_json(diagnosis, shown), indent=2))
    else:
        print_table(diagnosis, shown, sys.stdout)
        sys.stdout.flush()  # the table, then the problems, also where both go to one pipe
        print_problems(diagnosis, sys.stderr)
    return ConfigError.exit_code if diagnosis.problems else EXIT_OK


def model_problems(settings: Settings) -> list[ConfigError]:
    """``run``'s model choice: a reference model by name, or a file (``choose_model``)."""
    from service.models.reference import choose_model  # the manifest only; no ONNX Runtime

    try:
        choose_model(settings.model)
    except ConfigError as error:
        return [error]
    return []


def print_table(diagnosis: Diagnosis, shown: list[Effective], out: TextIO) -> None:
    read = f".env read from {diagnosis.env_file.resolve()}" if diagnosis.env_file else "no .env file"
    scope = (
        "every setting" if len(shown) == len(diagnosis.effective) else "common and set ones; --all: every one"
    )
    print(f"Settings in effect ({scope}; {read}):", file=out)
    rows = [("variable", "value", "source")]
    rows += [(e.info.variable, e.value, e.source + (" (invalid)" if e.invalid else "")) for e in shown]
    width = [max(len(row[i]) for row in rows) for i in range(2)]
    for variable, value, source in rows:
        print(f"  {variable:<{width[0]}}  {value:<{width[1]}}  {source}".rstrip(), file=out)


def print_problems(diagnosis: Diagnosis, out: TextIO) -> None:
    count = len(diagnosis.problems)
    if not count:
        return
    print(f"microbatch: {count} problem{'s' if count > 1 else ''} with the settings:", file=out)
    for problem in diagnosis.problems:
        print(f"  {problem}", file=out)


def as_json(diagnosis: Diagnosis, shown: list[Effective]) -> dict[str, Any]:
    return {
        "env_file": str(diagnosis.env_file.resolve()) if diagnosis.env_file else None,
        "settings": [
            {
                "variable": e.info.variable,
                "value": e.value,
                "source": e.source,
                "common": e.info.common,
                "invalid": e.invalid,
            }
            for e in shown
        ],
        "problems": [{"setting": p.setting, "message": p.message} for p in diagnosis.problems],
    }
