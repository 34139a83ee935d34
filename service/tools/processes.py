"""Child processes for the tools and the tests: start one (``python -m ...``) with its own environment and
log file, read its JSON log, stop it by PID (SIGTERM, then SIGKILL after a bound)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import msgspec

from service.config import ENV_PREFIX

STOP_TIMEOUT_S = 60.0
"""How long a stopped service may take to drain, flush and commit (``OUTPUT__FLUSH_TIMEOUT_S`` is 30)."""


@dataclass
class Child:
    """A started process and its log file (stdout and stderr together); ``launch(mode)`` starts the same
    command again, its log file opened with ``mode`` (``"ab"``: appended), for whoever restarts it."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    launch: Callable[[str], subprocess.Popen[bytes]] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """Send ``sig`` (unless it has exited) and wait for the exit; SIGKILL if it does not exit within
        ``timeout_s``. Returns the exit code (negative: the signal that ended it)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_lines(self) -> list[dict[str, Any]]:
        """The JSON objects of its log; other lines (a traceback, librdkafka's raw stderr, a line being
        written) are skipped."""
        lines = []
        for raw in self.log_path.read_bytes().splitlines():
            if raw.startswith(b"{"):
                try:
                    line = msgspec.json.decode(raw)
                except msgspec.DecodeError:
                    continue
                if isinstance(line, dict):
                    lines.append(line)
        return lines

    def events(self, *names: str) -> list[dict[str, Any]]:
        """The log lines whose ``event`` is one of ``names`` (all of them with no names)."""
        return [line for line in self.log_lines() if not names or line.get("event") in names]


def start(
    argv: Sequence[str],
    env: Mapping[str, str],
    log_path: Path,
    *,
    cwd: Path | None = None,
) -> Child:
    """``python -m <argv>`` with exactly ``env``, logging to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    launch = partial(_launch, [sys.executable, "-m", *argv], dict(env), cwd, log_path)
    return Child(launch("wb"), log_path, launch)


def _launch(
    command: list[str], env: dict[str, str], cwd: Path | None, log_path: Path, mode: str
) -> subprocess.Popen[bytes]:
    with log_path.open(mode) as log:
        return subprocess.Popen(
            command, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )


def settings_env(
    settings: Mapping[str, object],
    base: Mapping[str, str] | None = None,
    *,
    inherit: bool = False,
    drop: frozenset[str] = frozenset(),
) -> dict[str, str]:
    """The environment of a child: ``base`` (default: this process's), its ``MICROBATCH_*`` variables kept
    only with ``inherit`` (minus those in ``drop``), then ``settings`` as variables: ``batch__max_size``
    -> ``MICROBATCH_BATCH__MAX_SIZE``."""
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if not k.upper().startswith(ENV_PREFIX) or (inherit and k.upper() not in drop)
    }
    return env | {ENV_PREFIX + key.upper(): str(value) for key, value in settings.items()}


def start_service(
    log_dir: Path,
    *,
    inherit: bool = False,
    cwd: Path | None = None,
    name: str = "service",
    command: Sequence[str] = ("run",),
    **settings: object,
) -> Child:
    """``python -m service run`` (or another ``command`` with its flags, e.g. ``backfill --job j``) with
    ``settings`` (``batch__max_size=...``) over the defaults a test or a tool wants: JSON logs, one ONNX
    Runtime thread, the metrics port 0 (several services may run at once; the bound port is in the
    ``started`` line). The caller's own ``MICROBATCH_*`` variables reach it only with ``inherit``. The log
    is ``<log_dir>/<name>-<random>.log``."""
    defaults = {"log__format": "json", "model__intra_op_threads": 1, "metrics__port": 0}
    env = settings_env(defaults | settings, inherit=inherit)
    return start(("service", *command), env, log_dir / f"{name}-{uuid.uuid4().hex[:6]}.log", cwd=cwd)
