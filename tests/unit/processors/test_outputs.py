"""Outputs as converters emit them (``processors.outputs``): ``[N, 1]`` tensors, skl2onnx's
default ZipMap sequence of maps, and a clear error for anything else; on models built here with the ONNX
helpers and run by ONNX Runtime, as skl2onnx's would be."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from service.config import load_settings
from service.engine import load_model, model_setting, warm_up
from service.engine.artifacts import read_classifier
from service.errors import BatchMismatchError, ConfigError, InvalidMessage
from service.processors.base import Classifier, ModelInfo, Port
from service.processors.outputs import results_for, rows_to_results

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
    assert "(declared seq(tensor(float)))" in str(err.value)


# The rules of processors.outputs, one by one, on what the converters' sessions return.

GBC = Classifier((0, 1), frozenset({"output_label"}), frozenset({"output_probability"}))
XGB = Classifier((0, 1, 2), frozenset({"label"}), frozenset({"probabilities"}))


def _info(ports: dict[str, str], classifier=None, config=None, **settings) -> ModelInfo:
    return ModelInfo(
        "m",
        Path("."),
        ("features",),
        tuple(ports),
        settings=settings,
        outputs=tuple(Port(name, kind) for name, kind in ports.items()),
        classifier=classifier,
        config=config or {},
    )


ZIPMAP_OUTPUTS = {"output_label": "tensor(int64)", "output_probability": "seq(map(int64,tensor(float)))"}


def test_a_classifiers_class_values_name_its_per_class_scores():
    results = results_for(_info({"label": "tensor(int64)", "probabilities": "tensor(float)"}, XGB))
    out = results({"label": np.array([2]), "probabilities": np.array([[0.25, 0.25, 0.5]], np.float32)}, 1)
    assert out == [{"label": 2, "probabilities": {0: 0.25, 1: 0.25, 2: 0.5}}]


def test_labels_name_the_classes_by_position_in_labels_maps_and_scores():
    results = results_for(_info(ZIPMAP_OUTPUTS, GBC, labels=["calm", "busy"]))
    zipmap = [{0: 0.25, 1: 0.75}, {0: 1.0, 1: 0.0}]
    out = results({"output_label": np.array([1, 0]), "output_probability": zipmap}, 2)
    assert out == [
        {"output_label": "busy", "output_probability": {"calm": 0.25, "busy": 0.75}},
        {"output_label": "calm", "output_probability": {"calm": 1.0, "busy": 0.0}},
    ]


def test_outputs_selects_and_renames_in_the_order_given():
    results = results_for(_info(ZIPMAP_OUTPUTS, GBC, outputs=["output_probability=p", "output_label=label"]))
    (out,) = results({"output_label": np.array([1]), "output_probability": [{0: 0.5, 1: 0.5}]}, 1)
    assert list(out) == ["p", "label"]
    only = results_for(_info(ZIPMAP_OUTPUTS, GBC, outputs=["output_label"]))
    assert only({"output_label": np.array([1]), "output_probability": [{}]}, 1) == [{"output_label": 1}]


def test_logits_become_label_score_and_probabilities_named_by_id2label():
    config = {"id2label": {"1": "failure", "0": "routine"}}
    results = results_for(_info({"logits": "tensor(float)"}, config=config))
    (out,) = results({"logits": np.array([[0.0, np.log(3.0)]], np.float32)}, 1)
    assert out["label"] == "failure"
    assert out["score"] == pytest.approx(0.75)
    assert out["probabilities"] == pytest.approx({"routine": 0.25, "failure": 0.75})
    raw = results_for(_info({"logits": "tensor(float)"}, logits="none"))
    assert raw({"logits": np.array([[1.0, 2.0]], np.float32)}, 1) == [{"logits": [1.0, 2.0]}]


def test_logits_of_another_number_of_classes_than_names_say_so():
    results = results_for(_info({"logits": "tensor(float)"}, labels=["a", "b", "c"]))
    with pytest.raises(ValueError, match="2 classes for 3 class names"):
        results({"logits": np.zeros((1, 2), np.float32)}, 1)


def test_settings_naming_what_the_model_lacks_stop_start_up():
    with pytest.raises(ConfigError, match=r"entry 2 names no output of the model \(its outputs") as err:
        results_for(_info(ZIPMAP_OUTPUTS, GBC, outputs=["output_label", "secret=p"]))
    assert err.value.setting == "MICROBATCH_MODEL__OUTPUTS"
    assert "secret" not in str(err.value)  # no message quotes a setting's value
    with pytest.raises(ConfigError, match="3 class names for the model's 2 classes") as err:
        results_for(_info(ZIPMAP_OUTPUTS, GBC, labels=["a", "b", "c"]))
    assert err.value.setting == "MICROBATCH_MODEL__LABELS"
    with pytest.raises(ConfigError) as err:
        results_for(_info(ZIPMAP_OUTPUTS, logits="scores"))
    assert err.value.setting == "MICROBATCH_MODEL__LOGITS"


def test_the_classifier_is_traced_from_the_graph_outputs_of_a_real_conversion(tmp_path):
    skl2onnx = pytest.importorskip("skl2onnx", reason="needs the dev extra (skl2onnx)")
    from sklearn.linear_model import LogisticRegression

    x = np.random.default_rng(0).normal(size=(60, 2)).astype(np.float32)
    y = np.array(["high", "low", "mid"])[np.digitize(x[:, 0], [-0.5, 0.5])]
    path = tmp_path / "logreg.onnx"
    path.write_bytes(skl2onnx.to_onnx(LogisticRegression().fit(x, y), x[:1]).SerializeToString())
    assert read_classifier(path) == Classifier(
        ("high", "low", "mid"), frozenset({"output_label"}), frozenset({"output_probability"})
    )


def test_two_outputs_giving_one_field_and_renamed_logits_stop_start_up():
    ports = {"logits": "tensor(float)", "label": "tensor(int64)"}
    with pytest.raises(
        ConfigError, match="outputs 'logits' and 'label' both give the result field 'label'"
    ) as err:
        results_for(_info(ports))
    assert err.value.setting == "MICROBATCH_MODEL__LOGITS"
    results_for(_info(ports, outputs=["logits", "label=model_label"]))  # renamed: fine
    with pytest.raises(ConfigError, match="renames the logits output") as err:
        results_for(_info(ports, outputs=["logits=scores"]))
    assert err.value.setting == "MICROBATCH_MODEL__OUTPUTS"


def test_names_that_do_not_match_the_declared_logits_blame_where_they_came_from():
    info = ModelInfo(
        "m",
        Path("."),
        ("input_ids",),
        ("logits",),
        outputs=(Port("logits", "tensor(float)", ("batch", 3)),),
        config={"id2label": {"0": "a", "1": "b"}},
    )
    with pytest.raises(ConfigError, match="2 class names for the 3 logits") as err:
        results_for(info)
    assert err.value.setting == "MICROBATCH_MODEL__PATH"
    bad_metadata = ModelInfo("m", Path("."), ("x",), ("y",), metadata={"microbatch.labels": "[not json"})
    with pytest.raises(ConfigError, match=r"microbatch\.labels is not a JSON list"):
        results_for(bad_metadata)


@pytest.mark.parametrize(
    ("outputs", "message"),
    [
        ({"score": np.array(1.0, dtype=np.float32)}, "output 'score' is a float32 tensor of shape []"),
        ({"class_index": np.array([0.5])}, "output 'class_index' is read as class indices"),
        ({"probabilities": np.array([0.5])}, "output 'probabilities' holds a classifier's scores"),
    ],
)
def test_outputs_of_odd_shapes_name_the_output(outputs, message):
    names = _info({"score": "tensor(float)"}, XGB, labels=["a", "b", "c"])
    with pytest.raises(TypeError, match=re.escape(message)):
        results_for(names)(outputs, 1)


def test_an_mlp_classifiers_label_is_traced_through_its_class_table(tmp_path):
    skl2onnx = pytest.importorskip("skl2onnx", reason="needs the dev extra (skl2onnx)")
    from sklearn.linear_model import SGDClassifier

    x = np.random.default_rng(0).normal(size=(60, 2)).astype(np.float32)
    path = tmp_path / "sgd.onnx"
    model = SGDClassifier(loss="log_loss", random_state=0).fit(x, (x[:, 0] > 0).astype(int))
    path.write_bytes(skl2onnx.to_onnx(model, x[:1]).SerializeToString())
    assert read_classifier(path) == Classifier((0, 1), frozenset({"output_label"}), frozenset())
