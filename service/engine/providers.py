"""Which execution providers can serve here: the request, what this ONNX Runtime build has, and the GPUs,
and when CUDA cannot serve, exactly why."""

from __future__ import annotations

import contextlib
import ctypes
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from service.config import GpuSettings, ModelSettings
from service.errors import ConfigError
from service.processors.base import Port

CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
GPU_PROVIDERS = frozenset({CUDA, TENSORRT})
_SETTING = ModelSettings.env("providers")
CUDNN_MAJOR = 9
"""The cuDNN that onnxruntime-gpu's CUDA provider links against (its install page: CUDA 12 or 13, cuDNN 9)."""
INSTALL_HINT = "pip install 'onnxruntime-gpu[cuda,cudnn]', or put the libraries on LD_LIBRARY_PATH"
NO_DRIVER = (
    "no NVIDIA driver (libcuda.so.1 not found: the host's driver, which a container gets from the NVIDIA "
    "Container Toolkit)"
)
""":func:`cuda_problem`'s answer where there is no NVIDIA driver: a CPU machine, not a broken GPU one."""

Loader = Callable[[str], object]


def cuda_libraries(cuda_version: str) -> tuple[str, ...]:
    """The shared libraries the CUDA provider of an ONNX Runtime built with ``cuda_version`` ("13.0")
    cannot run without, in load order (cuBLAS needs cuBLASLt first). cuFFT and NVRTC are left out: ONNX
    Runtime itself treats them as optional."""
    major = cuda_version.split(".", maxsplit=1)[0]
    return (
        f"libcudart.so.{major}",
        f"libcublasLt.so.{major}",
        f"libcublas.so.{major}",
        f"libcudnn.so.{CUDNN_MAJOR}",
    )


def cuda_problem(load: Loader = ctypes.CDLL, preload: Callable[[], None] | None = None) -> str | None:
    """Why CUDA cannot serve in this process, or None when it can: no NVIDIA driver, no device, or a
    library missing, named. ``load`` opens a shared library by name (``ctypes.CDLL``); ``preload`` first
    loads NVIDIA's pip wheels' libraries, as the ``[cuda,cudnn]`` extras install them (default:
    ``onnxruntime.preload_dlls``, silenced). Asked in this order because each answer makes the next
    question moot: with no driver there is no device, with no device the libraries do not matter."""
    devices, why = _devices(load)
    if not devices:
        return why
    (preload or _preload_wheels)()
    for library in cuda_libraries(built_with_cuda()):
        try:
            load(library)
        except OSError:
            return f"a CUDA library is missing: {library} ({INSTALL_HINT})"
    return None


def built_with_cuda() -> str:
    """The CUDA version this ONNX Runtime was built with ("13.0"); "" for a CPU-only build."""
    from onnxruntime.capi import build_and_package_info

    return str(getattr(build_and_package_info, "cuda_version", "") or "")


def _preload_wheels() -> None:
    """onnxruntime.preload_dlls: the CUDA and cuDNN libraries of NVIDIA's pip wheels into this process,
    where the CUDA provider then finds them. It prints what it could not load; ``cuda_problem`` names that
    itself, once."""
    import onnxruntime

    preload = getattr(onnxruntime, "preload_dlls", None)
    if preload is None:
        return
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(Exception):
        preload(cuda=True, cudnn=True)


def cuda_device_count() -> int:
    """How many CUDA devices the driver reports; 0 when there is no driver or no GPU.

    Asked of the driver directly because onnxruntime-gpu lists CUDAExecutionProvider as available even on
    machines without a GPU, and then prints ERROR lines when a session tries to use it.
    """
    return _devices(ctypes.CDLL)[0]


def _devices(load: Loader) -> tuple[int, str]:
    """(the CUDA devices the driver reports, why there are none when 0), asking the driver itself."""
    try:
        driver = load("libcuda.so.1")
    except OSError:
        return 0, NO_DRIVER
    count = ctypes.c_int(0)
    status = driver.cuInit(0)  # type: ignore[attr-defined]
    if status == 0:
        status = driver.cuDeviceGetCount(ctypes.byref(count))  # type: ignore[attr-defined]
    if status != 0:
        return 0, f"no CUDA device (CUDA driver error {status})"
    return count.value, "no CUDA device (the driver reports none)"


