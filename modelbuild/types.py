"""What a model builder hands back to :func:`modelbuild.build` to go into the manifest."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BuiltModel:
    """One model written to the output directory.

    ``file`` is the .onnx file name; ``extra_files`` maps manifest keys to further files the model needs
    (e.g. ``{"tokenizer": "log-classifier.tokenizer.json"}``), all relative to the output directory.
    ``quality`` is measured with onnxruntime on the exported file, on held-out generated events; its
    dict-valued entries (per-class or per-kind breakdowns) go to the manifest's ``quality_detail``.
    """

    name: str
    version: str
    processor: str
    file: str
    quality: dict
    train_seconds: float
    extra_files: dict[str, str] = field(default_factory=dict)
