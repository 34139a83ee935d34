"""The GPU check's report (``scripts/gpu-check.sh``): for each model it swept, the model alone through ONNX
Runtime (on CUDA: with I/O binding, the engine's own path) against the whole service on the broker, size
by size, and whether the provider that served is the one required.

    python -m bench.gpucheck DIR [--require CUDAExecutionProvider]

Reads every ``sweep-<model>.json`` in DIR (``microbatch sweep --pipeline`` wrote them), prints one table per
model and a last line, and exits 1 when a sweep ran on another provider than ``--require`` (CUDA asked for
but not used) or did not complete, 2 when DIR holds no sweep.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

TARGET = 0.9
"""The service's events/s over the model's alone, at the same batch size, that the GPU work aims at."""


def table(report: dict[str, Any]) -> list[str]:
    """The rows of one sweep: size, the model alone (items/s, p50 and p99 ms of a batch, device memory),
    the service (events/s), and the service over the model."""
    header = "| batch size | model alone /s | p50 ms | p99 ms | device MiB | service /s | service / model |"
    lines = [header, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in report["rows"]:
        alone = row.get("items_per_s")
        service = (row.get("pipeline") or {}).get("events_per_s")
        memory = row.get("device_memory_used_bytes")
        ratio = service / alone if service and alone else None
        lines.append(
            f"| {row['size']} | {_num(alone, '{:,.0f}')} | {_num(row.get('p50_ms'), '{:.3f}')} | "
            f"{_num(row.get('p99_ms'), '{:.3f}')} | {_num(memory and memory / 2**20, '{:,.0f}')} | "
            f"{_num(service, '{:,.0f}')} | {_num(ratio, '{:.2f}')} |"
        )
    return lines


def verdict(report: dict[str, Any], require: str) -> str | None:
    """Why this sweep does not count as a GPU check (another provider served, or it stopped short), or
    None when it does."""
    provider = report["machine"].get("provider")
    if provider != require:
        return f"{require} was not used: {provider} served"
    if report["stop"]["reason"] != "completed":
        return f"the sweep stopped: {report['stop'].get('detail') or report['stop']['reason']}"
    return None


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="where the sweeps wrote sweep-<model>.json")
    parser.add_argument("--require", default="CUDAExecutionProvider", help="the provider that must serve")
    args = parser.parse_args(argv)
    reports = sorted(args.dir.glob("sweep-*.json"))
    if not reports:
        print(f"gpu-check: no sweep-*.json in {args.dir}", file=sys.stderr)
        return 2
    problems = []
    for path in reports:
        report = json.loads(path.read_text())
        machine = report["machine"]
        gpu = machine.get("gpu")
        device = gpu.get("name", "a GPU") if isinstance(gpu, dict) else gpu or "no GPU"
        print(f"\n{report['model']['name']} on {machine.get('provider')} ({device})")
        print("\n".join(table(report)))
        why = verdict(report, args.require)
        if why:
            problems.append(f"{report['model']['name']}: {why}")
    if problems:
        print("\ngpu-check FAILED: " + "; ".join(problems))
        return 1
    print(f"\ngpu-check passed: every model served on {args.require} (target: service / model >= {TARGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
