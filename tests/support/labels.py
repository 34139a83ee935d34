"""The labels ``log-classifier`` gives texts in this process, through the service's own model loading and
processor: what "agreement" is measured against when the same texts arrive as shippers write them."""

from __future__ import annotations

from collections.abc import Sequence

from service.config import load_settings
from service.engine import load_model

BATCH = 16


def reference_labels(texts: Sequence[str]) -> dict[str, str]:
    """``{text: label}`` for the distinct ``texts``, as the model labels generator JSON events."""
    model = load_model(load_settings(model={"name": "log-classifier", "providers": ["cpu"]}))
    processor = model.processor
    distinct = list(dict.fromkeys(texts))
    labels: dict[str, str] = {}
    for start in range(0, len(distinct), BATCH):
        chunk = distinct[start : start + BATCH]
        items = processor.prepare([processor.parse_fields({"message": t}) for t in chunk])
        results = processor.postprocess(model.engine.run(processor.preprocess(items)), items)
        labels.update((text, result["label"]) for text, result in zip(chunk, results, strict=True))
    return labels


def agreement(pairs: Sequence[tuple[str, str]], reference: dict[str, str]) -> float:
    """The share of ``(text, label)`` pairs whose label is the reference label of the text."""
    return sum(reference[text] == label for text, label in pairs) / len(pairs)
