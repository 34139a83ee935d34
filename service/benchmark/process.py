"""The process under test: start it with its settings, sample its CPU and memory, stop it by PID.

Each system runs as a fresh child process (``python -m ...``), so its CPU and memory are its own and
nothing it loaded survives into the next system's measurement.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import psutil

from service.benchmark.measure import Sample

# Settings that choose the model: the scenario decides them, a caller's own values must not leak in.
_SCENARIO_OWNED = {
    "MICROBATCH_MODEL__PATH",
    "MICROBATCH_MODEL__PROCESSOR",
    "MICROBATCH_MODEL__VERSION",
    "MICROBATCH_MODEL__FEATURES",
    "MICROBATCH_MODEL__TEXT_FIELD",
    "MICROBATCH_MODEL__TOKENIZER",
    "MICROBATCH_MODEL__LABELS",
}
_STOP_TIMEOUT_S = 60.0


def child_env(base: Mapping[str, str], overrides: Mapping[str, str]) -> dict[str, str]:
    """The environment of a system under test: the caller's, minus the model-choosing settings, plus
    ``overrides`` (``{"KAFKA__GROUP_ID": "g", ...}``, the ``MICROBATCH_`` prefix added). The caller's other
    ``MICROBATCH_*`` settings (batch sizes, Kafka extras, threads) reach every system alike."""
    env = {k: v for k, v in base.items() if k.upper() not in _SCENARIO_OWNED}
    env |= {f"MICROBATCH_{k.upper()}": str(v) for k, v in overrides.items()}
    return env


@dataclass
class Child:
    """A started system: its process and its log file (stdout and stderr together)."""

    proc: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = _STOP_TIMEOUT_S) -> int:
        """SIGTERM (the systems drain, commit and exit 0), SIGKILL if it does not exit in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def log_lines(self) -> list[dict]:
        """The JSON lines of its log; other lines (a traceback, librdkafka's raw stderr) are skipped."""
        lines = []
        for raw in self.log_path.read_bytes().splitlines():
            if raw.startswith(b"{"):
                try:
                    lines.append(msgspec.json.decode(raw))
                except msgspec.DecodeError:
                    continue
        return lines


def start(
    argv: tuple[str, ...], env: Mapping[str, str], log_path: Path, extra: list[str] | None = None
) -> Child:
    """``python -m <argv> <extra>`` with ``env``, logging to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", *argv, *(extra or [])],
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return Child(proc, log_path)


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
