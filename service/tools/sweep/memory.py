"""GPU memory for the sweep's memory cap, read through NVML (nvidia-ml-py, the bench extra)."""

from __future__ import annotations

import os

import structlog


class DeviceMemory:
    """Memory of the GPU that ONNX Runtime's CUDA provider uses, read through NVML (nvidia-ml-py).

    ``used()`` is the whole device's usage, other processes included: NVML's per-process figures are not
    available inside most containers, and what neighbours hold is unavailable to the service all the same.
    ONNX Runtime's arena keeps what it grew to, so the figure after a size is the peak up to that size.
    """

    def __init__(self, nvml, handle) -> None:
        self._nvml = nvml
        self._handle = handle
        self.total: int = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
        self.name: str = nvml.nvmlDeviceGetName(handle)
        self.driver: str = nvml.nvmlSystemGetDriverVersion()

    @classmethod
    def open(cls, provider: str) -> DeviceMemory | None:
        """None unless ``provider`` is CUDA and NVML answers. A missing package or driver is only a
        warning: the sweep still runs, without the memory cap."""
        if provider != "CUDAExecutionProvider":
            return None
        log = structlog.get_logger("microbatch.sweep")
        try:
            import pynvml
        except ImportError:
            log.warning("device_memory_unmeasured", why="nvidia-ml-py is not installed (the bench extra)")
            return None
        try:
            pynvml.nvmlInit()
            device = nvml_device(os.environ.get("CUDA_VISIBLE_DEVICES"))
            by_uuid = isinstance(device, str)
            get = pynvml.nvmlDeviceGetHandleByUUID if by_uuid else pynvml.nvmlDeviceGetHandleByIndex
            return cls(pynvml, get(device))
        except pynvml.NVMLError as exc:
            log.warning("device_memory_unmeasured", why=str(exc))
            return None

    def used(self) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def describe(self) -> dict:
        return {"name": self.name, "memory_total_bytes": self.total, "driver": self.driver}

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def nvml_device(visible: str | None) -> int | str:
    """The NVML index or UUID of the device the CUDA provider uses (its device 0: the first visible one).

    NVML ignores CUDA_VISIBLE_DEVICES, so its first entry is mapped here. An index there counts in CUDA's
    order, which matches NVML's (PCI bus order) on the usual single-model machines.
    """
    first = (visible or "").split(",")[0].strip()
    if first.isdigit():
        return int(first)
    if first.startswith(("GPU-", "MIG-")):
        return first
    return 0
