"""Processors: the model-specific edges of the pipeline. Built-ins: ``features`` and ``text``."""

from __future__ import annotations

import importlib

from service.config import ModelSettings
from service.errors import ConfigError
from service.processors.base import Capabilities, ModelInfo, Processor, ResultOrError, Tensors, prepare

__all__ = [
    "Capabilities",
    "ModelInfo",
    "Processor",
    "ResultOrError",
    "Tensors",
    "fitting",
    "load_processor",
    "prepare",
]

_SETTING = ModelSettings.env("processor")


def load_processor(spec: str | None, info: ModelInfo) -> Processor:
    """Build the processor named by ``spec`` (``features``, ``text`` or ``module:Class``), falling back on
    the model's ``microbatch.processor`` metadata. Raises ConfigError naming the setting at fault."""
    spec = spec or info.metadata.get("microbatch.processor") or fitting(info)
    if not spec:
        raise ConfigError(
            _SETTING,
            "no processor set, the model has no microbatch.processor metadata, and its inputs "
            f"{[f'{p.name}: {p.type}' for p in info.inputs] or list(info.input_names)} fit neither 'text' "
            "(input_ids) nor 'features' (one float tensor)",
        )
    if spec == "features":
        from service.processors.features import FeaturesProcessor

        return FeaturesProcessor(info)
    if spec == "text":
        from service.processors.text import TextProcessor

        return TextProcessor(info)
    module_name, _, class_name = spec.partition(":")
    if not class_name:
        raise ConfigError(_SETTING, "neither 'features', 'text' nor 'module:Class'")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(_SETTING, f"cannot import it: {exc}") from None
    processor = cls(info)
    if not isinstance(processor, Processor):
        raise ConfigError(_SETTING, "the class lacks parse/preprocess/postprocess/sample")
    return processor


def fitting(info: ModelInfo) -> str | None:
    """The built-in processor the model's inputs call for: ``text`` for token ids (a Hugging Face export),
    ``features`` for one float tensor [N, K] (a converted scikit-learn, LightGBM or XGBoost model)."""
    if "input_ids" in info.input_names:
        return "text"
    if len(info.inputs) == 1 and info.inputs[0].type in ("tensor(float)", "tensor(double)"):
        return "features"
    return None
