"""The committed reference models: reproducible from source, as good as the manifest says, self-describing.

Rebuilds both models once (module-scoped, ~1 min on 2 cores) into a temporary directory with the seed the
manifest records, and compares with the committed files on held-out generated events.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

# Everything below needs the optional models extra (torch etc.); skip the module cleanly without it.
pytest.importorskip("torch", reason="needs the 'models' extra")

import onnxruntime as ort
from sklearn.metrics import roc_auc_score
from tokenizers import Tokenizer

import service.models
from service.tools.generate import LOG_LABELS, METRIC_FEATURES, EventGenerator
from service.tools.modelbuild import build
from service.tools.modelbuild.common import roc_auc, sha256_file

# The module fixture's rebuild (~1 min on an idle 2-core machine) counts against the first test's timeout;
# allow for a machine busy with other work.
pytestmark = [pytest.mark.models, pytest.mark.timeout(900)]

COMMITTED = Path(service.models.__file__).parent
HOLDOUT_SEED = 424_242  # differs from the build seed and from the build's own holdout seed
HOLDOUT_EVENTS = 4000
# Rebuilt vs committed, both run in ORT on CPU. On the machine that built them they are bit-identical;
# elsewhere float reductions may be ordered differently, hence tolerances rather than equality.
SCORE_RTOL = 1e-3
SCORE_ATOL = 1e-4
MIN_AGREEMENT = 0.99
MAX_ARTIFACT_BYTES = 10 * 1024 * 1024


def session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def manifest(directory: Path) -> dict:
    return json.loads((directory / "manifest.json").read_text())


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    seeds = {entry["built_with"]["seed"] for entry in manifest(COMMITTED)["models"].values()}
    assert len(seeds) == 1, f"models built with different seeds: {seeds}"
    out = tmp_path_factory.mktemp("rebuilt")
    build(out, seed=seeds.pop())
    return out


@pytest.fixture(scope="module")
def metrics_holdout() -> tuple[np.ndarray, np.ndarray]:
    events, labels = EventGenerator(HOLDOUT_SEED).metrics_labeled(HOLDOUT_EVENTS, anomaly_ratio=0.05)
    x = np.array([[e[f] for f in METRIC_FEATURES] for e in events], dtype=np.float32)
    return x, labels


@pytest.fixture(scope="module")
def logs_holdout() -> tuple[list[str], np.ndarray]:
    events, labels = EventGenerator(HOLDOUT_SEED).logs_labeled(HOLDOUT_EVENTS)
    return [e["message"] for e in events], labels


def run_metrics(directory: Path, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    score, flag = session(directory / "metrics-anomaly.onnx").run(["score", "is_anomaly"], {"features": x})
    return score, flag


def run_text(directory: Path, texts: list[str], batch: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Tokenize (padding each batch to its longest item, as the service does) and classify."""
    tok = Tokenizer.from_file(str(directory / "log-classifier.tokenizer.json"))
    sess = session(directory / "log-classifier.onnx")
    classes, scores = [], []
    for start in range(0, len(texts), batch):
        ids, mask = encode(tok, texts[start : start + batch])
        cls, score = sess.run(["class_index", "score"], {"input_ids": ids, "attention_mask": mask})
        classes.append(cls)
        scores.append(score)
    return np.concatenate(classes), np.concatenate(scores)


