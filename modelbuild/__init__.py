"""Build the reference ONNX models from generated data: ``python -m modelbuild`` (``make models``).

Developer tooling of a source checkout, not in the installed package (nothing under ``service/`` imports
it); needs the ``models`` extra (torch, onnx, onnxscript). :func:`build` trains each requested model with
fixed seeds on a fixed thread count, exports it to ``out_dir`` as a self-describing ONNX file
(``microbatch.*`` metadata), validates it with onnxruntime, measures its quality on held-out generated
events and records all of it in ``out_dir/manifest.json``.
"""

# ruff: noqa: E402  (the variable below must be set before torch is imported)

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Callable, Sequence

# oneDNN, which runs torch's CPU layers, picks its kernels by the CPU's instruction set, and its AVX-512
# kernels round differently from its AVX2 ones; training amplifies that (host-anomaly's scores: up to 2.9%
# apart). The committed models were built on AVX2 kernels, so the build pins them and reproduces them on
# any x86-64 CPU with AVX2. oneDNN reads the variable once, at its first use: before torch runs anything
# (tests/conftest.py sets it too, for a test session in which other tests use torch first).
BUILD_ISA = "AVX2"
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", BUILD_ISA)

import onnx
import torch

from modelbuild import host_anomaly, log_classifier, metrics_anomaly
from modelbuild.common import BUILD_THREADS, deterministic_torch, sha256_file
from modelbuild.export import OPSET
from modelbuild.types import BuiltModel

MANIFEST = "manifest.json"
REBUILD_COMMAND = "make models"

BUILDERS: dict[str, Callable[[pathlib.Path, int], BuiltModel]] = {
    metrics_anomaly.NAME: metrics_anomaly.build,
    log_classifier.NAME: log_classifier.build,
    host_anomaly.NAME: host_anomaly.build,
}
"""Model name -> builder; the names are what ``names`` selects and the manifest's keys."""


def build(out_dir: pathlib.Path, names: Sequence[str] | None = None, seed: int = 7) -> dict:
    """Build the named models (default: all) into ``out_dir`` and return the manifest written there.

    Entries of models not rebuilt are kept from an existing manifest, so building one model leaves the
    other's record alone. Raises ``ValueError`` for an unknown name. Each model is built under its own
    deterministic torch settings (seeded with ``seed``), so a model's weights do not depend on which other
    models were built in the same call.
    """
    selected = list(BUILDERS) if names is None else list(dict.fromkeys(names))
    unknown = [n for n in selected if n not in BUILDERS]
    if unknown:
        raise ValueError(f"unknown model name(s) {unknown}; known: {sorted(BUILDERS)}")
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    manifest_path = out_dir / MANIFEST
    manifest: dict = {"models": {}}
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        manifest.setdefault("models", {})

    for name in selected:
        with deterministic_torch(seed):
            built = BUILDERS[name](out_dir, seed)
        manifest["models"][name] = _entry(out_dir, built, seed)

    manifest["models"] = dict(sorted(manifest["models"].items()))
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _entry(out_dir: pathlib.Path, built: BuiltModel, seed: int) -> dict:
    files = [built.file, *built.extra_files.values()]
    digests = {f: sha256_file(out_dir / f) for f in files}
    entry: dict = {
        "file": built.file,
        "sha256": digests[built.file],
        "version": built.version,
        "processor": built.processor,
    }
    entry.update(built.extra_files)
    entry["files"] = digests
    # Scalars in "quality" (what `microbatch models list` prints), breakdowns in "quality_detail".
    entry["quality"] = {k: v for k, v in built.quality.items() if not isinstance(v, dict)}
    entry["quality_detail"] = {k: v for k, v in built.quality.items() if isinstance(v, dict)}
    entry["built_with"] = {
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "exporter": "torch.onnx.export(dynamo=True)",
        "opset": OPSET,
        "seed": seed,
        "threads": BUILD_THREADS,
        "train_seconds": round(built.train_seconds, 1),
    }
    entry["rebuild"] = REBUILD_COMMAND
    return entry
