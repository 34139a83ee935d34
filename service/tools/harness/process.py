"""The process under test: its environment, and its CPU and memory sampled while it runs.

Each system runs as a fresh child process (``service.tools.processes.start``), so its CPU and memory are
its own and nothing it loaded survives into the next system's measurement.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from service.config import ModelSettings
from service.tools.harness.measure import Sample
from service.tools.processes import settings_env

# Settings that choose the model: the scenario decides them, a caller's own values must not leak in.
_SCENARIO_OWNED = frozenset(
    ModelSettings.env(field)
    for field in ("path", "processor", "version", "features", "text_field", "tokenizer", "labels")
)


def child_env(base: Mapping[str, str], overrides: Mapping[str, str]) -> dict[str, str]:
    """The environment of a system under test: the caller's, minus the model-choosing settings, plus
    ``overrides`` (``{"KAFKA__GROUP_ID": "g", ...}``, the ``MICROBATCH_`` prefix added). The caller's other
    ``MICROBATCH_*`` settings (batch sizes, Kafka extras, threads) reach every system alike."""
    return settings_env(overrides, base, inherit=True, drop=_SCENARIO_OWNED)


@dataclass
class Sampler:
    """Samples one process every ``interval_s`` on a thread: CPU seconds (user + system) and RSS."""

    pid: int
    interval_s: float = 0.2
    samples: list[Sample] = field(default_factory=list)
    high_water_bytes: int | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        self._process = psutil.Process(self.pid)
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """End sampling; take a last sample and the kernel's RSS high-water mark while the process lives."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._sample()
        self.high_water_bytes = _vm_hwm(self.pid)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def _sample(self) -> None:
        try:
            with self._process.oneshot():
                cpu = self._process.cpu_times()
                rss = self._process.memory_info().rss
        except psutil.Error:  # exited: keep what was sampled
            return
        self.samples.append(Sample(time.time(), cpu.user + cpu.system, rss))


def _vm_hwm(pid: int) -> int | None:
    """Peak resident set size from /proc (Linux); None elsewhere or once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
