"""service/engine/: provider choice (pure) and the Engine around a tiny ONNX model built here."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from service.engine import Engine, choose_providers, cuda_device_count
from service.errors import ConfigError

CUDA, CPU, TRT, ROCM = (
    "CUDAExecutionProvider",
    "CPUExecutionProvider",
    "TensorrtExecutionProvider",
    "ROCMExecutionProvider",
)
KNOWN = [TRT, CUDA, ROCM, CPU]
GPU_BUILD = [TRT, CUDA, CPU]  # what onnxruntime-gpu lists as available, GPU or not
FEATURES = 3
METADATA = {"microbatch.processor": "features", "microbatch.features": '["a", "b", "c"]'}


# -- choose_providers -----------------------------------------------------------------------------------


def test_unknown_provider_names_the_providers_setting():
    with pytest.raises(ConfigError) as err:
        choose_providers(["CUDAExecutionProvider", "QuantumExecutionProvider"], KNOWN, GPU_BUILD, 1)
    assert err.value.setting == "MICROBATCH_MODEL__PROVIDERS"
    assert "QuantumExecutionProvider" in str(err.value)


def test_cuda_without_a_device_falls_back_to_cpu_and_reports_the_drop():
    usable, dropped = choose_providers([CUDA, CPU], KNOWN, GPU_BUILD, 0)
    assert usable == [CPU]
    assert dropped == [CUDA]


def test_tensorrt_without_a_device_is_dropped_too():
    usable, dropped = choose_providers([TRT, CUDA, CPU], KNOWN, GPU_BUILD, 0)
    assert usable == [CPU]
    assert dropped == [TRT, CUDA]


def test_cuda_only_without_a_device_says_no_cuda_device():
    with pytest.raises(ConfigError) as err:
        choose_providers([CUDA], KNOWN, GPU_BUILD, 0)
    assert err.value.setting == "MICROBATCH_MODEL__PROVIDERS"
    assert "no CUDA device" in str(err.value)


def test_a_provider_missing_from_this_build_is_dropped():
    usable, dropped = choose_providers([ROCM, CPU], KNOWN, GPU_BUILD, 1)
    assert (usable, dropped) == ([CPU], [ROCM])
    with pytest.raises(ConfigError) as err:
        choose_providers([ROCM], KNOWN, GPU_BUILD, 1)
    assert err.value.setting == "MICROBATCH_MODEL__PROVIDERS"
    assert "no CUDA device" not in str(err.value)


@pytest.mark.parametrize("requested", [[CUDA, CPU], [CPU, CUDA], [TRT, CUDA, CPU], [CPU, TRT]])
def test_order_is_preserved_when_everything_can_run(requested):
    usable, dropped = choose_providers(requested, KNOWN, GPU_BUILD, 2)
    assert usable == requested
    assert dropped == []


def test_order_is_preserved_among_the_survivors():
    usable, dropped = choose_providers([ROCM, CUDA, CPU], KNOWN, GPU_BUILD, 1)
    assert usable == [CUDA, CPU]
    assert dropped == [ROCM]


def test_cpu_needs_no_cuda_device():
    assert choose_providers([CPU], KNOWN, GPU_BUILD, 0) == ([CPU], [])


# -- Engine ---------------------------------------------------------------------------------------------


def build_double_model(path: Path, metadata: dict[str, str] | None = None) -> Path:
    """Y = X * 2 over a dynamic batch axis."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", FEATURES])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", FEATURES])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    graph = helper.make_graph([helper.make_node("Mul", ["X", "two"], ["Y"])], "double", [x], [y], [two])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # old enough for any onnxruntime >= 1.20
    helper.set_model_props(model, metadata if metadata is not None else METADATA)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> Path:
    return build_double_model(tmp_path_factory.mktemp("model") / "double.onnx")


@pytest.fixture(scope="module")
def cpu_engine(model_path) -> Engine:
    return Engine(model_path, [CPU], intra_op_threads=1)


def test_engine_reports_names_provider_and_metadata(cpu_engine, model_path):
    assert cpu_engine.provider == CPU
    assert cpu_engine.input_names == ("X",)
    assert cpu_engine.output_names == ("Y",)
    assert cpu_engine.metadata == METADATA
    described = cpu_engine.describe()
    assert described["provider"] == CPU
    assert described["path"] == str(model_path)


@pytest.mark.parametrize("batch", [1, 5, 16])
def test_engine_runs_any_batch_size(cpu_engine, batch):
    x = np.arange(batch * FEATURES, dtype=np.float32).reshape(batch, FEATURES)
    outputs = cpu_engine.run({"X": x})
    assert list(outputs) == ["Y"]
    np.testing.assert_array_equal(outputs["Y"], x * 2)


def test_engine_run_raises_on_a_bad_feed(cpu_engine):
    with pytest.raises(Exception):  # noqa: B017 - whatever ONNX Runtime raises; the pipeline splits on any
        cpu_engine.run({"X": np.zeros((2, FEATURES + 1), dtype=np.float32)})


def test_model_without_metadata_has_an_empty_map(tmp_path):
    engine = Engine(build_double_model(tmp_path / "bare.onnx", {}), [CPU])
    assert engine.metadata == {}


@pytest.mark.skipif(cuda_device_count() > 0, reason="checks the fallback of a machine without a GPU")
def test_default_providers_fall_back_to_cpu_without_a_gpu(model_path):
    engine = Engine(model_path, [CUDA, CPU])
    assert engine.provider == CPU
    np.testing.assert_array_equal(engine.run({"X": np.ones((1, FEATURES), np.float32)})["Y"], [[2, 2, 2]])


@pytest.mark.parametrize("content", [b"", b"this is not an onnx model", b"\x08\x07\x12\x00garbage\xff"])
def test_corrupt_model_file_names_the_path_setting(tmp_path, content):
    path = tmp_path / "corrupt.onnx"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        Engine(path, [CPU])
    assert err.value.setting == "MICROBATCH_MODEL__PATH"
    assert str(path) in str(err.value)


def test_missing_model_file_names_the_path_setting(tmp_path):
    with pytest.raises(ConfigError) as err:
        Engine(tmp_path / "absent.onnx", [CPU])
    assert err.value.setting == "MICROBATCH_MODEL__PATH"


def test_unknown_provider_is_refused_before_loading(tmp_path):
    with pytest.raises(ConfigError) as err:
        Engine(tmp_path / "absent.onnx", ["NoSuchExecutionProvider"])
    assert err.value.setting == "MICROBATCH_MODEL__PROVIDERS"


@pytest.mark.skipif(cuda_device_count() > 0, reason="checks the path of a machine without a GPU")
def test_default_providers_print_no_error_lines_without_a_gpu(model_path):
    """onnxruntime-gpu prints '[E:onnxruntime...' lines when CUDA is tried on a machine without a GPU; the
    engine must not let it try."""
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        import numpy as np
        from service.engine import Engine
        engine = Engine(Path({str(model_path)!r}), ["CUDAExecutionProvider", "CPUExecutionProvider"])
        engine.run({{"X": np.ones((2, {FEATURES}), np.float32)}})
        print("PROVIDER", engine.provider)
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("MICROBATCH_")}
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "PROVIDER" in proc.stdout
    for line in (proc.stdout + proc.stderr).splitlines():
        assert "ERROR" not in line, line
        assert "[E:" not in line, line
        assert "[error" not in line, line  # structlog's console rendering of an error event
