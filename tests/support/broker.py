"""The real brokers the tests run against: the session broker of ``deploy/kafka-local/kafka.sh`` and the
chaos tier's fault broker, which tests may stop, kill, freeze and restart. No mocks anywhere."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from service.tools.topics import TopicAdmin

REPO_ROOT = Path(__file__).resolve().parents[2]
KAFKA_SH = REPO_ROOT / "deploy" / "kafka-local" / "kafka.sh"

# Cold start fetches the jars with Maven; warm start takes a few seconds.
KAFKA_UP_TIMEOUT_S = 240
KAFKA_DOWN_TIMEOUT_S = 60


def kafka_sh(
    command: str, env: dict[str, str], timeout: float = KAFKA_UP_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """Run ``kafka.sh <command>`` (``up``, ``down``, ``status``, ``reset``) with ``env``."""
    return subprocess.run(
        ["bash", str(KAFKA_SH), command],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


MakeTopic = Callable[..., str]


def make_topic_factory(admin: TopicAdmin) -> Iterator[MakeTopic]:
    """Yield ``make_topic(partitions=1, prefix="t", *, config=None) -> str``, creating a new, ready,
    uniquely named topic on ``admin``'s cluster; delete every topic it made afterwards (best effort: a
    broker a test left stopped just keeps them)."""
    created: list[str] = []

    def make_topic(partitions: int = 1, prefix: str = "t", *, config: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        admin.create([name], partitions, config=config)
        created.append(name)
        return name

    yield make_topic

    for name in admin.delete(created):
        warnings.warn(f"could not delete topic {name}", stacklevel=1)


@dataclass
class FaultBroker:
    """A broker under the test's control. Every method returns once the broker is in that state."""

    bootstrap: str
    env: dict[str, str]
    state_dir: Path

    @property
    def pid(self) -> int:
        return int((self.state_dir / "kafka.pid").read_text().strip())

    def sh(self, command: str, timeout: float = KAFKA_UP_TIMEOUT_S) -> None:
        done = kafka_sh(command, self.env, timeout)
        if done.returncode != 0:
            raise RuntimeError(f"kafka.sh {command} failed: {done.stderr}{done.stdout}")

    def start(self) -> None:
        self.sh("up")

    def stop(self) -> None:
        """SIGTERM and wait: a clean broker shutdown."""
        self.sh("down")

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
