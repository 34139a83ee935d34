"""What reading a model's outputs costs, per rule of ``service/processors/outputs.py``: a batch's outputs,
as ONNX Runtime returns them for each kind of converted model, turned into one result dict per row, then
encoded as the service encodes a result. Pure: no broker, no model run (the outputs are made here with the
shapes and types the converters' sessions return).

Prints a markdown table: per rule, microseconds per row to read and to encode, the medians of ``--repeats``
runs of ``--batches`` batches of ``--size`` rows. With ``--against REV``, the first row is also timed with
``rows_to_results`` as it was at git revision ``REV`` (before the rules), side by side in the same run.

    .venv/bin/python bench/compare_outputs.py [--size 16] [--batches 2000] [--repeats 7] [--against REV]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from service.processors.base import Classifier
from service.processors.outputs import Plan, Results

RNG = np.random.default_rng(0)
CLASSES = (0, 1, 2)


def cases(size: int) -> dict[str, tuple[Results, dict[str, Any]]]:
    """Each rule with the outputs of one real kind of model, ``size`` rows."""
    proba = RNG.dirichlet(np.ones(3), size).astype(np.float32)
    label = proba.argmax(axis=1).astype(np.int64)
    classifier = Classifier(CLASSES, frozenset({"label"}), frozenset({"probabilities"}))
    zipmap = [dict(zip(CLASSES, row, strict=True)) for row in proba.tolist()]
    return {
        "tensors [N] (metrics-anomaly: score, is_anomaly)": (
            Results(Plan(logits=None)),
            {"score": RNG.random(size, dtype=np.float32), "is_anomaly": RNG.random(size) > 0.5},
        ),
        "[N, 1] (IsolationForest: label, scores)": (
            Results(Plan(logits=None)),
            {"label": np.ones((size, 1), np.int64), "scores": RNG.random((size, 1), dtype=np.float32)},
        ),
        "ZipMap (GradientBoosting: output_label, output_probability)": (
            Results(Plan(logits=None, classifier=classifier)),
            {"label": label, "probabilities": zipmap},
        ),
        "per-class scores (XGBoost: label, probabilities [N, 3])": (
            Results(Plan(logits=None, classifier=classifier)),
            {"label": label, "probabilities": proba},
        ),
        "label and scores named (LABELS=a,b,c)": (
            Results(Plan(logits=None, names=("a", "b", "c"), classifier=classifier)),
            {"label": label, "probabilities": proba},
        ),
        "logits [N, 3] (Hugging Face: label, score, probabilities)": (
            Results(Plan(names=("a", "b", "c"))),
            {"logits": RNG.normal(size=(size, 3)).astype(np.float32)},
        ),
    }


def per_row_us(run: Callable[[], object], batches: int, size: int) -> float:
    start = time.perf_counter()
    for _ in range(batches):
        run()
    return (time.perf_counter() - start) / batches / size * 1e6


def old_rows_to_results(rev: str) -> Callable[[dict[str, Any], int], list[Any]]:
    """``rows_to_results`` from ``service/processors/base.py`` at ``rev``, loaded under another name."""
    source = subprocess.run(
        ["git", "show", f"{rev}:service/processors/base.py"], check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "base_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("base_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["base_before"] = module
    spec.loader.exec_module(module)
    function: Callable[[dict[str, Any], int], list[Any]] = module.rows_to_results
    return function


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--against", default=None, help="a git revision with the old rows_to_results")
    args = parser.parse_args()
    encode = msgspec.json.Encoder().encode
    rows: list[tuple[str, float, float, Any]] = []  # name, read and encode us/row, an example
    table = cases(args.size)
    if args.against:
        before = old_rows_to_results(args.against)
        results, outputs = next(iter(table.values()))
        reads: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(args.repeats):  # interleaved, so both see the same machine
            reads["before"].append(per_row_us(lambda: before(outputs, args.size), args.batches, args.size))
            reads["after"].append(per_row_us(lambda: results(outputs, args.size), args.batches, args.size))
        b, a = statistics.median(reads["before"]), statistics.median(reads["after"])
        print(f"tensors [N]: before {b:.2f} us/row, after {a:.2f} us/row, after/before {a / b:.2f}\n")
    for name, (results, outputs) in table.items():
        made = results(outputs, args.size)
        read_one = partial(results, outputs, args.size)
        encode_all = partial(_encode_all, encode, made)
        read = [per_row_us(read_one, args.batches, args.size) for _ in range(args.repeats)]
        enc = [per_row_us(encode_all, args.batches, args.size) for _ in range(args.repeats)]
        rows.append((name, statistics.median(read), statistics.median(enc), made[0]))
    print(f"| outputs (batches of {args.size}) | read, us/row | encode, us/row | a result |")
    print("| --- | --- | --- | --- |")
    for name, read_us, encode_us, example in rows:
        shown = encode({k: round(v, 3) if isinstance(v, float) else v for k, v in example.items()}).decode()
        print(f"| {name} | {read_us:.2f} | {encode_us:.2f} | `{shown[:90]}` |")


def _encode_all(encode: Callable[[Any], bytes], results: list[Any]) -> list[bytes]:
    return [encode(r) for r in results]


if __name__ == "__main__":
    main()
