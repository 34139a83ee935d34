"""The ``metrics-anomaly`` reference model: an MLP autoencoder over :data:`METRIC_FEATURES`.

Trained on normal events only; an event whose features it cannot reconstruct is anomalous. Everything the
service would otherwise have to know is baked into the graph as buffers: the log1p of heavy-tailed
fields, the mean/std normalisation, the per-feature residual scale and the decision threshold. So the graph
takes raw event fields and returns the decision.

Graph contract: input ``features`` float32 [batch, F] in METRIC_FEATURES order; outputs ``score`` float32
[batch] (mean squared reconstruction error in units of each feature's typical training residual, ~1 for a
typical normal event) and ``is_anomaly`` bool [batch] (``score > threshold``).
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from modelbuild.common import export_autoencoder, roc_auc, train_autoencoder
from modelbuild.export import run_session
from modelbuild.types import BuiltModel
from service.tools.generate import ANOMALY_KINDS, METRIC_FEATURES, EventGenerator

if TYPE_CHECKING:
    from onnxruntime import InferenceSession

NAME = "metrics-anomaly"
VERSION = "1"
FILE = f"{NAME}.onnx"

# Rates, sizes and durations are heavy-tailed and multiplicative; percentages are not.
_LINEAR_FEATURES = frozenset({"cpu_pct", "mem_pct"})

TRAIN_EVENTS = 20_000
VALIDATION_EVENTS = 5_000
HOLDOUT_EVENTS = 5_000
HOLDOUT_ANOMALY_RATIO = 0.05
HOLDOUT_SEED_OFFSET = 1_000  # holdout generator seed = build seed + this: events never seen in training
# The threshold flags this share of normal validation events: a 0.5% false-positive budget.
NORMAL_QUANTILE = 0.995

HIDDEN = 32
BOTTLENECK = 4  # normal data has few degrees of freedom (load, service); a narrow code forces correlations
EPOCHS = 30
BATCH = 256
LR = 3e-3


def features_matrix(events: list[dict]) -> np.ndarray:
    """Events -> float32 [n, F] in METRIC_FEATURES order (what a caller feeds the graph)."""
    return np.array([[e[f] for f in METRIC_FEATURES] for e in events], dtype=np.float32)


class MetricsAutoencoder(nn.Module):
    """Normalise -> encode -> decode -> standardised reconstruction error -> threshold."""

    # Buffers and submodules, declared for the type checker (nn.Module's __getattr__ hides them).
    log_mask: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    residual_scale: torch.Tensor
    threshold: torch.Tensor
    encoder: nn.Sequential
    decoder: nn.Sequential

    def __init__(self, n_features: int, log_mask: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("log_mask", log_mask.bool())
        # Filled in by fit_normalisation / calibrate; buffers so that they are exported as constants.
        self.register_buffer("mean", torch.zeros(n_features))
        self.register_buffer("std", torch.ones(n_features))
        self.register_buffer("residual_scale", torch.ones(n_features))
        self.register_buffer("threshold", torch.tensor(float("inf")))
        act = nn.GELU
        self.encoder = nn.Sequential(
            nn.Linear(n_features, HIDDEN),
            act(),
            nn.Linear(HIDDEN, HIDDEN),
            act(),
            nn.Linear(HIDDEN, BOTTLENECK),
        )
        self.decoder = nn.Sequential(
            nn.Linear(BOTTLENECK, HIDDEN),
            act(),
            nn.Linear(HIDDEN, HIDDEN),
            act(),
            nn.Linear(HIDDEN, n_features),
        )

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        # Clamp before log1p: a negative (broken) reading must give a large error, not NaN.
        logged = torch.where(self.log_mask, torch.log1p(torch.clamp(x, min=0.0)), x)
        return (logged - self.mean) / self.std

    def residual(self, x: torch.Tensor) -> torch.Tensor:
        z = self.transform(x)
        return self.decoder(self.encoder(z)) - z

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        score = ((self.residual(features) / self.residual_scale) ** 2).mean(dim=1)
        return score, score > self.threshold

    @torch.no_grad()
    def fit_normalisation(self, x: torch.Tensor) -> None:
        logged = torch.where(self.log_mask, torch.log1p(torch.clamp(x, min=0.0)), x)
        self.mean.copy_(logged.mean(dim=0))
        self.std.copy_(logged.std(dim=0).clamp(min=1e-6))


def build(out_dir: pathlib.Path, seed: int) -> BuiltModel:
    """Generate data, train, calibrate, export to ``out_dir / FILE`` and measure holdout quality with ORT."""
    started = time.perf_counter()
    # One normal stream split at random (not by time): the two sets must cover the same hours of the day,
    # since scores are higher at peak traffic and a threshold set on peak hours alone would be too lax.
    x_all = features_matrix(EventGenerator(seed).metrics(TRAIN_EVENTS + VALIDATION_EVENTS, anomaly_ratio=0.0))
    order = np.random.default_rng(seed).permutation(len(x_all))
    x_train = torch.from_numpy(x_all[order[:TRAIN_EVENTS]])
    x_val = torch.from_numpy(x_all[order[TRAIN_EVENTS:]])

    log_mask = torch.tensor([f not in _LINEAR_FEATURES for f in METRIC_FEATURES])
    model = MetricsAutoencoder(len(METRIC_FEATURES), log_mask)
    model.fit_normalisation(x_train)
    train_autoencoder(model, x_train, seed, epochs=EPOCHS, batch=BATCH, lr=LR)
    with torch.no_grad():
        # Standardise errors per feature: a feature the model reconstructs tightly should count as much
        # when it is off as one with loose reconstructions.
        model.residual_scale.copy_(model.residual(x_train).pow(2).mean(dim=0).sqrt().clamp(min=1e-3))
        val_scores = model(x_val)[0].numpy()
        model.threshold.fill_(float(np.quantile(val_scores, NORMAL_QUANTILE)))
    train_seconds = time.perf_counter() - started

    threshold = float(model.threshold)
    metadata = {
        "microbatch.name": NAME,
        "microbatch.version": VERSION,
        "microbatch.processor": "features",
        "microbatch.features": json.dumps(list(METRIC_FEATURES)),
        "microbatch.threshold": repr(threshold),
        "microbatch.description": (
            "Autoencoder anomaly detector over host/service metrics; score = standardised "
            "reconstruction error, is_anomaly = score > threshold."
        ),
    }
    session = export_autoencoder(model, x_val, out_dir / FILE, NAME, metadata)
    quality = evaluate(session, seed + HOLDOUT_SEED_OFFSET)
    quality["threshold"] = round(threshold, 6)
    return BuiltModel(
        name=NAME,
        version=VERSION,
        processor="features",
        file=FILE,
        extra_files={},
        quality=quality,
        train_seconds=train_seconds,
    )


def evaluate(session: InferenceSession, holdout_seed: int) -> dict:
    """Quality of an exported model on fresh generated events (5% anomalies of every kind)."""
    events, kinds = EventGenerator(holdout_seed).metrics_with_kinds(HOLDOUT_EVENTS, HOLDOUT_ANOMALY_RATIO)
    out = run_session(session, {"features": features_matrix(events)})
    score, flagged = out["score"], out["is_anomaly"]
    anomalous = kinds > 0
    by_kind = {}
    for k in range(1, len(ANOMALY_KINDS)):
        rows = (kinds == 0) | (kinds == k)
        if (kinds == k).any():
            by_kind[ANOMALY_KINDS[k]] = round(roc_auc(score[rows], kinds[rows] == k), 4)
    return {
        "roc_auc": round(roc_auc(score, anomalous), 4),
        "recall": round(float(flagged[anomalous].mean()), 4),
        "false_positive_rate": round(float(flagged[~anomalous].mean()), 4),
        "roc_auc_by_kind": by_kind,
        "holdout_events": HOLDOUT_EVENTS,
        "holdout_anomaly_ratio": HOLDOUT_ANOMALY_RATIO,
        "holdout_seed": holdout_seed,
    }
