"""``microbatch models inspect PATH``: what an ONNX file declares and how the service would read it, with a
block of ``MICROBATCH_MODEL__*`` settings to start from."""

from __future__ import annotations

from pathlib import Path

from service.config import ModelSettings
from service.engine.artifacts import read_classifier, read_config
from service.engine.session import Engine
from service.processors import ModelInfo, fitting
from service.processors.base import Classifier, Port
from service.processors.outputs import LOGITS_DEFAULT, class_names


def describe(path: Path) -> str:
    """The report for the model at ``path``: inputs, outputs (types, shapes, how each becomes result
    fields), metadata, the files beside it, and suggested settings. Raises ConfigError for a file ONNX
    Runtime cannot load."""
    engine = Engine(path, ["CPUExecutionProvider"])
    classifier = None if engine.producer == "pytorch" else read_classifier(path)
    config = read_config(path.parent)
    metadata = engine.metadata
    tokenizer = metadata.get("microbatch.tokenizer") or (
        "tokenizer.json" if (path.parent / "tokenizer.json").is_file() else None
    )
    info = ModelInfo(
        path.stem,
        path.parent,
        engine.input_names,
        engine.output_names,
        metadata,
        inputs=engine.inputs,
        outputs=engine.outputs,
        classifier=classifier,
        config=config,
    )
    names = class_names(info)[0]
    lines = [f"model     {path}", f"producer  {engine.producer or 'unknown'}", "", "inputs"]
    lines += [f"  {_port(p)}" for p in engine.inputs]
    lines += ["", "outputs"]
    lines += [f"  {_port(p)}  ->  {_reading(p, classifier, names)}" for p in engine.outputs]
    if classifier is not None or names is not None:
        lines.append("")
    if classifier is not None:
        lines.append(f"classes   {list(classifier.classes)} (from the graph's classifier)")
    if names is not None:
        lines.append(f"names     {list(names)}")
    lines += ["", "metadata"]
    lines += [f"  {k} = {_short(v)}" for k, v in sorted(metadata.items())] or ["  (none)"]
    beside = [n for n in ("config.json", "tokenizer.json") if (path.parent / n).is_file()]
    if beside:
        lines += ["", f"beside it {', '.join(beside)}"]
    lines += ["", "settings (a start: check the fields against your events with `microbatch check`)"]
    lines += [f"  {line}" for line in _settings(info, path, tokenizer)]
    return "\n".join(lines)


def _port(port: Port) -> str:
    shape = ", ".join("?" if d is None else str(d) for d in port.shape)
    return f"{port.name:24} {port.type:36} [{shape}]"


def _reading(port: Port, classifier: Classifier | None, names: tuple[str, ...] | None) -> str:
    """How the output rules (``processors.outputs``) read this output."""
    if port.name == LOGITS_DEFAULT:
        return "label, score, probabilities (softmax of logits)"
    if port.type.startswith("seq(map("):
        return f"{port.name}: {{class: probability}} (ZipMap)"
    if classifier and port.name in classifier.score_outputs:
        return f"{port.name}: {{class: probability}} (the classifier's scores)"
    if port.name == "class_index" and names:
        return "class_index, and label: the name of the class at that index"
    if classifier and port.name in classifier.label_outputs:
        return f"{port.name}: the class{' name' if names else ''}"
    if port.type.startswith("tensor("):
        if len(port.shape) == 2 and port.shape[1] == 1:
            return f"{port.name}: one number per row"
        if len(port.shape) <= 1:
            return f"{port.name}: one value per row"
        return f"{port.name}: a list per row"
    return f"not readable ({port.type}): leave it out with {ModelSettings.env('outputs')}"


def _settings(info: ModelInfo, path: Path, tokenizer: str | None) -> list[str]:
    ports, metadata, env = info.inputs, info.metadata, ModelSettings.env
    lines = [f"{env('path')}={path}"]
    processor = metadata.get("microbatch.processor") or fitting(info)
    if processor == "features" and "microbatch.features" not in metadata:
        width = ports[0].shape[-1] if ports and ports[0].shape else None
        count = f"{width} " if isinstance(width, int) else ""
        lines.append(f"{env('features')}=...  # the {count}numeric fields (paths), in training order")
    if processor == "text":
        if tokenizer is None:
            lines.append(f"{env('tokenizer')}=...  # the tokenizers JSON file")
        if "microbatch.text_field" not in metadata:
            lines.append(f"{env('text_field')}=message  # or where your events keep the text")
    if processor is None:
        lines.append(f"{env('processor')}=package.module:Class  # neither 'features' nor 'text' fits")
    return lines


def _short(value: str, limit: int = 100) -> str:
    return value if len(value) <= limit else value[: limit - 3] + "..."
