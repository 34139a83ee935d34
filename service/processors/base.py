"""The processor contract: events in, named tensors to the model, one result per event out."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import msgspec
import numpy as np

from service.config import ModelSettings, env_name
from service.errors import BatchMismatchError, ConfigError, InvalidMessage, Reason
from service.formats import MISSING, Fields, PathError, lookup
from service.formats.paths import parse_paths

Tensors = dict[str, np.ndarray]
Result = dict[str, Any]
ResultOrError = Result | InvalidMessage


@dataclass(frozen=True, slots=True)
class Port:
    """One declared input or output of the model, as ONNX Runtime reports it: ``type`` like
    ``tensor(float)`` or ``seq(map(int64,tensor(float)))``; ``shape``: a name or None for a dynamic axis."""

    name: str
    type: str
    shape: tuple[int | str | None, ...] = ()


@dataclass(frozen=True, slots=True)
class Classifier:
    """An ONNX-ML classifier in the graph (``TreeEnsembleClassifier``, ``LinearClassifier``, ...): its class
    values in order (``classlabels_*``, or a ZipMap's keys), the graph outputs that carry its label and those
    that carry its per-class scores."""

    classes: tuple[int | str, ...]
    label_outputs: frozenset[str] = frozenset()
    score_outputs: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What a processor may know about the model it feeds.

    ``metadata`` is the model's ``microbatch.*`` metadata (see docs/MODELS.md); ``settings`` are the
    ``MICROBATCH_MODEL__*`` values the user set explicitly; ``defaults`` are what the input format says
    (``text_field``: where it puts the log text). Explicit settings win, then the format, then metadata.
    ``inputs`` and ``outputs`` are the declared ports (empty when unknown), ``classifier`` what the graph says
    about its classes, ``config`` a Hugging Face ``config.json`` found beside the model (``id2label``).
    """

    name: str
    model_dir: Path
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    metadata: Mapping[str, str] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    inputs: tuple[Port, ...] = ()
    outputs: tuple[Port, ...] = ()
    classifier: Classifier | None = None
    config: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Processor(Protocol):
    """Turns events into tensors and outputs into results. Built once; called from one thread.

    - ``parse`` runs per message of the ``json`` format (and ``text``, for a processor without
      ``parse_fields``): the raw value -> item, so that it can decode exactly its fields with a typed
      decoder; raises InvalidMessage for bad input, nothing else.
    - ``preprocess`` runs per batch: items -> named input tensors (padding is its business).
    - ``postprocess`` runs per batch: output tensors and the batch's items -> exactly one result (or
      InvalidMessage) per item, in the items' order.

    Batches are pipelined: the next batch's ``preprocess`` may run before this batch's ``postprocess``,
    and a failing batch is retried in halves. Keep no per-batch state between the two calls: whatever
    ``postprocess`` needs about the inputs, take from ``items``.
    - ``sample`` returns a valid item, used to warm the model up before the first real batch.

    Three optional methods and two optional attributes, found once when the model loads
    (:class:`Capabilities`); nothing looks for them afterwards:

    - ``parse_fields(fields) -> item`` runs per item of every other format (``service.formats``): the
      item's named fields (nested mappings) -> item, reading them by path (``service.formats.paths``);
      raises InvalidMessage for a bad item. Without it, only the ``json`` and ``text`` formats serve.
    - ``prepare(items) -> items`` runs on every group of parsed items as consumed, before batching, for
      work that is cheaper many at a time (batch tokenization). ``preprocess`` then receives what it
      returned. It must keep the items' count and order.
    - ``cost(item) -> int`` is an item's size (text: tokens). With it, batches are capped at
      ``MICROBATCH_BATCH__MAX_TOKENS`` padded and grouped by similar cost (``BUCKET_WINDOW``), and the
      stats report padding efficiency, assuming ``preprocess`` pads to the batch's costliest item.
    - ``fields``: the event fields it reads (the first events are watched for them); ``features``: its
      named numeric features, in the model's order (rows can be assembled for them).
    """

    def parse(self, value: bytes) -> Any: ...

    def preprocess(self, items: Sequence[Any]) -> Tensors: ...

    def postprocess(self, outputs: Tensors, items: Sequence[Any]) -> list[ResultOrError]: ...

    def sample(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a processor offers beyond the four required methods (see :class:`Processor`), looked up once,
    when the model loads: the only place that asks a processor what it has."""

    parse_fields: Callable[[Fields], Any] | None = None
    prepare_hook: Callable[[list[Any]], Sequence[Any]] | None = None
    cost: Callable[[Any], int] | None = None
    fields: tuple[str, ...] = ()
    features: tuple[str, ...] = ()

    @classmethod
    def of(cls, processor: Processor) -> Capabilities:
        return cls(
            parse_fields=getattr(processor, "parse_fields", None),
            prepare_hook=getattr(processor, "prepare", None),
            cost=getattr(processor, "cost", None),
            fields=_names(getattr(processor, "fields", None)),
            features=_names(getattr(processor, "features", None)),
        )

    def prepare(self, items: list[Any]) -> list[Any]:
        """Apply the ``prepare`` hook (identity without one). Raises what it raises, and
        BatchMismatchError when it changed the count."""
        hook = self.prepare_hook
        if hook is None:
            return items
        prepared = hook(items)
        if len(prepared) != len(items):
            raise BatchMismatchError(f"prepare returned {len(prepared)} items for {len(items)}")
        return list(prepared)


def _names(found: Any) -> tuple[str, ...]:
    """An optional sequence of names as a tuple (none: empty), whatever sequence the processor keeps."""
    return () if found is None else tuple(found)


def prepare(processor: Processor, items: list[Any]) -> list[Any]:
    """:meth:`Capabilities.prepare` for a processor on its own (tooling that has no loaded model)."""
    return Capabilities.of(processor).prepare(items)


def field_paths(setting: str, texts: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    """``(text, path)`` for each field path of a setting; ConfigError naming ``setting`` for a bad one."""
    try:
        return parse_paths(texts)
    except PathError as exc:
        raise ConfigError(setting, str(exc)) from None


def required_field(fields: Fields, text: str, path: tuple[str, ...]) -> Any:
    """The value at ``path``; InvalidMessage(invalid_event) naming ``text`` when nothing is there."""
    value = lookup(fields, path)
    if value is MISSING:
        raise InvalidMessage(Reason.INVALID_EVENT, f"field {text!r} is missing")
    return value


def setting(info: ModelInfo, key: str, env: str | None = None, *, required: bool = True) -> Any:
    """A processor option: the explicit setting, else the input format's default, else the model's
    ``microbatch.<key>`` metadata.

    Metadata values are strings; JSON-looking ones (lists) are decoded. Raises ConfigError naming ``env``
    (default: ``MICROBATCH_MODEL__<KEY>``).
    """
    if info.settings.get(key) is not None:
        return info.settings[key]
    if info.defaults.get(key) is not None:
        return info.defaults[key]
    raw = info.metadata.get(f"microbatch.{key}")
    if raw is None:
        if required:
            raise ConfigError(
                env or env_name((ModelSettings.section, key)),
                f"required by this processor, and the model has no microbatch.{key}",
            )
        return None
    return msgspec.json.decode(raw) if raw[:1] in "[{" else raw
