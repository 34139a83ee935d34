"""Small models built with real frameworks and exported with their real converters ("bring your own model").

Each builder trains a tiny model on generated events of :data:`TRAIN_SEED`, converts it, writes the files
into a given folder and returns a :class:`Built`: the ``.onnx`` path, the ``MICROBATCH_*`` settings that serve
it (nothing but the path and what the input needs: the processor is left for the service to infer), a way
to make input events, and the framework's own result for each of them, in the shape the service's result
must take. The converters' graphs are left as the converters wrote them (ZipMap, ``[N, 1]`` outputs, string
class labels): coping with them is the service's job, and what the tests check.

Feature models (cases a-f) get :data:`FEATURES` of the generator's monitoring events. The frameworks train
and predict on the events' values as they are (float64); the service feeds them as float32, the models'
input type. sklearn's trees and XGBoost cast to float32 themselves, so they take the same branches; and
LightGBM trained on the float64 values gives the same branches as its float32 ONNX graph on 2,000 events of
each of three seeds, where trained on float32-cast values it did not (2-5 events in 2,000 took another
branch: its thresholds then sit on a float32 value, which the converter's float32 threshold ties).

Everything is seeded; each builder takes well under 10 s on 2 cores.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from service.tools.generate import LOG_LABELS, EventGenerator
from tests.support.harness import metrics_events

TRAIN_SEED = 101
"""Training events come from this seed; the tests send events of other seeds."""
TRAIN_EVENTS = 3000
FEATURES: tuple[str, ...] = ("req_rate", "cpu_pct", "mem_pct", "load_1m", "disk_io_mbps", "net_in_mbps")
"""The event fields the feature models take, in input-column order (``MICROBATCH_MODEL__FEATURES``)."""
OPSET = 17  # ai.onnx for skl2onnx; onnxmltools supports at most 15
ML_OPSET = 3  # ai.onnx.ml: IsolationForest's default conversion fails (skl2onnx needs an explicit opset)
LEVEL_NAMES = ("low", "mid", "high")  # LogisticRegression's string classes
TEXT_LABELS = ("routine", "failure", "security")  # the BERT classifier's id2label
MAX_LENGTH = 128  # BERT truncation, in tokens (the text processor's default too)

Result = dict[str, Any]
Items = list[tuple[bytes, bytes]]


@dataclass(frozen=True)
class Built:
    """A converted model in its folder.

    ``settings``: the ``MICROBATCH_*`` settings (``model__path=...``) that serve it, beyond Kafka and topics.
    ``items(n, seed)``: ``n`` (key, value) Kafka records to send it. ``expect(values)``: the framework's
    result for each Kafka value, as the service must give it (``result`` of the output; JSON keys strings).
    """

    path: Path
    settings: dict[str, str]
    items: Callable[[int, int], Items]
    expect: Callable[[list[bytes]], list[Result]]


# ---------------------------------------------------------------- features (a-f)


def _feature_matrix(events: list[dict[str, Any]]) -> np.ndarray:
    """The events' :data:`FEATURES` as float64, the values they hold: what the frameworks train and predict
    on. The service feeds them as float32, the models' input type (see the module docstring)."""
    return np.array([[e[f] for f in FEATURES] for e in events], dtype=np.float64)


def _decoded(values: list[bytes]) -> np.ndarray:
    return _feature_matrix([msgspec.json.decode(v) for v in values])


