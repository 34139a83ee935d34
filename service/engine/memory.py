"""Memory the batch size must stay under: the GPU's, read through NVML (nvidia-ml-py, the bench extra), and
the host's (the process's cgroup limit, else the machine's RAM), with the process's peak resident set.

Used by the sweep's memory cap and by the drain ceiling ``microbatch run`` measures at warm-up.
"""

from __future__ import annotations

import os
import resource
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

_CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),  # cgroup v2
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),  # cgroup v1
)
# cgroup v1 writes "no limit" as a huge number (PAGE_COUNTER_MAX pages); anything from here up is none.
_NO_LIMIT = 1 << 60


@dataclass(frozen=True, slots=True)
class MemoryLimit:
    """What the process may use: ``total`` bytes, and where that figure comes from (for the start-up log)."""

    total: int
    source: str  # "cgroup" | "ram" | the GPU's name


def host_limit(cgroup_files: tuple[Path, ...] = _CGROUP_LIMITS) -> MemoryLimit:
    """The process's cgroup memory limit (a container's, a Kubernetes pod's), else the machine's RAM."""
    for path in cgroup_files:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < _NO_LIMIT:
            return MemoryLimit(int(text), "cgroup")
    return MemoryLimit(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "ram")


def peak_rss() -> int:
    """The process's peak resident set so far, in bytes (the kernel's high-water mark: ONNX Runtime's
    arena keeps what it grew to, so it is a peak either way)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux counts KiB, macOS bytes


class DeviceMemory:
    """Memory of the GPU that ONNX Runtime's CUDA provider uses, read through NVML (nvidia-ml-py).

    ``used()`` is the whole device's usage, other processes included: NVML's per-process figures are not
    available inside most containers, and what neighbours hold is unavailable to the service all the same.
    ONNX Runtime's arena keeps what it grew to, so the figure after a size is the peak up to that size.
    """

    def __init__(self, nvml: Any, handle: Any) -> None:  # pynvml's module and a device handle
        self._nvml = nvml
        self._handle = handle
        self.total: int = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
        self.name: str = nvml.nvmlDeviceGetName(handle)
        self.driver: str = nvml.nvmlSystemGetDriverVersion()

    @classmethod
    def open(cls, provider: str, device_id: int = 0) -> DeviceMemory | None:
        """The device the CUDA provider's ``device_id`` is (``MICROBATCH_GPU__DEVICE_ID``); None unless
        ``provider`` is CUDA and NVML answers. A missing package or driver is only a warning: the sweep
        still runs, without the memory cap, and the service without the device's gauges."""
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
            device = nvml_device(os.environ.get("CUDA_VISIBLE_DEVICES"), device_id)
            by_uuid = isinstance(device, str)
            get = pynvml.nvmlDeviceGetHandleByUUID if by_uuid else pynvml.nvmlDeviceGetHandleByIndex
            return cls(pynvml, get(device))
        except pynvml.NVMLError as exc:
            log.warning("device_memory_unmeasured", why=str(exc))
            return None

    def used(self) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def utilization(self) -> float:
        """The share of the last sample period (1/6 s to 1 s, by device) in which a kernel ran, 0 to 1."""
        return float(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu) / 100

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "memory_total_bytes": self.total, "driver": self.driver}

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def nvml_device(visible: str | None, device_id: int = 0) -> int | str:
    """The NVML index or UUID of the CUDA provider's device ``device_id``: the ``device_id``-th visible
    one.

    NVML ignores CUDA_VISIBLE_DEVICES, so its entries are mapped here. An index there counts in CUDA's
    order, which matches NVML's (PCI bus order) on the usual single-model machines.
    """
    entries = [entry.strip() for entry in (visible or "").split(",") if entry.strip()]
    if device_id >= len(entries):
        return device_id
    chosen = entries[device_id]
    if chosen.isdigit():
        return int(chosen)
    if chosen.startswith(("GPU-", "MIG-")):
        return chosen
    return device_id
