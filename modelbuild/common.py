"""Helpers shared by the model builders: deterministic torch settings, hashing, rank-based ROC AUC, and the
training and the check against torch of an exported anomaly autoencoder."""

from __future__ import annotations

import contextlib
import hashlib
import pathlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

# Fixed thread count: float reductions are ordered differently with a different number of threads, so the
# committed weights are reproducible (closely, with the kernels' instruction set pinned too: see
# ``BUILD_ISA`` in the package) only at a fixed count. Two is the size of the machine the committed models
# were built on.
BUILD_THREADS = 2


@contextlib.contextmanager
def deterministic_torch(seed: int) -> Iterator[None]:
    """Seed torch, pin the thread count and require deterministic kernels; restore the settings after."""
    threads = torch.get_num_threads()
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    torch.manual_seed(seed)
    torch.set_num_threads(BUILD_THREADS)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was_deterministic)
        torch.set_num_threads(threads)


def sha256_file(path: pathlib.Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC AUC from ranks (Mann-Whitney U), ties averaged; equals scikit-learn's ``roc_auc_score``.

    ``labels`` is bool or 0/1; both classes must be present.
    """
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels).astype(bool)
    n_pos = int(labels.sum())
    n_neg = len(labels) - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("roc_auc needs both positive and negative labels")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    ranks = np.empty(len(scores), dtype=np.float64)
    # Average rank over each run of tied scores (1-based ranks).
    run_start = np.flatnonzero(np.r_[True, np.diff(sorted_scores) != 0])
    run_end = np.r_[run_start[1:], len(scores)]
    avg = (run_start + run_end + 1) / 2.0
    ranks[order] = np.repeat(avg, run_end - run_start)
    u = ranks[labels].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def _validate_autoencoder(name: str, session: Any, model: Any, x: torch.Tensor) -> None:
    """An exported anomaly autoencoder (``features`` -> ``score``, ``is_anomaly``, a ``threshold`` buffer)
    must match torch on batch sizes 1, 3 and 16. Raises AssertionError naming ``name``."""
    from modelbuild.export import run_session

    for n in (1, 3, 16):
        out = run_session(session, {"features": x[:n].numpy()})
        with torch.no_grad():
            score, flag = model(x[:n])
        if out["score"].shape != (n,) or out["score"].dtype != np.float32 or out["is_anomaly"].dtype != bool:
            raise AssertionError(f"{name}: unexpected outputs for batch {n}: {out}")
        np.testing.assert_allclose(out["score"], score.numpy(), rtol=1e-4, atol=1e-5)
        # Decisions must agree except where float noise may straddle the threshold.
        threshold = float(model.threshold)
        clear = np.abs(score.numpy() - threshold) > 1e-4 * threshold
        if not np.array_equal(out["is_anomaly"][clear], flag.numpy()[clear]):
            raise AssertionError(f"{name}: is_anomaly differs between torch and onnxruntime")


def train_autoencoder(model: Any, x: torch.Tensor, seed: int, *, epochs: int, batch: int, lr: float) -> None:
    """Train ``model`` (its ``residual(x)`` is what it cannot reconstruct) to reconstruct ``x``: AdamW with
    a one-cycle schedule, mini-batches in an order drawn from ``seed``. Leaves it in eval mode."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    steps = epochs * ((len(x) + batch - 1) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps)
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=gen)
        for start in range(0, len(x), batch):
            loss = model.residual(x[perm[start : start + batch]]).pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    model.eval()


def export_autoencoder(
    model: Any, x: torch.Tensor, path: pathlib.Path, name: str, metadata: dict[str, str]
) -> Any:
    """Export an anomaly autoencoder (input ``features`` float32 [batch, n], outputs ``score`` and
    ``is_anomaly``, a dynamic batch axis) with ``metadata`` to ``path``, check it against torch on rows of
    ``x``, and return its ONNX Runtime session."""
    from modelbuild.export import export_onnx, ort_session, save_onnx

    onnx_model = export_onnx(
        model,
        (x[:4],),
        input_names=["features"],
        output_names=["score", "is_anomaly"],
        dynamic_shapes={"features": {0: torch.export.Dim("batch")}},
        metadata=metadata,
    )
    save_onnx(onnx_model, path)
    session = ort_session(path)
    _validate_autoencoder(name, session, model, x)
    return session
