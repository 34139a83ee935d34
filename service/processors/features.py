"""``features``: chosen numeric fields of a JSON event -> one float32 row per event.

Normalisation belongs to the model (the reference model bakes it into its graph), so rows go in raw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec
import numpy as np

from service.config import ModelSettings
from service.errors import ConfigError, InvalidMessage, Reason
from service.processors.base import ModelInfo, ResultOrError, Tensors, parse_json, rows_to_results, setting


class FeaturesProcessor:
    """Reads the fields named by ``MICROBATCH_MODEL__FEATURES`` (or the model's ``microbatch.features``)."""

    def __init__(self, info: ModelInfo) -> None:
        features = setting(info, "features")
        if not isinstance(features, list) or not features or not all(isinstance(f, str) for f in features):
            raise ConfigError(ModelSettings.env("features"), "must be a non-empty list of field names")
        if len(info.input_names) != 1:
            raise ConfigError(
                ModelSettings.env("processor"),
                f"'features' feeds one input, the model has {list(info.input_names)}",
            )
        self.features: tuple[str, ...] = tuple(features)
        self._input = info.input_names[0]
        # A typed decoder validates every field in C; names need not be identifiers thanks to rename.
        fields = [(f"f{i}", float) for i in range(len(self.features))]
        rename = {f"f{i}": name for i, name in enumerate(self.features)}
        event = msgspec.defstruct("MetricsEvent", fields, rename=rename, array_like=False)
        self._decoder = msgspec.json.Decoder(event)

    def parse(self, value: bytes) -> tuple[float, ...]:
        row = msgspec.structs.astuple(parse_json(value, self._decoder))
        if not all(map(math.isfinite, row)):
            raise InvalidMessage(Reason.INVALID_EVENT, "a feature is not a finite number")
        return row

    def preprocess(self, items: Sequence[tuple[float, ...]]) -> Tensors:
        return {self._input: np.asarray(items, dtype=np.float32)}

    def postprocess(self, outputs: Tensors, items: Sequence[tuple[float, ...]]) -> list[ResultOrError]:
        return rows_to_results(outputs, len(items))

    def sample(self) -> tuple[float, ...]:
        return (0.0,) * len(self.features)
