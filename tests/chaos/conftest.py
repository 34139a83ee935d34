"""Chaos-tier fixtures: a broker of the tests' own that they may stop, kill, freeze and restart.

The session broker (``kafka_bootstrap``) is shared with the integration tier and must stay healthy, so
broker faults go to this second one: its own port and state directory, topic auto-creation OFF (so a
missing topic stays missing), started once per module and stopped by PID at the end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.conftest import KAFKA_SH, REPO_ROOT, make_topic_factory

FAULT_PORT = int(os.environ.get("KAFKA_FAULT_PORT", "19192"))


@dataclass
class FaultBroker:
    """A broker under the test's control. Every method returns once the broker is in that state."""

    bootstrap: str
    env: dict[str, str]
    state_dir: Path

    @property
    def pid(self) -> int:
        return int((self.state_dir / "kafka.pid").read_text().strip())

    def _sh(self, command: str, timeout: float = 240) -> None:
        done = subprocess.run(
            ["bash", str(KAFKA_SH), command],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kafka.sh {command} failed: {done.stderr}{done.stdout}")

    def start(self) -> None:
        self._sh("up")

    def stop(self) -> None:
        """SIGTERM and wait: a clean broker shutdown."""
        self._sh("down")

    def kill(self) -> None:
        """SIGKILL by PID: the broker dies without flushing or telling anyone."""
        pid = self.pid
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        (self.state_dir / "kafka.pid").unlink(missing_ok=True)

    def freeze(self) -> None:
        """SIGSTOP: connections stay open but nothing answers, like a broker stuck in a long GC pause."""
        os.kill(self.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.pid, signal.SIGCONT)


@pytest.fixture(scope="module")
def fault_broker() -> Iterator[FaultBroker]:
    state_dir = REPO_ROOT / ".local" / f"kafka-fault-{FAULT_PORT}"
    env = {
        **os.environ,
        "KAFKA_PORT": str(FAULT_PORT),
        "KAFKA_CONTROLLER_PORT": str(FAULT_PORT + 1),
        "KAFKA_STATE_DIR": str(state_dir),
        "KAFKA_AUTO_CREATE": "false",
    }
    broker = FaultBroker(f"127.0.0.1:{FAULT_PORT}", env, state_dir)
    broker._sh("reset")  # fresh data: earlier runs' topics must not leak in
    broker.start()
    try:
        yield broker
    finally:
        with contextlib.suppress(OSError, ValueError):  # not frozen, or already down
            broker.thaw()
        broker._sh("down")


@pytest.fixture
def fault_topic_factory(fault_broker: FaultBroker) -> Iterator[Callable[..., str]]:
    """Like ``topic_factory``, on the fault broker."""
    yield from make_topic_factory(AdminClient({"bootstrap.servers": fault_broker.bootstrap}))
