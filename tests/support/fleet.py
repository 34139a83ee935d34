"""Several service processes at once, for the chaos tier: start them, SIGKILL or SIGTERM one by PID, and
read what each one says about its partitions from its JSON log.

Each instance is a real ``python -m service run`` child (``tests.support.harness.start_service``); its
log is a file of JSON lines that structlog flushes line by line, so the log of a SIGKILLed instance is
complete up to its death.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from service.tools.processes import Child
from tests.support.harness import committed, end_offsets, start_service, wait_for

REBALANCE_EVENTS = ("partitions_assigned", "partitions_revoked", "partitions_lost")
_PARTITION_NAME = re.compile(r"^(?P<topic>.+)\[(?P<partition>\d+)\]$")


def log_time_ms(event: dict) -> int:
    """The wall-clock time of a log event (structlog's ISO UTC ``timestamp``) in epoch milliseconds."""
    return int(datetime.fromisoformat(event["timestamp"]).timestamp() * 1000)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Instance:
    """One service process of a :class:`Fleet`."""

    name: str
    service: Child
    topic: str
    killed: bool = False
    exit_code: int | None = None

    @property
    def pid(self) -> int:
        return self.service.proc.pid

    def alive(self) -> bool:
        return self.service.proc.poll() is None

    def events(self, *names: str) -> list[dict]:
        """The JSON log events so far (only those named, if any)."""
        return self.service.events(*names)

    def partitions_of(self, event: dict) -> set[int]:
        """The partitions of the input topic named in a rebalance event."""
        parts = set()
        for name in event.get("partitions", []):
            match = _PARTITION_NAME.match(name)
            if match and match["topic"] == self.topic:
                parts.add(int(match["partition"]))
        return parts

    def assignment(self) -> set[int] | None:
        """The partitions this instance owns according to its log, or None when its last rebalance event
        is not an assignment (not joined yet, or revoked and waiting for the next assignment)."""
        owned: set[int] = set()
        last = None
        for event in self.events(*REBALANCE_EVENTS):
            parts = self.partitions_of(event)
            if event["event"] == "partitions_assigned":
                owned |= parts
            else:
                owned -= parts
            last = event["event"]
        return owned if last == "partitions_assigned" else None


@dataclass
class Fleet:
    """Service processes sharing one consumer group on one input topic; stops them all on exit."""

    log_dir: Path
    topic: str
    partitions: int
    settings: dict[str, str]
    instances: list[Instance] = field(default_factory=list)

    def start(self, **extra: str) -> Instance:
        """One more instance, with ``extra`` settings beside the fleet's (e.g. its own instance id)."""
        service = start_service(self.log_dir, **(self.settings | extra))
        instance = Instance(f"i{len(self.instances)}", service, self.topic)
        self.instances.append(instance)
        return instance

    def live(self) -> list[Instance]:
        return [i for i in self.instances if i.alive()]

    def kill(self, instance: Instance, timeout: float = 30) -> None:
        """SIGKILL by PID and reap it."""
        instance.killed = True
        instance.exit_code = instance.service.stop(signal.SIGKILL, timeout_s=timeout)

    def terminate(self, instance: Instance, timeout: float = 60) -> int:
        """SIGTERM by PID (a clean stop: drain, flush, commit, leave the group) and wait for the exit."""
        instance.service.proc.send_signal(signal.SIGTERM)
        return self.reap(instance, timeout)

    def reap(self, instance: Instance, timeout: float = 60) -> int:
        """Wait for an instance that was told to stop to exit; return its exit code. Sends nothing: a
        second SIGTERM while the interpreter is already exiting would kill it by the default handler."""
        instance.exit_code = instance.service.proc.wait(timeout=timeout)
        return instance.exit_code

    def stable(self) -> bool:
        """Every live instance has an assignment; together they own every partition exactly once."""
        owned: list[int] = []
        for instance in self.live():
            parts = instance.assignment()
            if parts is None:
                return False
            owned.extend(parts)
        return sorted(owned) == list(range(self.partitions))

    def wait_stable(self, timeout: float, what: str = "a stable group") -> None:
        wait_for(self.stable, timeout, f"{what}: {self.describe()}")

    def describe(self) -> str:
        return ", ".join(
            f"{i.name}(pid {i.pid}, {'alive' if i.alive() else f'exit {i.service.proc.returncode}'}, "
            f"owns {i.assignment()})"
            for i in self.instances
        )

    def close(self, timeout: float = 60) -> None:
        """SIGTERM every live instance, then SIGKILL whatever did not exit within ``timeout``."""
        for instance in self.live():
            instance.service.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for instance in self.instances:
            try:
                instance.service.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                instance.service.proc.kill()
                instance.service.proc.wait(timeout=30)

    def logs(self, tail: int = 40) -> str:
        """The last lines of every instance's log, for assertion messages."""
        parts = []
        for instance in self.instances:
            lines = instance.service.log().splitlines()[-tail:]
            parts.append(f"--- {instance.name} pid {instance.pid}\n" + "\n".join(lines))
        return "\n".join(parts)


@contextlib.contextmanager
def fleet(log_dir: Path, topic: str, partitions: int, **settings: str) -> Iterator[Fleet]:
    """A :class:`Fleet` whose processes are always stopped afterwards, whatever happened."""
    group = Fleet(log_dir, topic, partitions, settings)
    try:
        yield group
    finally:
        group.close()


def kill_while_answering(
    f: Fleet,
    rng,
    kills: int,
    answered: Callable[[], int],
    step: tuple[int, int],
    total: int,
    timeout_s: float,
) -> None:
    """``kills`` times: wait for ``step`` (a random number in that range) more answers, SIGKILL a random
    live instance and start a new one. ``answered`` counts the answers so far; it must stay below
    ``total`` (else the backlog ran out before the kills, which then proved nothing)."""
    for number in range(kills):
        target = answered() + rng.randint(*step)
        wait_for(lambda t=target: answered() >= t, timeout_s, f"answers before kill {number}")
        assert answered() < total, "the backlog ran out before the kills: they proved nothing"
        f.kill(rng.choice(f.live()))
        f.start()


def drain(f: Fleet, bootstrap: str, group: str, topic: str, partitions: int, timeout_s: float) -> None:
    """Until the group committed every partition of ``topic`` to its end (an empty partition has nothing to
    commit), then SIGTERM every live instance (each must exit 0). AssertionError with the offsets and the
    instances' logs otherwise."""

    def all_committed() -> bool:
        commits = committed(bootstrap, group, topic, partitions)
        ends = end_offsets(bootstrap, topic, partitions)
        return all(commits.get(p, -1) == end for p, end in ends.items() if end > 0)

    try:
        wait_for(all_committed, timeout_s, "every input committed")
    except AssertionError as exc:
        commits = committed(bootstrap, group, topic, partitions)
        ends = end_offsets(bootstrap, topic, partitions)
        raise AssertionError(f"{exc}: committed {commits}, end {ends}\n{f.describe()}\n{f.logs()}") from None
    for instance in f.live():
        assert f.terminate(instance) == 0, f.logs()
