"""Model outputs -> result fields, read as the converters meant them; decided once per model. Pure.

For each output chosen (``MICROBATCH_MODEL__OUTPUTS``: all by default, in the model's order), the first
rule that applies:

1. **logits** (``MICROBATCH_MODEL__LOGITS``; by default an output named ``logits``, as Hugging Face exports
   name it): ``[N, K]`` raw class scores become ``label`` (the likeliest class), ``score`` (its softmax
   probability) and ``probabilities`` ``{class: probability}``;
2. a **sequence of maps** (skl2onnx's and onnxmltools' default ZipMap) becomes ``{class: probability}``;
3. a classifier's **per-class scores**, ``[N, K]`` (ZipMap off, XGBoost), become ``{class: probability}``;
4. a classifier's **label** becomes the class's name (when names are given);
5. ``class_index`` (an index into the names) stays, and ``label`` is added;
6. any other tensor gives its row: an ``[N, 1]`` tensor one number, not a list of one.

Classes are named, by position, from ``MICROBATCH_MODEL__LABELS``, else the model's ``microbatch.labels``,
else ``id2label`` of a Hugging Face ``config.json`` beside the model, else the classifier's own class values
(``classlabels_*``, the ZipMap's keys). A row with a NaN or infinite value becomes ``invalid_output``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from service.config import ModelSettings
from service.errors import BatchMismatchError, ConfigError, InvalidMessage, Reason
from service.processors.base import Classifier, ModelInfo, Port, ResultOrError, Tensors

Column = list[Any]
# One output's reader: its value and the batch size -> (field, column) pairs; adds the rows that are not
# finite to the set.
Reader = Callable[[Any, int, set[int]], list[tuple[str, Column]]]

LOGITS_DEFAULT = "logits"
SUPPORTED = "tensors and sequences of maps (ZipMap), one row per input"


@dataclass(frozen=True, slots=True)
class Plan:
    """How one model's outputs become result fields: ``chosen`` maps output -> field (None: every output,
    under its own name), ``logits`` names the output read as logits, ``names`` the classes by position."""

    chosen: Mapping[str, str] | None = None
    logits: str | None = LOGITS_DEFAULT
    names: tuple[str, ...] | None = None
    classifier: Classifier | None = None
    types: Mapping[str, str] = field(default_factory=dict)
    """The outputs' declared types (``seq(tensor(float))``), for errors."""


class Results:
    """``results(outputs, count)``: exactly one result (or ``invalid_output``) per input row, in order.

    Raises BatchMismatchError for an output with another number of rows, TypeError naming the output for
    one of a type the service cannot read, ValueError when logits do not match the class names."""

    def __init__(self, plan: Plan | None = None) -> None:
        self._plan = plan or Plan()
        self._readers: dict[str, Reader] = {}

    def __call__(self, outputs: Tensors, count: int) -> list[ResultOrError]:
        bad: set[int] = set()
        rows: list[dict[str, Any]] = [{} for _ in range(count)]
        chosen = self._plan.chosen
        for name in chosen if chosen is not None else outputs:
            reader = self._readers.get(name)
            if reader is None:
                reader = self._readers[name] = self._reader(name)
            try:
                read = reader(outputs[name], count, bad)
            except TypeError as exc:
                declared = self._plan.types.get(name)
                raise TypeError(f"{exc} (declared {declared})" if declared else str(exc)) from None
            # Column by column into the row dicts: one pass per output, not a dict(zip(...)) per row.
            for target, column in read:
                if len(column) != count:
                    raise BatchMismatchError(f"output {name!r} has {len(column)} rows for {count} inputs")
                for row, value in zip(rows, column):  # noqa: B905  (lengths checked above)
                    row[target] = value
        results: list[ResultOrError] = list(rows)
        for i in bad:
            results[i] = InvalidMessage(Reason.INVALID_OUTPUT, "model returned NaN or infinity")
        return results

    def _reader(self, output: str) -> Reader:
        plan = self._plan
        target = output if plan.chosen is None else plan.chosen[output]
        classifier = plan.classifier
        classes = classifier.classes if classifier else ()
        names: Sequence[Any] | None = plan.names or (classes or None)
        if output == plan.logits:
            return lambda value, count, bad: _logits(output, value, count, bad, plan.names)
        if classifier and names is not None and output in classifier.score_outputs:
            return lambda value, count, bad: [(target, _per_class(output, value, count, bad, names, classes))]
        if classifier and plan.names and output in classifier.label_outputs:
            position = {c: i for i, c in enumerate(classes)}
            named = plan.names
            return lambda value, count, bad: [
                (
                    target,
                    [named[position[c]] if c in position else c for c in _rows(output, value, count, bad)],
                )
            ]
        if output == "class_index" and plan.names:
            return lambda value, count, bad: _class_index(output, target, value, count, bad, plan.names or ())
        return lambda value, count, bad: [(target, _plain(output, value, count, bad, plan.names, classes))]


