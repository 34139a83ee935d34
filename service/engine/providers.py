"""Which execution providers can serve here: the request, what this ONNX Runtime build has, and the GPUs."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

from service.config import ModelSettings
from service.errors import ConfigError

_GPU_PROVIDERS = {"CUDAExecutionProvider", "TensorrtExecutionProvider"}
_SETTING = ModelSettings.env("providers")


def cuda_device_count() -> int:
    """How many CUDA devices the driver reports; 0 when there is no driver or no GPU.

    Asked of the driver directly because onnxruntime-gpu lists CUDAExecutionProvider as available even on
    machines without a GPU, and then prints ERROR lines when a session tries to use it.
    """
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def choose_providers(
    requested: Sequence[str], known: Sequence[str], available: Sequence[str], cuda_devices: int
) -> tuple[list[str], list[str]]:
    """Split ``requested`` into (usable in order, dropped). Pure, so it is testable without a GPU.

    Raises ConfigError naming MICROBATCH_MODEL__PROVIDERS for a provider ONNX Runtime does not know, or
    when none of the requested ones can run here.
    """
    unknown = [p for p in requested if p not in known]
    if unknown:
        raise ConfigError(_SETTING, f"unknown provider(s) {unknown}; known: {list(known)}")
    usable: list[str] = []
    dropped: list[str] = []
    for provider in requested:
        ok = provider in available and (provider not in _GPU_PROVIDERS or cuda_devices > 0)
        (usable if ok else dropped).append(provider)
    if not usable:
        why = "no CUDA device found" if set(requested) & _GPU_PROVIDERS and not cuda_devices else ""
        raise ConfigError(
            _SETTING,
            f"none of {list(requested)} can run here ({why or 'not in this ONNX Runtime build'}); "
            f"available: {list(available)}; add CPUExecutionProvider to fall back",
        )
    return usable, dropped
