"""``text``: a log line -> token ids, padded to the longest line of the batch, truncated at max_length.

The text is one string field (``MICROBATCH_MODEL__TEXT_FIELD``, a path). Left unset, it is where the input
format puts the text (``syslog`` and ``text``: ``message``; OTLP: ``body``), else, for JSON, the model's
``microbatch.text_field``; a JSON input with neither is a start-up error. To read each value whole, set
``MICROBATCH_INPUT__FORMAT=text``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

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
    Port,
    ResultOrError,
    Tensors,
    field_paths,
    required_field,
    setting,
)
from service.processors.outputs import results_for

DEFAULT_MAX_LENGTH = 128


class TextProcessor:
    """Tokenizes with a ``tokenizers`` JSON file (WordPiece, BPE or Unigram); feeds ``input_ids`` and, when
    the model declares them, ``attention_mask`` and ``token_type_ids``, each in its declared integer type.

    The tokenizer is ``MICROBATCH_MODEL__TOKENIZER``, else the model's ``microbatch.tokenizer``, else a
    ``tokenizer.json`` beside the model (a Hugging Face export). Lines are truncated at
    ``MICROBATCH_MODEL__MAX_LENGTH``, else the model's ``microbatch.max_length``, else the tokenizer's own
    truncation, else the fixed length, else 128; never beyond the fixed length (the model's sequence axis,
    else the length the tokenizer pads to) or a ``config.json``'s ``max_position_embeddings``. A batch is
    padded to its longest line, or every line to the fixed length, or to ``max_length`` with
    ``MICROBATCH_MODEL__PADDING=max_length``. Outputs become results by ``processors.outputs``' rules
    (logits: a label and a score).

    Items go parse (a line) -> prepare (token ids, many lines at once) -> preprocess (a padded batch).
    """

    def __init__(self, info: ModelInfo) -> None:
        names = set(info.input_names)
        if "input_ids" not in names:
            raise ConfigError(
                ModelSettings.env("processor"),
                f"'text' needs an input_ids input, the model has {sorted(names)}",
            )
        path = _tokenizer_path(info)
        # tokenizers parallelises encode_batch over a thread pool of its own, whose threads spin and fight
        # ONNX Runtime's for the same cores: off, both latency and throughput are better (docs/BENCHMARKS.md,
        # *What makes it fast*). Set TOKENIZERS_PARALLELISM=true to override.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as exc:
            raise ConfigError(ModelSettings.env("tokenizer"), f"cannot read {path.name}: {exc}") from None
        ports = {port.name: port for port in info.inputs}
        own_padding = self._tok.padding or {}
        own_truncation = self._tok.truncation or {}
        # A fixed length: the model's sequence axis, else the length the tokenizer itself pads to.
        fixed = _fixed_length(ports.get("input_ids")) or own_padding.get("length")
        max_length = int(
            setting(info, "max_length", required=False)
            or own_truncation.get("max_length")
            or fixed
            or DEFAULT_MAX_LENGTH
        )
        positions = info.config.get("max_position_embeddings")
        # Never longer than the model takes: its positions, its fixed length.
        for cap in (positions, fixed):
            if isinstance(cap, int) and cap < max_length:
                max_length = cap
        self._tok.enable_truncation(max_length)
        padding = info.settings.get("padding")
        if padding == "longest" and _fixed_length(ports.get("input_ids")):
            raise ConfigError(
                ModelSettings.env("padding"),
                f"the model's input_ids has a fixed sequence length ({fixed}): use max_length, or unset it",
            )
        if padding is None:
            padding = "max_length" if fixed else "longest"
        self._pad_to = (fixed or max_length) if padding == "max_length" else None
        # Padding happens per batch in preprocess (to the longest item, or the fixed length), not here.
        pad_id = own_padding.get("pad_id")
        if pad_id is None:
            pad_id = next(
                (i for t in ("[PAD]", "<pad>", "<PAD>") if (i := self._tok.token_to_id(t)) is not None), 0
            )
        self._tok.no_padding()
        self._pad_id = int(pad_id)
        self._dtypes = {
            name: _INT_TYPES.get(ports[name].type if name in ports else "", np.int64)
            for name in ("input_ids", "attention_mask", "token_type_ids")
            if name in names
        }
        self._results = results_for(info)
        # After the model's fit: a model that is not a text model is the first thing to fix.
        field = setting(info, "text_field", required=False)
        if not field:
            raise ConfigError(
                ModelSettings.env("text_field"),
                "required: the model names no microbatch.text_field and the input format does not say where"
                f" the text is (set the field, or {InputSettings.env('format')}=text for whole values)",
            )
        [(self._field, self._path)] = field_paths(ModelSettings.env("text_field"), [field])
        self.fields: tuple[str, ...] = (self._field,)
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
        """Tokens, the unit of ``MICROBATCH_BATCH__MAX_TOKENS``: what the item takes once padded."""
        return self._pad_to or len(ids)

    def preprocess(self, items: Sequence[list[int]]) -> Tensors:
        """Pad the token ids to the longest item of this batch (not to max_length), or to the fixed length."""
        lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
        width = self._pad_to or int(lengths.max(initial=1))
        ids = np.full((len(items), width), self._pad_id, dtype=np.int64)
        for row, item in zip(ids, items, strict=True):
            row[: len(item)] = item
        dtypes = self._dtypes
        tensors: Tensors = {"input_ids": ids.astype(dtypes["input_ids"], copy=False)}
        if "attention_mask" in dtypes:
            mask = np.arange(width) < lengths[:, None]
            tensors["attention_mask"] = mask.astype(dtypes["attention_mask"])
        if "token_type_ids" in dtypes:
            tensors["token_type_ids"] = np.zeros(ids.shape, dtype=dtypes["token_type_ids"])
        return tensors

    def postprocess(self, outputs: Tensors, items: Sequence[list[int]]) -> list[ResultOrError]:
        return self._results(outputs, len(items))

    def sample(self) -> str:
        return "warm-up line"


_INT_TYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_}


def _tokenizer_path(info: ModelInfo) -> Path:
    """The setting, else the model's metadata (beside the model), else ``tokenizer.json`` beside it."""
    path: Path | None = info.settings.get("tokenizer")
    if path is None:
        name = setting(info, "tokenizer", required=False)
        path = info.model_dir / (name or "tokenizer.json")
        if name is None and not path.is_file():
            raise ConfigError(
                ModelSettings.env("tokenizer"),
                "required: the model names no microbatch.tokenizer and there is no tokenizer.json beside it",
            )
    if not path.is_file():
        raise ConfigError(ModelSettings.env("tokenizer"), f"no such file: {path.name}")
    return path


def _fixed_length(port: Port | None) -> int | None:
    """The model's sequence length when its ``input_ids`` declares a fixed one ([batch, 128])."""
    if port is None or len(port.shape) != 2:
        return None
    length = port.shape[1]
    return length if isinstance(length, int) and length > 0 else None


def _line(text: str) -> str:
    stripped = text.strip()
    if not stripped:
        raise InvalidMessage(Reason.INVALID_EVENT, "the text is empty")
    return stripped
