"""``features``: chosen numeric fields of an event -> one float32 row per event.

Fields are paths (``MICROBATCH_MODEL__FEATURES``, or the model's ``microbatch.features``): ``cpu_pct``,
``system.cpu.load``. Normalisation belongs to the model (the reference model bakes it into its graph), so
rows go in raw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import chain

import msgspec
import numpy as np

from service.config import ModelSettings
from service.errors import ConfigError, InvalidMessage, Reason
from service.formats import Fields
from service.formats.paths import is_flat
from service.formats.plain import json_object, parse_json
from service.processors.base import (
    ModelInfo,
    ResultOrError,
    Tensors,
    field_paths,
    required_field,
    setting,
)
from service.processors.outputs import results_for

Row = tuple[float, ...]


class FeaturesProcessor:
    """Reads the fields named by ``MICROBATCH_MODEL__FEATURES`` (or the model's ``microbatch.features``).

    From JSON, top-level fields decode with a typed decoder that validates every one in C (the fast
    path: a number, and finite); dotted paths decode the object and walk it, as for every other input
    format."""

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
        self._paths = field_paths(ModelSettings.env("features"), features)
        self._input = info.input_names[0]
        ports = {port.name: port for port in info.inputs}
        declared = ports[self._input].type if self._input in ports else ""
        self._dtype = np.float64 if declared == "tensor(double)" else np.float32
        self.fields: tuple[str, ...] = self.features
        self._results = results_for(info)
        self._decoder: msgspec.json.Decoder[msgspec.Struct] | None = None
        if all(is_flat(path) for _text, path in self._paths):
            # Names need not be identifiers thanks to rename.
            fields = [(f"f{i}", float) for i in range(len(self._paths))]
            rename = {f"f{i}": path[0] for i, (_text, path) in enumerate(self._paths)}
            event = msgspec.defstruct("MetricsEvent", fields, rename=rename, array_like=False)
            self._decoder = msgspec.json.Decoder(event)

    def parse(self, value: bytes) -> Row:
        if self._decoder is None:
            return self.parse_fields(json_object(value))
        # No finite check here: JSON has no NaN or Infinity, and msgspec refuses a number out of the
        # float range (1e999) as a validation error, so the typed decoder only yields finite floats.
        return msgspec.structs.astuple(parse_json(value, self._decoder))

    def parse_fields(self, fields: Fields) -> Row:
        row = []
        for text, path in self._paths:
            value = required_field(fields, text, path)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidMessage(Reason.INVALID_EVENT, f"field {text!r} is not a number")
            row.append(float(value))
        return _finite(tuple(row))

    def preprocess(self, items: Sequence[Row]) -> Tensors:
        # Every row has one value per feature. fromiter over the flattened rows is about a fifth cheaper
        # than asarray over the list of tuples, which inspects each tuple first.
        width = len(self.features)
        flat = np.fromiter(chain.from_iterable(items), self._dtype, count=len(items) * width)
        return {self._input: flat.reshape(len(items), width)}

    def postprocess(self, outputs: Tensors, items: Sequence[Row]) -> list[ResultOrError]:
        return self._results(outputs, len(items))

    def sample(self) -> Row:
        return (0.0,) * len(self.features)


_NOT_FINITE = "a feature is not a finite number"


def _finite(row: Row) -> Row:
    if not all(map(math.isfinite, row)):
        raise InvalidMessage(Reason.INVALID_EVENT, _NOT_FINITE)
    return row
