"""The real brokers the tests run against: the session broker of ``deploy/kafka-local/kafka.sh``, the
chaos tier's fault broker, which tests may stop, kill, freeze and restart, and its three-node cluster,
whose nodes they may stop, kill, freeze and restart one at a time. No mocks anywhere."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import ClusterMetadata

from service.tools.topics import TopicAdmin

REPO_ROOT = Path(__file__).resolve().parents[2]
KAFKA_SH = REPO_ROOT / "deploy" / "kafka-local" / "kafka.sh"

# Cold start fetches the jars with Maven; warm start takes a few seconds.
KAFKA_UP_TIMEOUT_S = 240
KAFKA_DOWN_TIMEOUT_S = 60


def external_bootstrap() -> str:
    """``KAFKA_BOOTSTRAP_SERVERS``: a broker the tests use instead of starting kafka.sh's (empty: none)."""
    return os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()


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


def checked_kafka_sh(command: str, env: dict[str, str], timeout: float = KAFKA_UP_TIMEOUT_S) -> str:
    """Like :func:`kafka_sh`; returns its standard output, raises RuntimeError with its messages if it
    failed."""
    done = kafka_sh(command, env, timeout)
    if done.returncode != 0:
        raise RuntimeError(f"kafka.sh {command} failed: {done.stderr}{done.stdout}")
    return done.stdout


MakeTopic = Callable[..., str]


def make_topic_factory(admin: TopicAdmin, *, replication_factor: int = 1) -> Iterator[MakeTopic]:
    """Yield ``make_topic(partitions=1, prefix="t", *, config=None) -> str``, creating a new, ready,
    uniquely named topic on ``admin``'s cluster (``replication_factor`` replicas of each partition);
    delete every topic it made afterwards (best effort: a broker a test left stopped just keeps them)."""
    created: list[str] = []

    def make_topic(partitions: int = 1, prefix: str = "t", *, config: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        admin.create([name], partitions, config=config, replication_factor=replication_factor)
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
        checked_kafka_sh(command, self.env, timeout)

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


@contextlib.contextmanager
def private_broker(port: int, name: str, **env: str) -> Iterator[FaultBroker]:
    """A broker of the caller's own on ``port`` (its controller on the next one), its state in
    ``.local/kafka-<name>-<port>`` wiped first, with ``env`` beside (``KAFKA_AUTO_CREATE="false"``,
    ``KAFKA_FEATURES=...``); thawed if frozen, and stopped by PID at the end."""
    state_dir = REPO_ROOT / ".local" / f"kafka-{name}-{port}"
    full = {
        **os.environ,
        "KAFKA_PORT": str(port),
        "KAFKA_CONTROLLER_PORT": str(port + 1),
        "KAFKA_STATE_DIR": str(state_dir),
        **env,
    }
    broker = FaultBroker(f"127.0.0.1:{port}", full, state_dir)
    broker.sh("reset")  # fresh data: earlier runs' topics must not leak in
    broker.start()
    try:
        yield broker
    finally:
        with contextlib.suppress(OSError, ValueError):  # not frozen, or already down
            broker.thaw()
        broker.sh("down")


# A node thawed after a freeze may answer Metadata from its stale cache for a moment: "healed" must be
# seen this many times in a row (each time by a new client, from whichever node it reached first).
HEALED_POLLS = 3


@dataclass
class Cluster:
    """The nodes of a ``KAFKA_BROKERS`` cluster of ``kafka.sh``, by node id (also their broker id in
    metadata). Each node is a :class:`FaultBroker` (``KAFKA_NODE`` set) that a test may stop, kill,
    freeze and start back into the running cluster on its own."""

    bootstrap: str
    env: dict[str, str]
    state_dir: Path
    nodes: dict[int, FaultBroker]
    admin: TopicAdmin

    @classmethod
    def up(cls, env: dict[str, str], state_dir: Path) -> Cluster:
        """Start every node (``kafka.sh up``, idempotent) and return once each one answers."""
        bootstrap = checked_kafka_sh("up", env).split()[-1]
        nodes = {
            i: FaultBroker(address, env | {"KAFKA_NODE": str(i)}, state_dir / f"node-{i}")
            for i, address in enumerate(bootstrap.split(","), start=1)
        }
        return cls(bootstrap, env, state_dir, nodes, TopicAdmin({"bootstrap.servers": bootstrap}))

    def thaw_all(self) -> None:
        """SIGCONT to every node that runs (harmless when none is frozen)."""
        for node in self.nodes.values():
            with contextlib.suppress(OSError, ValueError):  # not running: no pid file, or a stale one
                node.thaw()

    def restore(self) -> None:
        """Thaw every node and start any that is down: after a test, whatever it left behind."""
        self.thaw_all()
        checked_kafka_sh("up", self.env)

    def _metadata(self, topic: str | None = None) -> ClusterMetadata:
        """Metadata asked by a new client: a long-lived one may keep asking a node that is gone or frozen.
        Raises KafkaException when no node answered within 5 s."""
        return TopicAdmin({"bootstrap.servers": self.bootstrap}).client.list_topics(topic=topic, timeout=5)

    def leaders(self, topic: str) -> dict[int, int] | None:
        """``{partition: leader node id}`` of ``topic`` as metadata shows it now (-1: none); None when no
        node answered."""
        try:
            meta = self._metadata(topic).topics[topic]
        except KafkaException:
            return None
        return {p.id: p.leader for p in meta.partitions.values()}

    def unhealed(self) -> str | None:
        """Why the cluster is not whole, or None: every node live, and every partition of every topic
        (the internal ones included) led and with all its replicas in sync."""
        try:
            meta = self._metadata()
        except KafkaException as exc:
            return f"metadata request failed: {exc}"
        if sorted(meta.brokers) != sorted(self.nodes):
            return f"live brokers {sorted(meta.brokers)}"
        for topic in meta.topics.values():
            for part in topic.partitions.values():
                if part.leader < 0 or sorted(part.isrs) != sorted(part.replicas):
                    return (
                        f"{topic.topic}[{part.id}]: leader {part.leader}, isr {part.isrs} of {part.replicas}"
                    )
        return None

    def wait_healed(self, timeout_s: float) -> float:
        """Until :meth:`unhealed` says None HEALED_POLLS times in a row; return the seconds it took.
        Raises AssertionError saying what was last wrong."""
        start = time.monotonic()
        deadline, streak, why = start + timeout_s, 0, "not checked"
        while streak < HEALED_POLLS:
            if time.monotonic() >= deadline:
                raise AssertionError(f"the cluster did not heal within {timeout_s}s: {why}")
            problem = self.unhealed()
            streak, why = (streak + 1, why) if problem is None else (0, problem)
            time.sleep(0.2)
        return time.monotonic() - start
