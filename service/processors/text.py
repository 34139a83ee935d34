"""``text``: a log line -> token ids, padded to the longest line of the batch, truncated at max_length.

The text is one string field (``MICROBATCH_MODEL__TEXT_FIELD``, a path). Left unset, it is where the input
format puts the text (``syslog`` and ``text``: ``message``; OTLP: ``body``), else, for JSON, the model's
``microbatch.text_field``; a JSON input with neither is a start-up error. To read each value whole, set
``MICROBATCH_INPUT__FORMAT=text``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import msgspec
import numpy as np
from tokenizers import Tokenizer

from service.config import InputSettings, ModelSettings
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
    rows_to_results,
    setting,
)

DEFAULT_MAX_LENGTH = 128


class TextProcessor:
    """Tokenizes with a ``tokenizers`` JSON file; feeds ``input_ids`` (+ ``attention_mask`` if the model
    takes one); maps an output ``class_index`` to a ``label`` when labels are known.

    Items go parse (a line) -> prepare (token ids, many lines at once) -> preprocess (a padded batch).
    """

    def __init__(self, info: ModelInfo) -> None:
        path = info.settings.get("tokenizer")
        if path is None:
            name = setting(info, "tokenizer")
            path = info.model_dir / name
        if not path.is_file():
            raise ConfigError(ModelSettings.env("tokenizer"), "no such file")
        max_length = int(setting(info, "max_length", required=False) or DEFAULT_MAX_LENGTH)
        self.labels: list[str] | None = setting(info, "labels", required=False)

        # tokenizers parallelises encode_batch over a thread pool of its own, whose threads spin and fight
        # ONNX Runtime's for the same cores (measured on 2 cores: p99 166-201 ms -> 58-83 ms at 3,200
        # lines/s, and +10% drain throughput, with it off). Set TOKENIZERS_PARALLELISM=true to override.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        self._tok = Tokenizer.from_file(str(path))
        self._tok.enable_truncation(max_length)
        # Padding happens per batch in preprocess, to the batch's longest item, not here.
        self._tok.no_padding()
        pad_id = self._tok.token_to_id("[PAD]")
        self._pad_id = pad_id if pad_id is not None else 0

        names = set(info.input_names)
        if "input_ids" not in names:
            raise ConfigError(
                ModelSettings.env("processor"),
                f"'text' needs an input_ids input, the model has {sorted(names)}",
            )
        self._mask = "attention_mask" in names
        self._types = "token_type_ids" in names
        # After the model's fit: a model that is not a text model is the first thing to fix.
        field = setting(info, "text_field", required=False)
        if not field:
            raise ConfigError(
                ModelSettings.env("text_field"),
                "required: the model names no microbatch.text_field and the input format does not say where"
                f" the text is (set the field, or {InputSettings.env('format')}=text for whole values)",
            )
        [(self._field, self._path)] = field_paths(ModelSettings.env("text_field"), [field])
        self._decoder: msgspec.json.Decoder[msgspec.Struct] | None = None
        if is_flat(self._path):  # a typed decoder reads the one field in C: the JSON fast path
            event = msgspec.defstruct("TextEvent", [("text", str)], rename={"text": self._path[0]})
            self._decoder = msgspec.json.Decoder(event)

    def parse(self, value: bytes) -> str:
        if self._decoder is None:
            return self.parse_fields(json_object(value))
        return _line(parse_json(value, self._decoder).text)

    def parse_fields(self, fields: Fields) -> str:
        text = required_field(fields, self._field, self._path)
        if not isinstance(text, str):
            raise InvalidMessage(Reason.INVALID_EVENT, f"field {self._field!r} is not a string")
        return _line(text)

    def prepare(self, texts: Sequence[str]) -> list[list[int]]:
        """Tokenize many lines in one ``encode_batch`` call (Rust, outside the GIL)."""
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=True)]

    def cost(self, ids: list[int]) -> int:
        """Tokens, the unit of ``MICROBATCH_BATCH__MAX_TOKENS``."""
        return len(ids)

    def preprocess(self, items: Sequence[list[int]]) -> Tensors:
        """Pad the token ids to the longest item of this batch (not to max_length)."""
        lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
        ids = np.full((len(items), int(lengths.max(initial=1))), self._pad_id, dtype=np.int64)
        for row, item in zip(ids, items, strict=True):
            row[: len(item)] = item
        tensors = {"input_ids": ids}
        if self._mask:
            tensors["attention_mask"] = (np.arange(ids.shape[1]) < lengths[:, None]).astype(np.int64)
        if self._types:
            tensors["token_type_ids"] = np.zeros_like(ids)
        return tensors

    def postprocess(self, outputs: Tensors, items: Sequence[list[int]]) -> list[ResultOrError]:
        results = rows_to_results(outputs, len(items))
        if self.labels and "class_index" in outputs:
            for result in results:
                if isinstance(result, dict):
                    index = result["class_index"]
                    result["label"] = self.labels[index] if 0 <= index < len(self.labels) else None
        return results

    def sample(self) -> str:
        return "warm-up line"


def _line(text: str) -> str:
    stripped = text.strip()
    if not stripped:
        raise InvalidMessage(Reason.INVALID_EVENT, "the text is empty")
    return stripped
