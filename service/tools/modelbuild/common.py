"""Helpers shared by the model builders: deterministic torch settings, hashing and rank-based ROC AUC."""

from __future__ import annotations

import contextlib
import hashlib
import pathlib
from collections.abc import Iterator

import numpy as np
import torch

# Fixed thread count: float reductions are ordered differently with a different number of threads, so the
# committed weights are reproducible (closely, not bit-for-bit across CPUs) only at a fixed count. Two is
# the size of the machine the committed models were built on.
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
