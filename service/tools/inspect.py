"""``microbatch models inspect NAME|PATH``: what an ONNX file declares and how the service would read it,
with the fields it reads, in full, and the settings to serve it."""

from __future__ import annotations

import json
from pathlib import Path

from service.config import AssembleSettings, InputSettings, ModelSettings
from service.engine.artifacts import read_classifier, read_config
from service.engine.session import Engine
from service.formats import METRICS_FORMATS
from service.processors import ModelInfo, fitting
from service.processors.base import Classifier, Port
from service.processors.outputs import LOGITS_DEFAULT, class_names


def describe(path: Path, name: str | None = None) -> str:
    """The report for the model at ``path`` (the reference model ``name``, if it is one): inputs, outputs
    (types, shapes, how each becomes result fields), the fields it reads, metadata (every value whole),
    the files beside it, and the settings to serve it. Raises ConfigError for a file ONNX Runtime cannot
    load."""
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
    processor = metadata.get("microbatch.processor") or fitting(info)
    names = class_names(info)[0]
    lines = [f"model     {name or path}", f"file      {path.resolve()}"]
    lines += [f"producer  {engine.producer or 'unknown'}", "", "inputs"]
    lines += [f"  {_port(p)}" for p in engine.inputs]
    lines += ["", "outputs"]
    lines += [f"  {_port(p)}  ->  {_reading(p, classifier, names)}" for p in engine.outputs]
    if classifier is not None or names is not None:
        lines.append("")
    if classifier is not None:
        lines.append(f"classes   {list(classifier.classes)} (from the graph's classifier)")
    if names is not None:
        lines.append(f"names     {list(names)}")
    reads = _reads(processor, metadata, tokenizer)
    if reads:
        lines += ["", *reads]
    lines += ["", "metadata"]
    lines += [f"  {k} = {v}" for k, v in sorted(metadata.items())] or ["  (none)"]
    beside = [n for n in ("config.json", "tokenizer.json") if (path.parent / n).is_file()]
    if beside:
        lines += ["", f"beside it {', '.join(beside)}"]
    lines += ["", "settings to serve it: a .env file as they are (in a shell, export each)", ""]
    lines += _settings(info, path, name, processor, tokenizer)
    lines += ["", "then try it on a few of your own events: microbatch check --sample FILE"]
    return "\n".join(lines)


def _reads(processor: str | None, metadata: dict[str, str], tokenizer: str | None) -> list[str]:
    """The fields a built-in processor takes from each event, every name whole so it can be copied."""
    if processor == "features" and (features := _json_list(metadata.get("microbatch.features"))):
        required = set(_json_list(metadata.get("microbatch.required")) or ())
        lines = [f"fields    {len(features)} numbers, in this order (microbatch.features)"]
        if required:
            lines[0] += "; *: required (microbatch.required), the others filled when missing"
        width = len(str(len(features)))
        lines += [
            f"  {i:>{width}}  {feature}{' *' if feature in required else ''}"
            for i, feature in enumerate(features, 1)
        ]
        return lines
    if processor == "text":
        field = metadata.get("microbatch.text_field")
        where = f"at {field!r} in each JSON event (microbatch.text_field)" if field else "(set below)"
        return [f"fields    the text, {where}; tokenizer {tokenizer or '(set below)'}"]
    return []


def _json_list(value: str | None) -> list[str] | None:
    """A ``microbatch.*`` list value (a JSON list of names); None when absent or not one."""
    try:
        found = json.loads(value) if value else None
    except ValueError:
        return None
    return [str(v) for v in found] if isinstance(found, list) else None


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


def _settings(
    info: ModelInfo, path: Path, name: str | None, processor: str | None, tokenizer: str | None
) -> list[str]:
    """``KEY=value`` lines (a comment line above one that needs a word); every name from its section, so
    a renamed setting fails here and not in a user's paste. A ``...`` value is for the user to fill."""
    ports, metadata, env = info.inputs, info.metadata, ModelSettings.env
    topics, input_format = InputSettings.env("topics"), InputSettings.env("format")
    lines = [f"{env('name')}={name}" if name else f"{env('path')}={path.resolve()}"]
    lines += ["# the topic(s) your events arrive on, comma-separated", f"{topics}=events"]
    if "microbatch.assemble" in metadata:
        interval = AssembleSettings.model_fields["interval_s"].default
        lines += [
            f"# what your agents send: {', '.join(METRICS_FORMATS)}",
            f"{input_format}={METRICS_FORMATS[0]}",
            "# the agents' collection interval, in seconds",
            f"{AssembleSettings.env('interval_s')}={interval:g}",
        ]
    elif processor == "text":
        lines += [
            "# json: one JSON event per message; text: the whole message is the line",
            f"{input_format}=json",
        ]
    elif processor == "features":
        lines += ["# one JSON event per message, holding the fields above", f"{input_format}=json"]
    if processor == "features" and "microbatch.features" not in metadata:
        width = ports[0].shape[-1] if ports and ports[0].shape else None
        count = f"{width} " if isinstance(width, int) else ""
        lines += [f"# the {count}numeric fields (paths), in training order", f"{env('features')}=..."]
    if processor == "text":
        if tokenizer is None:
            lines += ["# the tokenizers JSON file", f"{env('tokenizer')}=..."]
        if "microbatch.text_field" not in metadata:
            lines += ["# where your events keep the text", f"{env('text_field')}=message"]
    if processor is None:
        lines += ["# neither 'features' nor 'text' fits: a processor of your own", f"{env('processor')}=..."]
    return lines