def encode(tok: Tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encodings = tok.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    return ids, mask


# ---------------------------------------------------------------- (a) rebuild reproduces the committed models


def test_rebuilt_metrics_model_agrees(rebuilt: Path, metrics_holdout: tuple[np.ndarray, np.ndarray]) -> None:
    x, _ = metrics_holdout
    committed_score, committed_flag = run_metrics(COMMITTED, x)
    rebuilt_score, rebuilt_flag = run_metrics(rebuilt, x)
    np.testing.assert_allclose(rebuilt_score, committed_score, rtol=SCORE_RTOL, atol=SCORE_ATOL)
    assert (rebuilt_flag == committed_flag).mean() >= MIN_AGREEMENT


def test_rebuilt_tokenizer_is_identical(rebuilt: Path, logs_holdout: tuple[list[str], np.ndarray]) -> None:
    texts, _ = logs_holdout
    committed = Tokenizer.from_file(str(COMMITTED / "log-classifier.tokenizer.json"))
    again = Tokenizer.from_file(str(rebuilt / "log-classifier.tokenizer.json"))
    assert committed.get_vocab() == again.get_vocab()
    assert [e.ids for e in committed.encode_batch(texts[:500])] == [
        e.ids for e in again.encode_batch(texts[:500])
    ]


def test_rebuilt_text_model_agrees(rebuilt: Path, logs_holdout: tuple[list[str], np.ndarray]) -> None:
    texts, _ = logs_holdout
    committed_cls, committed_score = run_text(COMMITTED, texts)
    rebuilt_cls, rebuilt_score = run_text(rebuilt, texts)
    assert (rebuilt_cls == committed_cls).mean() >= MIN_AGREEMENT
    same = rebuilt_cls == committed_cls
    np.testing.assert_allclose(rebuilt_score[same], committed_score[same], rtol=SCORE_RTOL, atol=SCORE_ATOL)


def test_rebuild_reports_the_committed_quality(rebuilt: Path) -> None:
    committed, again = manifest(COMMITTED)["models"], manifest(rebuilt)["models"]
    assert committed.keys() == again.keys()
    for name in committed:
        for key, value in committed[name]["quality"].items():
            assert again[name]["quality"][key] == pytest.approx(value, abs=0.01), (name, key)


# ---------------------------------------------------------------- (b) quality of the committed models


def test_metrics_model_quality(metrics_holdout: tuple[np.ndarray, np.ndarray]) -> None:
    x, labels = metrics_holdout
    score, flag = run_metrics(COMMITTED, x)
    auc = roc_auc_score(labels, score)
    assert auc >= 0.95
    assert roc_auc(score, labels) == pytest.approx(auc, abs=1e-9)  # the build's numpy AUC is right
    # The baked threshold is a sensible operating point: most anomalies caught, few false alarms.
    assert flag[labels].mean() >= 0.7
    assert flag[~labels].mean() <= 0.02


def test_text_model_quality(logs_holdout: tuple[list[str], np.ndarray]) -> None:
    texts, labels = logs_holdout
    classes, scores = run_text(COMMITTED, texts)
    assert (classes == labels).mean() >= 0.90
    for i, label in enumerate(LOG_LABELS):
        assert (classes[labels == i] == i).mean() >= 0.8, label
    assert ((scores > 0) & (scores <= 1)).all()


def test_manifest_quality_meets_targets() -> None:
    models = manifest(COMMITTED)["models"]
    assert models["metrics-anomaly"]["quality"]["roc_auc"] >= 0.95
    assert models["log-classifier"]["quality"]["accuracy"] >= 0.90


# ---------------------------------------------------------------- (c) padding invariance


def test_text_result_does_not_depend_on_batch_padding(logs_holdout: tuple[list[str], np.ndarray]) -> None:
    texts, _ = logs_holdout
    tok = Tokenizer.from_file(str(COMMITTED / "log-classifier.tokenizer.json"))
    sess = session(COMMITTED / "log-classifier.onnx")
    longest = max(texts, key=len)
    for text in sorted(texts, key=len)[:: len(texts) // 20]:
        ids, mask = encode(tok, [text])
        alone = sess.run(None, {"input_ids": ids, "attention_mask": mask})
        ids, mask = encode(tok, [text, longest])
        assert ids.shape[1] > 0
        batched = sess.run(None, {"input_ids": ids, "attention_mask": mask})
        # Extra padding beyond what the tokenizer added, up to and past max_length.
        wide = np.pad(ids, ((0, 0), (0, 80 - ids.shape[1])))
        wide_mask = np.pad(mask, ((0, 0), (0, 80 - mask.shape[1])))
        padded = sess.run(None, {"input_ids": wide, "attention_mask": wide_mask})
        for other in (batched, padded):
            assert other[0][0] == alone[0][0]
            assert abs(float(other[1][0]) - float(alone[1][0])) < 1e-4


# ---------------------------------------------------------------- (d)-(f) manifest, metadata, size


def test_manifest_sha256_match_the_files() -> None:
    for name, entry in manifest(COMMITTED)["models"].items():
        assert entry["files"][entry["file"]] == entry["sha256"], name
        for file, digest in entry["files"].items():
            assert sha256_file(COMMITTED / file) == digest, file


def test_manifest_entries() -> None:
    models = manifest(COMMITTED)["models"]
    assert set(models) == {"metrics-anomaly", "log-classifier"}
    assert models["metrics-anomaly"]["processor"] == "features"
    assert models["log-classifier"]["processor"] == "text"
    assert models["log-classifier"]["tokenizer"] in models["log-classifier"]["files"]
    for entry in models.values():
        assert entry["rebuild"] == "microbatch models build"
        assert {"torch", "onnx", "seed", "train_seconds"} <= set(entry["built_with"])
        assert entry["quality"]["holdout_events"] > 0


def test_metrics_model_metadata_and_shapes(metrics_holdout: tuple[np.ndarray, np.ndarray]) -> None:
    sess = session(COMMITTED / "metrics-anomaly.onnx")
    meta = sess.get_modelmeta().custom_metadata_map
    assert meta["microbatch.name"] == "metrics-anomaly"
    assert meta["microbatch.version"] == manifest(COMMITTED)["models"]["metrics-anomaly"]["version"]
    assert meta["microbatch.processor"] == "features"
    assert json.loads(meta["microbatch.features"]) == list(METRIC_FEATURES)
    [inp] = sess.get_inputs()
    assert (inp.name, inp.type, inp.shape) == ("features", "tensor(float)", ["batch", len(METRIC_FEATURES)])
    assert [(o.name, o.type) for o in sess.get_outputs()] == [
        ("score", "tensor(float)"),
        ("is_anomaly", "tensor(bool)"),
    ]
    x, _ = metrics_holdout
    for n in (1, 3, 16):
        score, flag = sess.run(None, {"features": x[:n]})
        assert score.shape == flag.shape == (n,)


def test_text_model_metadata_and_shapes(logs_holdout: tuple[list[str], np.ndarray]) -> None:
    sess = session(COMMITTED / "log-classifier.onnx")
    meta = sess.get_modelmeta().custom_metadata_map
    assert meta["microbatch.name"] == "log-classifier"
    assert meta["microbatch.version"] == manifest(COMMITTED)["models"]["log-classifier"]["version"]
    assert meta["microbatch.processor"] == "text"
    assert meta["microbatch.text_field"] == "message"
    assert meta["microbatch.max_length"] == "64"
    assert json.loads(meta["microbatch.labels"]) == list(LOG_LABELS)
    assert meta["microbatch.tokenizer"] == "log-classifier.tokenizer.json"
    assert (COMMITTED / meta["microbatch.tokenizer"]).is_file()
    assert [(i.name, i.type, i.shape) for i in sess.get_inputs()] == [
        ("input_ids", "tensor(int64)", ["batch", "seq"]),
        ("attention_mask", "tensor(int64)", ["batch", "seq"]),
    ]
    assert [(o.name, o.type) for o in sess.get_outputs()] == [
        ("class_index", "tensor(int64)"),
        ("score", "tensor(float)"),
    ]
    tok = Tokenizer.from_file(str(COMMITTED / meta["microbatch.tokenizer"]))
    assert tok.token_to_id("[PAD]") == 0
    texts, _ = logs_holdout
    for n in (1, 3, 16):
        ids, mask = encode(tok, texts[:n])
        assert ids.shape[1] <= 64
        cls, score = sess.run(None, {"input_ids": ids, "attention_mask": mask})
        assert cls.shape == score.shape == (n,)


def test_artifacts_are_small() -> None:
    total = sum(p.stat().st_size for p in COMMITTED.iterdir() if p.is_file() and p.suffix != ".py")
    assert total < MAX_ARTIFACT_BYTES