def results_for(info: ModelInfo) -> Results:
    """The output rules for the model ``info`` describes, from the ``MICROBATCH_MODEL__*`` settings it carries
    (``outputs``, ``logits``, ``labels``), its metadata and its files. Raises ConfigError naming the setting
    at fault: an output the model does not have, two outputs giving one field, names that do not match the
    classes of the classifier or of the logits. No message quotes a setting's value."""
    declared = {port.name: port for port in info.outputs} or {
        name: Port(name, "") for name in info.output_names
    }
    logits = info.settings.get("logits")
    if logits is None:
        logits = LOGITS_DEFAULT if LOGITS_DEFAULT in declared else None
    elif logits == "none":
        logits = None
    elif logits not in declared:
        raise ConfigError(
            ModelSettings.env("logits"), f"names no output of the model (its outputs: {list(declared)})"
        )
    chosen = _chosen(info.settings.get("outputs"), declared, logits)
    names, source = class_names(info)
    classifier = info.classifier
    if names is not None and classifier is not None and len(names) != len(classifier.classes):
        raise ConfigError(
            source,
            f"{len(names)} class names for the model's {len(classifier.classes)} classes "
            f"{list(classifier.classes)}",
        )
    if names is not None and logits is not None:
        width = declared[logits].shape[-1] if declared[logits].shape else None
        if isinstance(width, int) and width != len(names):
            raise ConfigError(source, f"{len(names)} class names for the {width} logits of output {logits!r}")
    _distinct(chosen or {name: name for name in declared}, logits, names is not None)
    types = {name: port.type for name, port in declared.items() if port.type}
    return Results(Plan(chosen, logits, names, classifier, types))


def rows_to_results(outputs: Tensors, count: int) -> list[ResultOrError]:
    """The rules with nothing known about the model: every output under its own name (logits too)."""
    return _PLAIN(outputs, count)


def _chosen(
    spec: Sequence[str] | None, declared: Mapping[str, Port], logits: str | None
) -> dict[str, str] | None:
    """``MICROBATCH_MODEL__OUTPUTS``: ``output`` or ``output=target`` entries."""
    if spec is None:
        return None
    setting = ModelSettings.env("outputs")
    chosen: dict[str, str] = {}
    for number, entry in enumerate(spec, 1):
        output, renamed, target = entry.partition("=")
        output, target = output.strip(), target.strip() or output.strip()
        if output not in declared:
            raise ConfigError(
                setting, f"entry {number} names no output of the model (its outputs: {list(declared)})"
            )
        if renamed and output == logits:
            raise ConfigError(
                setting,
                f"entry {number} renames the logits output, whose fields are label, score and probabilities",
            )
        chosen[output] = target
    return chosen


def _distinct(chosen: Mapping[str, str], logits: str | None, named: bool) -> None:
    """Every result target comes from one output: ConfigError naming ``OUTPUTS`` (or ``LOGITS``) if not."""
    seen: dict[str, str] = {}
    for output, target in chosen.items():
        if output == logits:
            fields = ["label", "score", "probabilities"]
        elif output == "class_index" and named:
            fields = [target, "label"]
        else:
            fields = [target]
        for one in fields:
            if one in seen:
                setting = ModelSettings.env("logits" if logits in (output, seen[one]) else "outputs")
                raise ConfigError(
                    setting,
                    f"outputs {seen[one]!r} and {output!r} both give the result field {one!r} "
                    f"(choose or rename with {ModelSettings.env('outputs')})",
                )
            seen[one] = output


def class_names(info: ModelInfo) -> tuple[tuple[str, ...] | None, str]:
    """The class names by position, and the setting to blame for them."""
    given = info.settings.get("labels")
    if given:
        return tuple(str(n) for n in given), ModelSettings.env("labels")
    # The model's own names: blame the setting that chose the model.
    path = ModelSettings.env(
        "name" if info.settings.get("name") and not info.settings.get("path") else "path"
    )
    raw = info.metadata.get("microbatch.labels")
    if raw is not None:
        try:
            labels = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            labels = None
        if not isinstance(labels, list):
            raise ConfigError(path, "the model's microbatch.labels is not a JSON list")
        return tuple(str(n) for n in labels), path
    id2label = info.config.get("id2label")
    if isinstance(id2label, Mapping) and id2label:
        try:
            ordered = sorted((int(k), str(v)) for k, v in id2label.items())
        except ValueError:
            raise ConfigError(path, "config.json's id2label has keys that are not class numbers") from None
        if [k for k, _ in ordered] != list(range(len(ordered))):
            raise ConfigError(path, "config.json's id2label does not number its classes 0, 1, 2, ...")
        return tuple(v for _, v in ordered), path
    return None, path


