"""Outputs as converters emit them (``processors.base.rows_to_results``): ``[N, 1]`` tensors, skl2onnx's
default ZipMap sequence of maps, and a clear error for anything else; on models built here with the ONNX
helpers and run by ONNX Runtime, as skl2onnx's would be."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from service.config import load_settings
from service.engine import load_model, model_setting, warm_up
from service.errors import BatchMismatchError, ConfigError, InvalidMessage
from service.processors.base import rows_to_results

onnx = pytest.importorskip("onnx", reason="needs the 'models' extra (onnx)")
helper, TensorProto = onnx.helper, onnx.TensorProto


def test_an_n_by_1_output_gives_one_number_per_row():
    results = rows_to_results(
        {"scores": np.array([[0.5], [-0.25]], dtype=np.float32), "label": np.array([1, -1])}, 2
    )
    assert results == [{"scores": 0.5, "label": 1}, {"scores": -0.25, "label": -1}]


def test_a_sequence_of_maps_gives_class_probabilities_per_row():
    zipmap = [{"ok": 0.75, "bad": 0.25}, {"ok": 0.5, "bad": float("nan")}]
    results = rows_to_results({"output_probability": zipmap, "output_label": np.array(["ok", "ok"])}, 2)
    assert results[0] == {"output_probability": {"ok": 0.75, "bad": 0.25}, "output_label": "ok"}
    assert isinstance(results[1], InvalidMessage)  # NaN inside the map


def test_outputs_of_another_shape_or_type_say_which_output():
    with pytest.raises(BatchMismatchError, match="'probabilities'"):
        rows_to_results({"probabilities": [{"a": 1.0}]}, 2)
    with pytest.raises(
        TypeError, match=r"output 'tensors' is a sequence of ndarray: the service reads tensors"
    ):
        rows_to_results({"tensors": [np.zeros(2), np.zeros(2)]}, 2)


def _model(tmp_path: Path, outputs: str) -> Path:
    """features [N, 2] -> ZipMap over classes a, b (``zipmap``), the row maximum as [N, 1] (``n1``), or a
    sequence of tensors (``sequence``)."""
    x = helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", 2])
    if outputs == "sequence":
        seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, ["N", 2]))
        nodes = [helper.make_node("SequenceConstruct", ["features"], ["parts"])]
        graph = helper.make_graph(nodes, "g", [x], [helper.make_value_info("parts", seq)])
    else:
        seqmap = helper.make_sequence_type_proto(
            helper.make_map_type_proto(
                TensorProto.STRING, helper.make_tensor_type_proto(TensorProto.FLOAT, [])
            )
        )
        nodes = [
            helper.make_node(
                "ZipMap",
                ["features"],
                ["output_probability"],
                domain="ai.onnx.ml",
                classlabels_strings=["a", "b"],
            ),
            helper.make_node("ReduceMax", ["features"], ["top"], keepdims=1, axes=[1]),
        ]
        out = [
            helper.make_value_info("output_probability", seqmap),
            helper.make_tensor_value_info("top", TensorProto.FLOAT, ["N", 1]),
        ]
        graph = helper.make_graph(nodes, "g", [x], out)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 1)]
    )
    model.ir_version = 8
    path = tmp_path / f"{outputs}.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _settings(path: Path):
    return load_settings(
        model={"path": str(path), "providers": ["cpu"], "processor": "features", "features": ["a", "b"]}
    )


def test_a_zipmap_classifier_serves_with_the_features_processor(tmp_path):
    settings = _settings(_model(tmp_path, "zipmap"))
    model = load_model(settings)
    warm_up(model, [1, 4], "MICROBATCH_MODEL__FEATURES", model_setting(settings.model))
    items = [model.processor.parse_fields({"a": 0.25, "b": 0.75})]
    (result,) = model.processor.postprocess(model.engine.run(model.processor.preprocess(items)), items)
    assert result == {"output_probability": {"a": 0.25, "b": 0.75}, "top": 0.75}


def test_outputs_the_service_cannot_read_stop_start_up_naming_the_model_and_the_output(tmp_path):
    settings = _settings(_model(tmp_path, "sequence"))
    model = load_model(settings)
    with pytest.raises(ConfigError) as err:
        warm_up(model, [1], "MICROBATCH_MODEL__FEATURES", model_setting(settings.model))
    assert err.value.setting == "MICROBATCH_MODEL__PATH"
    assert "output 'parts' is a sequence of ndarray" in str(err.value)
