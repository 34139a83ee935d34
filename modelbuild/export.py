"""Export a torch module to one self-contained ONNX file with ``microbatch.*`` metadata, then check it.

Uses the ``torch.export``-based (dynamo) exporter, the default in torch 2.x, which needs ``onnxscript``.
The exported ModelProto is post-processed so that the file is small and reproducible: weights inline (no
external data file), no per-node debugging metadata (it embeds source paths and stack traces of the build
machine), and the caller's metadata_props.
"""

from __future__ import annotations

import logging
import pathlib
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch

OPSET = 18  # >= 17 as required; 18 is well covered by onnxruntime >= 1.14 and by the dynamo exporter


def export_onnx(
    module: torch.nn.Module,
    example_args: tuple[torch.Tensor, ...],
    *,
    input_names: Sequence[str],
    output_names: Sequence[str],
    dynamic_shapes: Mapping[str, Mapping[int, Any]],
    metadata: Mapping[str, str],
) -> onnx.ModelProto:
    """Trace ``module`` (in eval mode) into an ONNX model with the given I/O names and dynamic axes.

    ``dynamic_shapes`` maps each input name to ``{axis: torch.export.Dim}``. The result has passed
    ``onnx.checker`` (full check, with shape inference).
    """
    module.eval()
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    try:
        with warnings.catch_warnings():
            # The exporter is chatty about things that do not apply here (torchvision ops not registered,
            # deprecations in its own dependencies).
            warnings.simplefilter("ignore")
            exporter_log.setLevel(logging.ERROR)
            program = torch.onnx.export(
                module,
                example_args,
                input_names=list(input_names),
                output_names=list(output_names),
                dynamic_shapes=dict(dynamic_shapes),
                opset_version=OPSET,
                dynamo=True,
                external_data=False,
                optimize=True,
                verbose=False,
            )
    finally:
        exporter_log.setLevel(level)
    if program is None:  # only the legacy exporter returns None
        raise RuntimeError("torch.onnx.export returned no ONNX program")
    model = program.model_proto
    _strip_debug_info(model)
    del model.metadata_props[:]
    for key, value in metadata.items():
        model.metadata_props.add(key=key, value=value)
    model.doc_string = metadata.get("microbatch.description", "")
    onnx.checker.check_model(model, full_check=True)
    return model


def save_onnx(model: onnx.ModelProto, path: pathlib.Path) -> None:
    """Write ``model`` as one file, all tensors inline."""
    path.write_bytes(model.SerializeToString())


def _strip_debug_info(model: onnx.ModelProto) -> None:
    """Drop doc strings and node metadata (source locations, stack traces) from every graph."""

    def strip_graph(graph: onnx.GraphProto) -> None:
        graph.doc_string = ""
        for value in (*graph.input, *graph.output, *graph.value_info):
            value.doc_string = ""
            del value.metadata_props[:]
        for init in graph.initializer:
            init.doc_string = ""
            del init.metadata_props[:]
        for node in graph.node:
            node.doc_string = ""
            del node.metadata_props[:]
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    strip_graph(attr.g)
                for sub in attr.graphs:
                    strip_graph(sub)

    strip_graph(model.graph)
    for fn in model.functions:
        fn.doc_string = ""
        for node in fn.node:
            node.doc_string = ""
            del node.metadata_props[:]


def ort_session(path: pathlib.Path) -> ort.InferenceSession:
    """A CPU-only onnxruntime session (deterministic, and what the quality numbers are measured with)."""
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only; ORT warns about unused initializers etc.
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_session(session: ort.InferenceSession, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run all outputs of ``session`` on ``feeds``; returns them by output name."""
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(feeds)), strict=True))
