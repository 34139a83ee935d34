"""What a model's files say beyond its session: an ONNX-ML classifier's classes, read from the graph, and
the ``config.json`` a Hugging Face export keeps beside the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import structlog

from service.config import ModelSettings
from service.errors import ConfigError
from service.processors.base import Classifier

# ONNX-ML classifiers: output 0 is the label, output 1 the per-class scores.
_CLASSIFIERS = frozenset({"TreeEnsembleClassifier", "LinearClassifier", "SVMClassifier"})
# Ops a converter puts between a classifier and the graph's outputs that keep what a value means.
_KEEPING = frozenset({"Identity", "Cast", "ZipMap", "Normalizer", "Softmax", "Reshape", "Flatten"})
_log = structlog.get_logger("microbatch.engine")
_LABEL_ATTRIBUTES = ("classlabels_strings", "classlabels_int64s", "classlabels_ints")


def read_classifier(path: Path) -> Classifier | None:
    """The graph's classifier, traced from each graph output back through the ops that keep its meaning;
    None for a graph with none, or one the ``onnx`` parser cannot read (a warning is logged: ONNX Runtime
    could, so the model serves, its classes unnamed). External weights are not read."""
    import onnx

    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception as exc:  # ONNX Runtime read it: serve it without class names rather than refuse it
        _log.warning("graph_unreadable", path=str(path), error=f"{type(exc).__name__}: {exc}"[:300])
        return None
    producers = {out: node for node in graph.node for out in node.output}
    classes: tuple[int | str, ...] = ()
    labels: set[str] = set()
    scores: set[str] = set()
    for output in graph.output:
        name, node = output.name, producers.get(output.name)
        while node is not None and node.op_type in _KEEPING and node.input:
            if node.op_type == "ZipMap":
                classes = classes or _classes(node)
            name = node.input[0]
            node = producers.get(name)
        if node is not None and node.op_type == "ArrayFeatureExtractor":
            # skl2onnx's label of a classifier without an ONNX-ML node (MLP, SGD, k-NN): the class table
            # looked up at the arg-max; its classes are the ZipMap's.
            labels.add(output.name)
        elif node is not None and node.op_type in _CLASSIFIERS:
            classes = _classes(node) or classes
            position = list(node.output).index(name)
            (labels if position == 0 else scores).add(output.name)
    if not classes:
        return None
    return Classifier(classes, frozenset(labels), frozenset(scores))


def read_config(model_dir: Path) -> dict[str, Any]:
    """A Hugging Face ``config.json`` beside the model (``id2label``, ``max_position_embeddings``), or {}."""
    path = model_dir / "config.json"
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            ModelSettings.env("path"), f"cannot read config.json beside the model: {exc}"
        ) from None
    return config if isinstance(config, dict) else {}


def _classes(node: Any) -> tuple[int | str, ...]:
    import onnx

    for attribute in node.attribute:
        if attribute.name in _LABEL_ATTRIBUTES:
            values = onnx.helper.get_attribute_value(attribute)
            return tuple(v.decode() if isinstance(v, bytes) else int(v) for v in values)
    return ()