def _rows(output: str, value: Any, count: int, bad: set[int]) -> Column:
    """A tensor's rows as Python values: ``[N, 1]`` as one value per row; non-finite rows marked bad."""
    if not isinstance(value, np.ndarray) or value.ndim == 0:
        raise TypeError(f"output {output!r} is a {_kind(value)}: the service reads {SUPPORTED}")
    if len(value) != count:
        raise BatchMismatchError(f"output {output!r} has {len(value)} rows for {count} inputs")
    array = value[:, 0] if value.ndim == 2 and value.shape[1] == 1 else value
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        bad.update(np.flatnonzero(~np.isfinite(array.reshape(count, -1)).all(axis=1)).tolist())
    column: Column = array.tolist()
    return column


def _plain(
    output: str, value: Any, count: int, bad: set[int], names: Sequence[str] | None, classes: Sequence[Any]
) -> Column:
    if isinstance(value, list) and all(isinstance(row, dict) for row in value):
        return _maps(output, value, count, bad, names, classes)
    return _rows(output, value, count, bad)


def _maps(
    output: str,
    value: list[dict[Any, Any]],
    count: int,
    bad: set[int],
    names: Sequence[str] | None,
    classes: Sequence[Any],
) -> Column:
    """ZipMap's ``{class: probability}`` per row, its classes renamed when names are given."""
    if not all(isinstance(row, dict) for row in value):
        raise TypeError(f"output {output!r} is a {_kind(value)}: the service reads {SUPPORTED}")
    if len(value) != count:
        raise BatchMismatchError(f"output {output!r} has {len(value)} rows for {count} inputs")
    for i, row in enumerate(value):
        if not all(math.isfinite(v) for v in row.values() if isinstance(v, float)):
            bad.add(i)
    if not names or not value:
        return [dict(row) for row in value]
    # ZipMap keeps the classifier's classes; without them, its keys are in class order (ONNX Runtime sorts
    # them, as scikit-learn's classes_ are).
    keys = list(classes) if classes else list(value[0])
    if len(keys) != len(names):
        raise ValueError(f"output {output!r} has {len(keys)} classes for {len(names)} class names")
    rename = dict(zip(keys, names, strict=True))
    return [{rename.get(k, k): v for k, v in row.items()} for row in value]


def _per_class(
    output: str, value: Any, count: int, bad: set[int], names: Sequence[Any], classes: Sequence[Any]
) -> Column:
    """A classifier's scores, ``{class: probability}`` per row, from ZipMap's maps or an ``[N, K]`` tensor."""
    if isinstance(value, list):
        return _maps(output, value, count, bad, names, classes)
    if not isinstance(value, np.ndarray) or value.ndim != 2:
        raise TypeError(
            f"output {output!r} holds a classifier's scores, but is a {_kind(value)}, not [N, classes]"
        )
    rows = _rows(output, value, count, bad)
    if rows and len(rows[0]) != len(names):
        raise ValueError(f"output {output!r} has {len(rows[0])} classes for {len(names)} class names")
    return [dict(zip(names, row, strict=True)) for row in rows]


def _class_index(
    output: str, target: str, value: Any, count: int, bad: set[int], names: Sequence[str]
) -> list[tuple[str, Column]]:
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "iu":
        raise TypeError(f"output {output!r} is read as class indices, but is a {_kind(value)}, not integers")
    indices = _rows(output, value, count, bad)
    last = len(names)
    return [(target, indices), ("label", [names[i] if 0 <= i < last else None for i in indices])]


def _logits(
    output: str, value: Any, count: int, bad: set[int], names: Sequence[str] | None
) -> list[tuple[str, Column]]:
    """Softmax over the last axis of ``[N, K]`` logits: the likeliest class, its probability, and all."""
    if not isinstance(value, np.ndarray) or value.ndim != 2 or value.dtype.kind != "f":
        raise TypeError(
            f"output {output!r} is read as logits, which must be a float tensor [N, classes], not "
            f"{_kind(value)}; set {ModelSettings.env('logits')}=none to read it as it is"
        )
    if len(value) != count:
        raise BatchMismatchError(f"output {output!r} has {len(value)} rows for {count} inputs")
    classes = value.shape[1]
    if names is not None and len(names) != classes:
        raise ValueError(f"output {output!r} has {classes} classes for {len(names)} class names")
    logits = value.astype(np.float64)
    if not np.isfinite(logits).all():
        bad.update(np.flatnonzero(~np.isfinite(logits).all(axis=1)).tolist())
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = shifted / shifted.sum(axis=1, keepdims=True)
    best = probabilities.argmax(axis=1)
    keys: Sequence[Any] = names if names is not None else range(classes)
    labels = [keys[i] for i in best.tolist()]
    scores = probabilities[np.arange(count), best].tolist()
    per_class = [dict(zip(keys, row, strict=True)) for row in probabilities.tolist()]
    return [("label", labels), ("score", scores), ("probabilities", per_class)]


_PLAIN = Results(Plan(logits=None))


def _kind(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} tensor of shape {list(value.shape)}"
    if isinstance(value, list):
        inner = {type(v).__name__ for v in value[:3]}
        return f"sequence of {', '.join(sorted(inner)) or 'nothing'}"
    return type(value).__name__
