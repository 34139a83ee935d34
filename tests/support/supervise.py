"""A service restarted when it exits, as an orchestrator would (the kubelet, systemd's Restart=)."""

from __future__ import annotations

import signal
import subprocess
import threading

from service.tools.processes import STOP_TIMEOUT_S, Child


class Supervised(Child):
    """``child`` started again, with the same command and environment (so the same instance ids), its log
    appended, whenever it exits with one of ``codes`` before :meth:`stop`; ``exits``: the code of each
    exit it was restarted after. A watcher thread restarts it, and so does reading ``proc``, so that no
    check sees it down between an exit and its restart."""

    def __init__(self, child: Child, codes: frozenset[int]) -> None:
        assert child.launch is not None, "a child started by service.tools.processes.start"
        self._lock = threading.RLock()
        self._codes = codes
        self._stopping = threading.Event()
        self.exits: list[int] = []
        super().__init__(child.proc, child.log_path, child.launch)
        self._thread = threading.Thread(target=self._watch, name="supervisor", daemon=True)
        self._thread.start()

    @property  # type: ignore[override]
    def proc(self) -> subprocess.Popen[bytes]:
        with self._lock:
            code = self._proc.poll()
            if code in self._codes and not self._stopping.is_set() and self.launch is not None:
                self.exits.append(code)
                self._proc = self.launch("ab")
            return self._proc

    @proc.setter
    def proc(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    def _watch(self) -> None:
        while not self._stopping.wait(0.2):
            _ = self.proc

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = STOP_TIMEOUT_S) -> int:
        self._stopping.set()
        with self._lock:
            return super().stop(sig, timeout_s)