def _training_set(classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Features of :data:`TRAIN_SEED` events and a class per row, from a load score (cpu + half the memory)
    cut at its quantiles, so the classes are about equally common, with 10 % of the labels redrawn at
    random, so the models' probabilities are not all 0 and 1."""
    x = _feature_matrix([msgspec.json.decode(v) for _, v in metrics_events(TRAIN_EVENTS, seed=TRAIN_SEED)])
    load = x[:, FEATURES.index("cpu_pct")] + 0.5 * x[:, FEATURES.index("mem_pct")]
    cuts = np.quantile(load, np.arange(1, classes) / classes)
    y = np.searchsorted(cuts, load)
    rng = np.random.default_rng(TRAIN_SEED)
    noisy = rng.random(len(y)) < 0.1
    y[noisy] = rng.integers(classes, size=int(noisy.sum()))
    return x, y


def _feature_model(folder: Path, onnx_model: Any, expect: Callable[[np.ndarray], list[Result]]) -> Built:
    """``onnx_model`` (a ModelProto; None: torch.onnx.export wrote it) as ``model.onnx``, served with the
    feature names."""
    path = folder / "model.onnx"
    if onnx_model is not None:
        path.write_bytes(onnx_model.SerializeToString())
    return Built(
        path=path,
        settings={"model__path": str(path), "model__features": ",".join(FEATURES)},
        items=lambda n, seed: metrics_events(n, seed=seed),
        expect=lambda values: expect(_decoded(values)),
    )


def _initial_types() -> list[tuple[str, Any]]:
    from skl2onnx.common.data_types import FloatTensorType

    return [("input", FloatTensorType([None, len(FEATURES)]))]


def _sklearn(folder: Path, model: Any, expect: Callable[[np.ndarray], list[Result]], **options: Any) -> Built:
    """``model`` converted by skl2onnx with its default options (``options``: the target opset)."""
    from skl2onnx import convert_sklearn

    options.setdefault("target_opset", OPSET)
    return _feature_model(folder, convert_sklearn(model, initial_types=_initial_types(), **options), expect)


def _classifier(model: Any, label_key: str, proba_key: str) -> Callable[[np.ndarray], list[Result]]:
    """The expected results of a classifier with ``predict`` and ``predict_proba``: per row, the predicted
    class under ``label_key`` and ``{str(class): probability}`` under ``proba_key`` (ZipMap's map in JSON)."""
    classes = [str(_plain(c)) for c in model.classes_]

    def expect(rows: np.ndarray) -> list[Result]:
        labels, proba = model.predict(rows), model.predict_proba(rows)
        return [
            {label_key: _plain(label), proba_key: {c: float(p) for c, p in zip(classes, row, strict=True)}}
            for label, row in zip(labels, proba, strict=True)
        ]

    return expect


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value JSON gives back (np.int64 -> int, np.str_ -> str)."""
    return value.item() if isinstance(value, np.generic) else value


def isolation_forest(folder: Path) -> Built:
    """(a) sklearn IsolationForest via skl2onnx. Outputs ``label`` int64 [N,1] (1 normal, -1 outlier) and
    ``scores`` float [N,1], which is sklearn's ``decision_function`` (checked: not ``score_samples``, which
    is it plus ``offset_``). Result: ``{"label": 1 | -1, "scores": float}``."""
    from sklearn.ensemble import IsolationForest

    x, _ = _training_set(2)
    model = IsolationForest(n_estimators=20, contamination=0.05, random_state=0).fit(x)

    def expect(rows: np.ndarray) -> list[Result]:
        labels, scores = model.predict(rows), model.decision_function(rows)
        return [{"label": int(lab), "scores": float(s)} for lab, s in zip(labels, scores, strict=True)]

    # The default opsets fail to convert ("ai.onnx.ml" 3 is what skl2onnx's IsolationForest needs).
    return _sklearn(folder, model, expect, target_opset={"": OPSET, "ai.onnx.ml": ML_OPSET})


def gradient_boosting(folder: Path, classes: int = 3) -> Built:
    """(b) sklearn GradientBoostingClassifier via skl2onnx, default options (ZipMap), int classes
    ``0..classes-1``. Outputs ``output_label`` int64 [N] and ``output_probability`` seq(map(int64, float)).
    Result: ``{"output_label": int, "output_probability": {"0": p0, "1": p1, ...}}``."""
    from sklearn.ensemble import GradientBoostingClassifier

    x, y = _training_set(classes)
    model = GradientBoostingClassifier(n_estimators=30, max_depth=3, random_state=0).fit(x, y)
    return _sklearn(folder, model, _classifier(model, "output_label", "output_probability"))


def logistic_regression(folder: Path) -> Built:
    """(c) sklearn LogisticRegression (standardised inputs, in a Pipeline) via skl2onnx, default options
    (ZipMap), string classes :data:`LEVEL_NAMES`. Outputs ``output_label`` string [N] and
    ``output_probability`` seq(map(string, float)). Result:
    ``{"output_label": "mid", "output_probability": {"high": p, "low": p, "mid": p}}``."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = _training_set(3)
    names = np.array(LEVEL_NAMES)[y]
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, names)
    return _sklearn(folder, model, _classifier(model, "output_label", "output_probability"))


