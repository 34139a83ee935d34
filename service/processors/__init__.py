"""Processors: the model-specific edges of the pipeline. Built-ins: ``features`` and ``text``."""

from __future__ import annotations

import importlib

from service.config import ModelSettings
from service.errors import ConfigError
from service.processors.base import ModelInfo, Processor, ResultOrError, Tensors, prepare

__all__ = ["ModelInfo", "Processor", "ResultOrError", "Tensors", "load_processor", "prepare"]

_SETTING = ModelSettings.env("processor")


def load_processor(spec: str | None, info: ModelInfo) -> Processor:
    """Build the processor named by ``spec`` (``features``, ``text`` or ``module:Class``), falling back on
    the model's ``microbatch.processor`` metadata. Raises ConfigError naming the setting at fault."""
    spec = spec or info.metadata.get("microbatch.processor")
    if not spec:
        raise ConfigError(_SETTING, "no processor set, and the model has no microbatch.processor metadata")
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
