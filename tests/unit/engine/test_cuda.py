"""The CUDA path on a real NVIDIA GPU (``pytest -m cuda``): the provider's options applied, results equal to
the CPU's, the real runtime's out-of-memory text, the device's gauges. Skipped, with the engine's reason,
where CUDA cannot serve: CI has no GPU."""

from __future__ import annotations

import numpy as np
import pytest

from service.config import GpuSettings
from service.engine import Engine
from service.engine.memory import DeviceMemory
from service.errors import is_out_of_memory
from service.models.reference import MODELS_DIR
from service.observability import Metrics

pytestmark = pytest.mark.cuda

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"
MODEL = MODELS_DIR / "metrics-anomaly.onnx"


def _batch(engine: Engine, rows: int) -> dict[str, np.ndarray]:
    (port,) = engine.inputs
    width = port.shape[1]
    assert isinstance(width, int)
    return {port.name: np.random.default_rng(7).normal(size=(rows, width)).astype(np.float32)}


def test_cuda_serves_with_the_settings_given_and_agrees_with_the_cpu():
    gpu = GpuSettings(mem_limit_mb=1024)
    engine = Engine(MODEL, [CUDA, CPU], gpu=gpu)
    assert engine.provider == CUDA and engine.dropped == {}
    options = engine._session.get_provider_options()[CUDA]
    assert options["arena_extend_strategy"] == "kSameAsRequested"
    assert options["cudnn_conv_algo_search"] == "HEURISTIC"
    assert int(options["gpu_mem_limit"]) == 1024 * 2**20
    assert engine.bound is not None  # I/O binding, by default on the GPU
    for rows in (64, 37):  # a full bucket, and one padded up to 64
        feeds = _batch(engine, rows)
        on_gpu, on_cpu = engine.run(feeds), Engine(MODEL, [CPU]).run(feeds)
        for name, values in on_cpu.items():
            np.testing.assert_allclose(on_gpu[name], values, rtol=1e-3, atol=1e-4)
    assert len(engine.bound) == 1
    assert Engine(MODEL, [CUDA, CPU], gpu=GpuSettings(io_binding=False)).bound is None


def test_a_batch_beyond_the_memory_limit_fails_with_an_error_told_as_out_of_memory():
    """The text the split-and-hold relies on, from the real runtime: a 1 MiB arena and a batch that
    needs far more."""
    engine = Engine(MODEL, [CUDA, CPU], gpu=GpuSettings(mem_limit_mb=1))
    with pytest.raises(Exception) as err:
        engine.run(_batch(engine, 1_000_000))
    assert is_out_of_memory(str(err.value)), str(err.value)[:500]


def test_the_gpu_gauges_read_the_real_device():
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed (the bench extra)")
    device = DeviceMemory.open(CUDA)
    assert device is not None
    metrics = Metrics()
    metrics.attach_device(device)
    used = metrics.registry.get_sample_value("microbatch_gpu_memory_used_bytes")
    total = metrics.registry.get_sample_value("microbatch_gpu_memory_total_bytes")
    busy = metrics.registry.get_sample_value("microbatch_gpu_utilization_ratio")
    assert used is not None and total is not None and 0 < used <= total
    assert busy is not None and 0 <= busy <= 1
    device.close()