def random_forest_regressor(folder: Path) -> Built:
    """(d) sklearn RandomForestRegressor via skl2onnx, predicting the event's ``latency_p99_ms`` (not a
    feature) from :data:`FEATURES`. Output ``variable`` float [N,1]. Result: ``{"variable": float}``."""
    from sklearn.ensemble import RandomForestRegressor

    events = [msgspec.json.decode(v) for _, v in metrics_events(TRAIN_EVENTS, seed=TRAIN_SEED)]
    x = _feature_matrix(events)
    target = np.array([e["latency_p99_ms"] for e in events])
    model = RandomForestRegressor(n_estimators=20, max_depth=8, random_state=0, n_jobs=1).fit(x, target)
    return _sklearn(folder, model, lambda rows: [{"variable": float(v)} for v in model.predict(rows)])


def lightgbm_classifier(folder: Path) -> Built:
    """(e) LGBMClassifier (3 classes) via onnxmltools.convert_lightgbm, opset 15 (its maximum). Outputs
    ``label`` int64 [N] and ``probabilities`` seq(map(int64, float)) (ZipMap). Result:
    ``{"label": int, "probabilities": {"0": p, "1": p, "2": p}}``."""
    import onnxmltools
    from lightgbm import LGBMClassifier
    from onnxmltools.convert.common.data_types import FloatTensorType

    x, y = _training_set(3)
    model = LGBMClassifier(
        n_estimators=30, num_leaves=15, random_state=0, n_jobs=1, deterministic=True, verbose=-1
    ).fit(x, y)
    onx = onnxmltools.convert_lightgbm(
        model, initial_types=[("input", FloatTensorType([None, len(FEATURES)]))], target_opset=15
    )

    return _feature_model(folder, onx, _classifier(model, "label", "probabilities"))


def xgboost_classifier(folder: Path) -> Built:
    """(f) XGBClassifier (3 classes) via onnxmltools.convert_xgboost, opset 15. Outputs ``label`` int64 [N]
    and ``probabilities`` float [N, 3], no ZipMap: the class of each column is in the TreeEnsembleClassifier
    node's ``classlabels_int64s``. Result: ``{"label": int, "probabilities": {"0": p, "1": p, "2": p}}``."""
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType
    from xgboost import XGBClassifier

    x, y = _training_set(3)
    model = XGBClassifier(n_estimators=30, max_depth=4, learning_rate=0.3, random_state=0, n_jobs=1).fit(x, y)
    onx = onnxmltools.convert_xgboost(
        model, initial_types=[("input", FloatTensorType([None, len(FEATURES)]))], target_opset=15
    )

    return _feature_model(folder, onx, _classifier(model, "label", "probabilities"))


