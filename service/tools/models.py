"""``microbatch models list|verify``: the reference models shipped in ``service/models/``.
``models inspect NAME|PATH``: one of them by name, or any ONNX file. (Rebuilding them is developer tooling:
``make models`` in a source checkout.)"""

from __future__ import annotations

import argparse
from pathlib import Path

from service.config import Settings
from service.errors import EXIT_OK, UsageError
from service.models import reference

LIST_COLUMNS = ("NAME", "VERSION", "FILE", "PROCESSOR", "QUALITY (on the held-out data)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="the reference models and their manifest entries")
    actions.add_parser("verify", help="check the committed files against the manifest's sha256")
    inspect = actions.add_parser(
        "inspect", help="a model's inputs, outputs, fields and metadata, and the settings to serve it"
    )
    inspect.add_argument(
        "model", help="a reference model's name (as `models list` shows it) or an .onnx file"
    )


def run(args: argparse.Namespace, _settings: Settings) -> int:
    """0 on success; ``verify``: 1 when a file does not match its digest. ``inspect``: raises UsageError
    for a model that is neither a reference model's name nor a file."""
    if args.action == "list":
        print(list_table())
        return EXIT_OK
    if args.action == "inspect":
        from service.tools.inspect import describe

        path, name = resolve(args.model)
        print(describe(path, name))
        return EXIT_OK
    checks = reference.verify()
    for name, ok in sorted(checks.items()):
        print(f"{'ok ' if ok else 'BAD'} {name}")
    return EXIT_OK if all(checks.values()) else 1


def list_table() -> str:
    """The reference models, one row each under a header, the columns aligned."""
    rows = [LIST_COLUMNS]
    for name, entry in sorted(reference.manifest()["models"].items()):
        quality = ", ".join(f"{k}={v}" for k, v in entry.get("quality", {}).items())
        rows.append((name, f"v{entry.get('version')}", entry["file"], str(entry.get("processor")), quality))
    widths = [max(len(row[i]) for row in rows) for i in range(len(LIST_COLUMNS) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]) for row in rows
    )


def resolve(model: str) -> tuple[Path, str | None]:
    """``model`` as (the file to read, the reference name it was given by, or None for a path). A reference
    name wins over a file of that name. Raises UsageError, listing the names, for neither."""
    found = reference.reference_file(model)
    if found is not None:
        return found, model
    path = Path(model)
    if path.is_file():
        return path, None
    raise UsageError(
        "models inspect",
        f"{model!r} is neither a reference model ({', '.join(reference.reference_names())}: "
        "`microbatch models list`) nor an .onnx file",
    )
