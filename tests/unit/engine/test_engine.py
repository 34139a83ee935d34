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
from structlog.testing import capture_logs

from service.config import GpuSettings, Settings
from service.engine import Engine, choose_providers, cuda_device_count, drain
from service.engine.model import load_model, served_shapes
from service.engine.providers import (
    NO_DRIVER,
    Shapes,
    built_with_cuda,
    cuda_libraries,
    cuda_problem,
    expected_drop,
    provider_options,
    trt_profile,
)
from service.engine.session import _declared_inputs
from service.errors import ConfigError
from service.processors.base import Port

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

NO_DEVICE = "no CUDA device (the driver reports none)"


def test_unknown_provider_names_the_providers_setting():
    with pytest.raises(ConfigError) as err:
        choose_providers(["CUDAExecutionProvider", "QuantumExecutionProvider"], KNOWN, GPU_BUILD, None)
    assert err.value.setting == "MICROBATCH_MODEL__PROVIDERS"
    assert "QuantumExecutionProvider" in str(err.value)


def test_cuda_without_a_device_falls_back_to_cpu_and_reports_the_drop():
    usable, dropped = choose_providers([CUDA, CPU], KNOWN, GPU_BUILD, NO_DEVICE)
    assert usable == [CPU]
    assert dropped == {CUDA: NO_DEVICE}


def test_tensorrt_without_a_device_is_dropped_too():
    usable, dropped = choose_providers([TRT, CUDA, CPU], KNOWN, GPU_BUILD, NO_DEVICE)
    assert usable == [CPU]
    assert dropped == {TRT: NO_DEVICE, CUDA: NO_DEVICE}


def test_cuda_only_without_a_device_says_no_cuda_device():
    with pytest.raises(ConfigError) as err:
        choose_providers([CUDA], KNOWN, GPU_BUILD, NO_DEVICE)
    assert err.value.setting == "MICROBATCH_MODEL__PROVIDERS"
    assert "no CUDA device" in str(err.value)


def test_a_provider_missing_from_this_build_is_dropped():
    usable, dropped = choose_providers([ROCM, CPU], KNOWN, GPU_BUILD, None)
    assert (usable, dropped) == ([CPU], {ROCM: "not in this ONNX Runtime build"})
    with pytest.raises(ConfigError) as err:
        choose_providers([ROCM], KNOWN, GPU_BUILD, None)
    assert err.value.setting == "MICROBATCH_MODEL__PROVIDERS"
    assert "no CUDA device" not in str(err.value)


@pytest.mark.parametrize("requested", [[CUDA, CPU], [CPU, CUDA], [TRT, CUDA, CPU], [CPU, TRT]])
def test_order_is_preserved_when_everything_can_run(requested):
    usable, dropped = choose_providers(requested, KNOWN, GPU_BUILD, None)
    assert usable == requested
    assert dropped == {}


def test_order_is_preserved_among_the_survivors():
    usable, dropped = choose_providers([ROCM, CUDA, CPU], KNOWN, GPU_BUILD, None)
    assert usable == [CUDA, CPU]
    assert list(dropped) == [ROCM]


def test_cpu_needs_no_cuda_device():
    assert choose_providers([CPU], KNOWN, GPU_BUILD, NO_DEVICE) == ([CPU], {})


# -- cuda_problem: why CUDA cannot serve, asked of fakes of the driver and the libraries -----------------


class FakeDriver:
    """libcuda.so.1: cuInit's status, and the device count cuDeviceGetCount writes."""

    def __init__(self, devices: int, init_status: int = 0) -> None:
        self.devices, self.init_status = devices, init_status

    def cuInit(self, _flags: int) -> int:  # noqa: N802 - the driver's name
        return self.init_status

    def cuDeviceGetCount(self, count) -> int:  # noqa: N802
        count._obj.value = self.devices
        return 0


def loader(driver: FakeDriver | None, missing: set[str] = frozenset()):
    """A ``ctypes.CDLL`` stand-in: the driver (absent when None), every other library but ``missing``."""
    loaded: list[str] = []

    def load(name: str) -> object:
        if name == "libcuda.so.1":
            if driver is None:
                raise OSError(f"{name}: cannot open shared object file")
            return driver
        if name in missing:
            raise OSError(f"{name}: cannot open shared object file")
        loaded.append(name)
        return object()

    load.loaded = loaded  # type: ignore[attr-defined]
    return load


def no_preload() -> None:
    pass


def test_cuda_libraries_follow_the_cuda_major_onnx_runtime_wasbuilt_with_cuda():
    assert cuda_libraries("13.0") == (
        "libcudart.so.13",
        "libcublasLt.so.13",
        "libcublas.so.13",
        "libcudnn.so.9",
    )
    assert cuda_libraries("12.8")[0] == "libcudart.so.12"


def test_no_driver_no_device_and_a_missing_library_are_each_named():
    assert "no NVIDIA driver" in cuda_problem(loader(None), no_preload)
    assert cuda_problem(loader(FakeDriver(0)), no_preload) == "no CUDA device (the driver reports none)"
    assert cuda_problem(loader(FakeDriver(1, init_status=100)), no_preload) == (
        "no CUDA device (CUDA driver error 100)"
    )
    problem = cuda_problem(loader(FakeDriver(1), {"libcudnn.so.9"}), no_preload)
    assert problem is not None and "libcudnn.so.9" in problem and "onnxruntime-gpu[cuda,cudnn]" in problem


def test_cuda_can_serve_with_a_device_and_every_library_after_the_wheels_are_preloaded():
    preloaded: list[bool] = []
    load = loader(FakeDriver(2))
    assert cuda_problem(load, lambda: preloaded.append(True)) is None
    assert preloaded == [True]
    assert load.loaded == list(cuda_libraries(built_with_cuda()))


