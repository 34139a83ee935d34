"""``microbatch check --sample FILE``: sample values through format, processor, model and result encoding,
with no Kafka. Prints one JSON line per item (its result, or the dead letter it would be), then a summary.

Exit 0 when every sample gives a result; 2 when the settings do not fit the model or a sample gives none
(the error names the setting or output at fault), as ``MICROBATCH_MODEL__SAMPLE`` stops start-up.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import msgspec

from service.config import Settings
from service.engine import load_model, model_setting, warm_up
from service.engine.model import blamed_setting
from service.engine.samples import read_samples, run_samples
from service.errors import EXIT_OK, ConfigError, UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sample", type=Path, default=None, help="values, one per line (default: MICROBATCH_MODEL__SAMPLE)"
    )
    parser.add_argument(
        "--whole", action="store_true", help="the file is one value (a binary OTLP request), not lines"
    )


def run(args: argparse.Namespace, settings: Settings) -> int:
    path = args.sample or settings.model.sample
    if path is None:
        raise UsageError("check", "give --sample FILE (or set MICROBATCH_MODEL__SAMPLE)")
    if not path.is_file():
        raise UsageError("check", f"no such file: {path}")
    model = load_model(settings)
    warm_up(
        model, {1, settings.batch.max_size}, blamed_setting(settings.model), model_setting(settings.model)
    )
    report = run_samples(settings, model, read_samples(path, args.whole))
    encode = msgspec.json.Encoder().encode
    for outcome in report.outcomes:
        line: dict[str, Any] = {"line": outcome.line} | (
            {"index": outcome.index} if outcome.index is not None else {}
        )
        if outcome.result is not None:
            line["result"] = outcome.result
        else:
            line["dead_letter"] = {"reason": outcome.reason, "message": outcome.message}
        print(encode(line).decode())
    for hint in report.hints:
        print(f"hint: {hint}", file=sys.stderr)
    failed = len(report.failed)
    print(
        f"{len(report.outcomes) - failed} of {len(report.outcomes)} items give a result "
        f"(model {model.ref.name}, {settings.input.format})",
        file=sys.stderr,
    )
    return ConfigError.exit_code if failed or not report.outcomes else EXIT_OK
