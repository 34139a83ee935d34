"""``python -m bench [--scenario A|B|C|all] [--quick] ...`` (``make bench``): the service against its
baselines, side by side, on the real broker (:mod:`bench.command`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from bench import command
from service.cli import execute


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=command.__doc__.splitlines()[0])
    command.add_arguments(parser)
    return execute(command, parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
