"""``python -m modelbuild [--out DIR] [--seed N] [NAME ...]``: rebuild the reference models."""

from __future__ import annotations

import argparse
import json
import pathlib

from modelbuild import BUILDERS, build
from service.models.reference import MODELS_DIR as DEFAULT_OUT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m modelbuild", description="Rebuild the reference models.")
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"models to build: {', '.join(BUILDERS)} (default: all)"
    )
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help=f"default: {DEFAULT_OUT}")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(BUILDERS))
    if unknown:
        parser.error(f"unknown model name(s): {', '.join(unknown)}")
    manifest = build(args.out, args.names or None, seed=args.seed)
    print(json.dumps(manifest, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
