"""``microbatch models list|verify``: the reference models shipped in ``service/models/``.
``models inspect PATH``: any ONNX file. (Rebuilding them is developer tooling: ``make models`` in a source
checkout.)"""

from __future__ import annotations

import argparse
from pathlib import Path

from service.config import Settings
from service.errors import EXIT_OK, UsageError
from service.models import reference


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="the reference models and their manifest entries")
    actions.add_parser("verify", help="check the committed files against the manifest's sha256")
    inspect = actions.add_parser(
        "inspect", help="an ONNX file's inputs, outputs and metadata, and settings to serve it"
    )
    inspect.add_argument("path", type=Path, help="the .onnx file")


def run(args: argparse.Namespace, _settings: Settings) -> int:
    """0 on success; ``verify``: 1 when a file does not match its digest."""
    if args.action == "list":
        for name, entry in sorted(reference.manifest()["models"].items()):
            quality = ", ".join(f"{k}={v}" for k, v in entry.get("quality", {}).items())
            print(f"{name:18} v{entry.get('version')}  {entry['file']}  {entry.get('processor')}  {quality}")
        return EXIT_OK
    if args.action == "inspect":
        if not args.path.is_file():
            raise UsageError("models inspect", f"no such file: {args.path}")
        from service.tools.inspect import describe

        print(describe(args.path))
        return EXIT_OK
    checks = reference.verify()
    for name, ok in sorted(checks.items()):
        print(f"{'ok ' if ok else 'BAD'} {name}")
    return EXIT_OK if all(checks.values()) else 1
