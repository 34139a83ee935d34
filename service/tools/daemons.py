"""What the private agent daemons of the demo and the tests (``collectd``; the tests' ``rsyslog``) share: a
process that is not ``python -m`` and logs to files of its own, started with an environment cleaned of
service-manager variables, stopped by PID (``service.tools.processes.Child``: SIGTERM, then SIGKILL after a
bound)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Self

from service.tools.processes import Child

# Not ours to touch: daemons in the foreground send READY=1 to a NOTIFY_SOCKET, adopt LISTEN_FDS, and
# collectd SIGSTOPs itself when UPSTART_JOB=collectd (upstart's "expect stop").
SERVICE_MANAGER_ENV = frozenset(
    {"NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "UPSTART_JOB"}
)


def clean_env() -> dict[str, str]:
    """This process's environment without the service manager's variables."""
    return {k: v for k, v in os.environ.items() if k not in SERVICE_MANAGER_ENV}


class Daemon:
    """A daemon run in the foreground: ``stderr_path`` gets its stdout and stderr, ``own_log`` is the log
    it writes itself. Subclasses start it with :meth:`spawn`; as a context manager it is started, then
    stopped."""

    def __init__(self, stderr_path: Path, own_log: Path, stop_timeout_s: float) -> None:
        self.stderr_path, self.own_log, self.stop_timeout_s = stderr_path, own_log, stop_timeout_s
        self.child: Child | None = None

    def start(self) -> None:
        raise NotImplementedError

    def check_config(self, argv: Sequence[str], conf: Path) -> None:
        """Run the daemon's own config check (``argv``, say ``collectd -t``); RuntimeError with its words
        when it rejects ``conf``."""
        check = subprocess.run(argv, env=clean_env(), capture_output=True, text=True, timeout=30, check=False)
        if check.returncode != 0:
            raise RuntimeError(
                f"{Path(argv[0]).name} {argv[-1]} rejects {conf}:\n{check.stderr}{check.stdout}"
            )

    def spawn(self, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start ``argv`` with :func:`clean_env`, its output to ``stderr_path`` (a file, not a pipe that
        fills up unread)."""
        with self.stderr_path.open("wb") as err:
            proc = subprocess.Popen(argv, env=clean_env(), stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        self.child = Child(proc, self.stderr_path)
        return proc

    @property
    def pid(self) -> int | None:
        """The PID while it runs, else None."""
        return self.child.pid if self.child is not None and self.child.alive() else None

    def stop(self) -> int:
        """SIGTERM, SIGKILL after ``stop_timeout_s``; the exit code (0 after a clean SIGTERM). Idempotent;
        0 if never started."""
        return 0 if self.child is None else self.child.stop(timeout_s=self.stop_timeout_s)

    def diagnostics(self) -> str:
        """Its stderr and its own log, for failure messages."""
        files = [p for p in (self.stderr_path, self.own_log) if p.exists()]
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')}" for p in files)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