def torch_classifier(folder: Path) -> Built:
    """(h) A PyTorch MLP (standardisation in the graph, 3 classes) exported with torch.onnx.export: input
    ``features`` float [batch, 6], output ``logits`` [batch, 3]; the export holds no class names, so the
    settings name them (``MICROBATCH_MODEL__LABELS``, :data:`LEVEL_NAMES` by position). Result:
    ``{"label": name, "score": softmax probability of it, "probabilities": {name: p, ...}}``."""
    import torch

    x, y = _training_set(3)
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-9

    class Mlp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32))
            self.register_buffer("std", torch.tensor(std, dtype=torch.float32))
            self.layers = torch.nn.Sequential(
                torch.nn.Linear(len(FEATURES), 32), torch.nn.ReLU(), torch.nn.Linear(32, 3)
            )

        def forward(self, features):
            return self.layers((features - self.mean) / self.std)

    torch.manual_seed(0)
    model = Mlp()
    inputs, target = torch.tensor(x, dtype=torch.float32), torch.tensor(y)
    with _torch_threads(1):
        optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
        for _step in range(200):
            loss = torch.nn.functional.cross_entropy(model(inputs), target)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        model.eval()
        path = folder / "model.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                (inputs[:1],),
                str(path),
                input_names=["features"],
                output_names=["logits"],
                dynamic_axes={"features": {0: "batch"}, "logits": {0: "batch"}},
                opset_version=OPSET,
                dynamo=False,
            )

    def expect(rows: np.ndarray) -> list[Result]:
        with _torch_threads(1), torch.no_grad():
            proba = torch.softmax(model(torch.tensor(rows, dtype=torch.float32)), dim=-1).numpy()
        return [_softmax_result(row, LEVEL_NAMES) for row in proba.astype(np.float64)]

    built = _feature_model(folder, None, expect)
    labels = {"model__labels": ",".join(LEVEL_NAMES)}
    return Built(built.path, built.settings | labels, built.items, built.expect)


def _softmax_result(row: np.ndarray, names: tuple[str, ...]) -> Result:
    """What the service makes of one row of logits, from its softmax ``row``."""
    best = int(row.argmax())
    return {
        "label": names[best],
        "score": float(row[best]),
        "probabilities": {n: float(p) for n, p in zip(names, row, strict=True)},
    }


# ---------------------------------------------------------------- text (g)

# The generator's five log classes folded into the classifier's three (indices into TEXT_LABELS).
_TEXT_CLASS = {"routine": 0, "performance": 0, "connectivity": 1, "failure": 1, "security": 2}
_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # [PAD] first: id 0, what BERT's pad_token_id is


def _log_lines(n: int, seed: int) -> tuple[list[str], np.ndarray]:
    events, labels = EventGenerator(seed).logs_labeled(n)
    classes = np.array([_TEXT_CLASS[LOG_LABELS[i]] for i in labels])
    return [e["message"] for e in events], classes


def _log_items(n: int, seed: int) -> Items:
    """``n`` generated log lines as Kafka records for ``MICROBATCH_INPUT__FORMAT=text``: the value is the
    line, the key its host."""
    events = EventGenerator(seed).logs(n)
    return [(e["host"].encode(), e["message"].encode()) for e in events]


def _wordpiece(lines: list[str]) -> Any:
    """A BERT-style WordPiece tokenizer fitted on ``lines``: lowercasing BERT normaliser and pre-tokenizer,
    ``[CLS] $A [SEP]``, truncation at :data:`MAX_LENGTH` stored in the file."""
    from tokenizers import Tokenizer, decoders
    from tokenizers.models import WordPiece
    from tokenizers.normalizers import BertNormalizer
    from tokenizers.pre_tokenizers import BertPreTokenizer
    from tokenizers.processors import TemplateProcessing
    from tokenizers.trainers import WordPieceTrainer

    tok = Tokenizer(WordPiece(unk_token="[UNK]"))
    tok.normalizer = BertNormalizer(lowercase=True)
    tok.pre_tokenizer = BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(
        lines, WordPieceTrainer(vocab_size=1000, special_tokens=_SPECIAL, show_progress=False)
    )
    tok.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))],
    )
    tok.enable_truncation(MAX_LENGTH)
    return tok