def test_the_reason_reaches_the_error_when_nothing_else_can_serve():
    with pytest.raises(ConfigError) as err:
        choose_providers([CUDA], KNOWN, GPU_BUILD, "a CUDA library is missing: libcudnn.so.9")
    assert "libcudnn.so.9" in str(err.value)


# -- whether a drop is news: a CPU machine on the default list is not ---------------------------------------


def test_the_default_list_without_a_driver_is_an_expected_drop():
    assert cuda_problem(loader(None), no_preload) == NO_DRIVER
    assert expected_drop(True, NO_DRIVER)


@pytest.mark.parametrize(
    ("default", "cuda"),
    [
        (True, NO_DEVICE),  # a driver but no device: a GPU machine gone wrong
        (True, "a CUDA library is missing: libcudnn.so.9"),
        (False, NO_DRIVER),  # a setting asked for CUDA (the gpu overlay): the user wants to know
    ],
)
def test_a_driver_that_cannot_serve_or_a_list_a_setting_asked_for_is_worth_a_warning(default, cuda):
    assert not expected_drop(default, cuda)


# -- provider options: CUDA and TensorRT as settings -----------------------------------------------------


def test_cuda_gets_safe_defaults_and_a_memory_limit_only_when_set():
    (cuda, cpu) = provider_options([CUDA, CPU], GpuSettings())
    assert cpu == CPU
    assert cuda == (
        CUDA,
        {
            "device_id": "0",
            "arena_extend_strategy": "kSameAsRequested",
            "cudnn_conv_algo_search": "HEURISTIC",
        },
    )
    (cuda, _) = provider_options([CUDA, CPU], GpuSettings(device_id=1, mem_limit_mb=2048))
    assert cuda[1]["device_id"] == "1" and cuda[1]["gpu_mem_limit"] == str(2048 * 2**20)


def test_tensorrt_is_set_up_with_fp16_its_cache_and_the_profile(tmp_path):
    profile = {"trt_profile_min_shapes": "X:1x3"}
    gpu = GpuSettings(trt_fp16=True, trt_cache_dir=tmp_path)
    (trt, cuda, cpu) = provider_options([TRT, CUDA, CPU], gpu, profile)
    assert trt == (
        TRT,
        {
            "device_id": "0",
            "trt_fp16_enable": "True",
            "trt_engine_cache_enable": "True",
            "trt_engine_cache_path": str(tmp_path),
            "trt_profile_min_shapes": "X:1x3",
        },
    )
    assert cuda[0] == CUDA and cpu == CPU
    assert provider_options([TRT], GpuSettings())[0] == (TRT, {"device_id": "0", "trt_fp16_enable": "False"})


def test_the_tensorrt_profile_spans_the_batch_sizes_and_sequence_lengths_served():
    shapes = Shapes(batch=(1, 16, 512), sequence=(1, 32, 128))
    features = [Port("input", "tensor(float)", ("batch", 11))]
    assert trt_profile(features, shapes) == {
        "trt_profile_min_shapes": "input:1x11",
        "trt_profile_opt_shapes": "input:16x11",
        "trt_profile_max_shapes": "input:512x11",
    }
    text = [Port("input_ids", "tensor(int64)", ("batch", "sequence")), Port("mask", "", (None, None))]
    assert trt_profile(text, shapes)["trt_profile_max_shapes"] == "input_ids:512x128,mask:512x128"


def test_served_shapes_follow_the_batch_and_length_settings():
    settings = Settings(batch={"max_size": 32, "drain_max_size": 256}, model={"max_length": 64})
    assert served_shapes(settings) == Shapes(batch=(1, 32, 256), sequence=(1, 16, 64))
    assert served_shapes(Settings()).batch == (1, 16, drain.LIMIT)


def test_a_model_files_declared_inputs_are_read_without_a_session(model_path):
    (port,) = _declared_inputs(model_path)
    assert port.name == "X" and port.shape[1] == FEATURES


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
    assert list(engine.dropped) == [CUDA]  # with why: this machine's real driver, or its absence
    assert engine.dropped[CUDA].startswith(("no NVIDIA driver", "no CUDA device"))
    assert engine.describe()["dropped"] == engine.dropped
    assert engine.bound is None  # I/O binding is for the GPU
    np.testing.assert_array_equal(engine.run({"X": np.ones((1, FEATURES), np.float32)})["Y"], [[2, 2, 2]])


@pytest.mark.skipif(cuda_device_count() > 0, reason="checks the log of a machine without a GPU")
def test_a_cpu_machine_on_the_default_list_says_which_provider_serves_and_warns_of_nothing(model_path):
    default = list(Settings().model.providers)
    assert CUDA in default
    with capture_logs() as captured:
        Engine(model_path, default, default_providers=True)
    assert [(e["event"], e["log_level"], e.get("chosen")) for e in captured] == [("providers", "info", CPU)]
    with capture_logs() as captured:
        Engine(model_path, default)  # the same list from a setting: what was dropped is news
    assert [(e["event"], e["log_level"]) for e in captured] == [
        ("providers_unavailable", "warning"),
        ("providers", "info"),
    ]
    with capture_logs() as captured:
        Engine(model_path, [CPU])  # no choice made: nothing to say
    assert captured == []


@pytest.mark.skipif(cuda_device_count() > 0, reason="checks the log of a machine without a GPU")
def test_load_model_warns_only_when_a_setting_asked_for_the_providers():
    def warnings(**model: object) -> list[str]:
        with capture_logs() as captured:
            load_model(Settings(model={"name": "metrics-anomaly", **model}))
        return [e["event"] for e in captured if e["log_level"] == "warning"]

    assert warnings() == []
    assert warnings(providers=["cuda", "cpu"]) == ["providers_unavailable"]


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