def choose_providers(
    requested: Sequence[str], known: Sequence[str], available: Sequence[str], cuda: str | None
) -> tuple[list[str], dict[str, str]]:
    """Split ``requested`` into (usable in order, dropped with why). ``cuda``: why CUDA cannot serve here
    (:func:`cuda_problem`), None when it can. Pure, so it is testable without a GPU.

    Raises ConfigError naming MICROBATCH_MODEL__PROVIDERS for a provider ONNX Runtime does not know, or
    when none of the requested ones can run here (saying why).
    """
    unknown = [p for p in requested if p not in known]
    if unknown:
        raise ConfigError(_SETTING, f"unknown provider(s) {unknown}; known: {list(known)}")
    usable: list[str] = []
    dropped: dict[str, str] = {}
    for provider in requested:
        if provider not in available:
            dropped[provider] = "not in this ONNX Runtime build"
        elif provider in GPU_PROVIDERS and cuda is not None:
            dropped[provider] = cuda
        else:
            usable.append(provider)
    if not usable:
        why = "; ".join(sorted(set(dropped.values())))
        raise ConfigError(
            _SETTING,
            f"none of {list(requested)} can run here ({why}); available: {list(available)}; "
            "add CPUExecutionProvider to fall back",
        )
    return usable, dropped


def expected_drop(default: bool, cuda: str | None) -> bool:
    """Whether dropping the GPU providers needs no warning: ``default``, the providers nobody set (CUDA
    only if it is there, then the CPU), on a machine with no NVIDIA driver at all, i.e. a CPU machine
    serving on its CPU as it should. A list a setting asked for (the ``gpu`` overlay sets CUDA first), or a
    driver with CUDA still unusable (no device, a library missing, ONNX Runtime built without CUDA), is a
    misconfiguration worth a warning. ``cuda``: :func:`cuda_problem`'s answer."""
    return default and cuda == NO_DRIVER


# -- how each provider is set up -------------------------------------------------------------------------

ProviderEntry = str | tuple[str, dict[str, str]]


@dataclass(frozen=True, slots=True)
class Shapes:
    """The batch sizes and sequence lengths the service will run, each as (smallest, usual, largest):
    what TensorRT builds its engine for."""

    batch: tuple[int, int, int]
    sequence: tuple[int, int, int]


def trt_profile(ports: Sequence[Port], shapes: Shapes) -> dict[str, str]:
    """TensorRT's optimisation profile for the model's inputs ``ports``: ``trt_profile_min_shapes``,
    ``trt_profile_opt_shapes`` and ``trt_profile_max_shapes`` (``"input_ids:1x1,attention_mask:1x1"``).
    A fixed size stays; the first axis, when not fixed, is the batch; any other axis not fixed is a
    sequence. A shape outside the profile would make TensorRT rebuild its engine mid-stream."""
    profile = {}
    for which, i in (("min", 0), ("opt", 1), ("max", 2)):
        inputs = []
        for port in ports:
            dims = [
                d if isinstance(d, int) and d > 0 else (shapes.batch if axis == 0 else shapes.sequence)[i]
                for axis, d in enumerate(port.shape)
            ]
            inputs.append(f"{port.name}:{'x'.join(str(d) for d in dims)}")
        profile[f"trt_profile_{which}_shapes"] = ",".join(inputs)
    return profile


def provider_options(
    usable: Sequence[str], gpu: GpuSettings, trt: Mapping[str, str] | None = None
) -> list[ProviderEntry]:
    """``usable`` as ``InferenceSession(providers=...)`` takes them: CUDA and TensorRT with their options
    from ``gpu`` (and TensorRT with the profile ``trt``, see :func:`trt_profile`), others by name."""
    entries: list[ProviderEntry] = []
    for provider in usable:
        if provider == CUDA:
            options = {
                "device_id": str(gpu.device_id),
                "arena_extend_strategy": gpu.arena_extend_strategy,
                "cudnn_conv_algo_search": gpu.cudnn_conv_algo_search,
            }
            if gpu.mem_limit_mb:
                options["gpu_mem_limit"] = str(gpu.mem_limit_mb * 2**20)
            entries.append((provider, options))
        elif provider == TENSORRT:
            options = {"device_id": str(gpu.device_id), "trt_fp16_enable": str(gpu.trt_fp16)}
            if gpu.trt_cache_dir is not None:
                cache = str(gpu.trt_cache_dir)
                options |= {"trt_engine_cache_enable": "True", "trt_engine_cache_path": cache}
            entries.append((provider, options | dict(trt or {})))
        else:
            entries.append(provider)
    return entries