def _logits_only(model: Any) -> Any:
    """The torch model as a module of three positional inputs and one output, ``logits``, for the export."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )
            return out.logits

    # Built in eval mode: the TorchScript exporter restores the module's mode after the export, recursively,
    # and a wrapper left in training mode would switch the model's dropout back on.
    return Logits().eval()


def _encode(tok: Any, lines: list[str]) -> dict[str, Any]:
    """A batch padded to its longest line ([PAD] = 0), as torch tensors."""
    import torch

    encodings = tok.encode_batch(lines)
    width = max(len(e.ids) for e in encodings)
    ids = torch.zeros((len(lines), width), dtype=torch.int64)
    mask = torch.zeros((len(lines), width), dtype=torch.int64)
    for i, e in enumerate(encodings):
        ids[i, : len(e.ids)] = torch.tensor(e.ids)
        mask[i, : len(e.ids)] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


@contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """Run torch on ``n`` threads for a while. Tiny models on a shared 2-core machine are 10x slower on two
    threads than on one (measured: a 32-wide linear layer 6.4 ms vs 0.37 ms while another process is busy)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _train(model: Any, tok: Any, lines: list[str], classes: np.ndarray) -> None:
    """A few epochs of cross-entropy on the folded generator labels, batches of 32: enough for confident,
    varied answers (all three classes), not for a good classifier, which the tests do not need."""
    import torch

    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    target = torch.tensor(classes)
    model.train()
    for _epoch in range(3):
        for start in range(0, len(lines), 32):
            loss = model(**_encode(tok, lines[start : start + 32]), labels=target[start : start + 32]).loss
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    model.eval()


def _export(model: Any, tok: Any, path: Path) -> None:
    """torch.onnx.export with the TorchScript exporter (``dynamo=False``): 0.5 s where the dynamo one takes
    12 s, and it agrees with torch to 1e-6 with both axes dynamic."""
    import torch

    sample = _encode(tok, ["a short line", "and a somewhat longer line than the first"])
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer warnings
        torch.onnx.export(
            _logits_only(model),
            (sample["input_ids"], sample["attention_mask"], sample["token_type_ids"]),
            str(path),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["logits"],
            dynamic_axes={name: {0: "batch", 1: "seq"} for name in sample} | {"logits": {0: "batch"}},
            opset_version=OPSET,
            dynamo=False,
        )


def bert_classifier(folder: Path) -> Built:
    """(g) A tiny BertForSequenceClassification (hidden 32, 2 layers, 2 heads, 3 labels) with a WordPiece
    tokenizer fitted here, trained for a few steps to fold the generator's log classes into
    :data:`TEXT_LABELS` (so its answers are confident and vary, not a random model's near-ties), exported
    with torch.onnx.export: inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` int64 [batch, seq],
    output ``logits`` [batch, 3]. Beside ``model.onnx``: ``tokenizer.json`` and ``config.json`` (id2label).
    Served with ``MICROBATCH_INPUT__FORMAT=text``. Result:
    ``{"label": name, "score": softmax probability of it, "probabilities": {name: p, ...}}``.

    The framework's answer for a line is torch's on it in a padded batch with its attention mask (BERT
    masks padding: alone or padded, the probabilities agree to 1.2e-7)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    lines, classes = _log_lines(1500, TRAIN_SEED)
    tok = _wordpiece(lines)
    tok.save(str(folder / "tokenizer.json"))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=MAX_LENGTH,
        pad_token_id=0,
        num_labels=len(TEXT_LABELS),
        id2label=dict(enumerate(TEXT_LABELS)),
        label2id={name: i for i, name in enumerate(TEXT_LABELS)},
        hidden_dropout_prob=0.0,  # a few steps on a toy task: dropout would only slow them down
        attention_probs_dropout_prob=0.0,
        attn_implementation="eager",  # plain matmuls: the simplest graph to export
    )
    model = BertForSequenceClassification(config)
    path = folder / "model.onnx"
    with _torch_threads(1):
        _train(model, tok, lines, classes)
        _export(model, tok, path)
    model.config.save_pretrained(folder)

    def expect(values: list[bytes]) -> list[Result]:
        texts = [v.decode() for v in values]
        results: list[Result] = []
        with _torch_threads(1), torch.no_grad():
            for start in range(0, len(texts), 64):
                proba = torch.softmax(model(**_encode(tok, texts[start : start + 64])).logits, dim=-1).numpy()
                results += [_softmax_result(row, TEXT_LABELS) for row in proba.astype(np.float64)]
        return results

    return Built(
        path=path,
        settings={"model__path": str(path), "input__format": "text"},
        items=_log_items,
        expect=expect,
    )
