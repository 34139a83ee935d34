"""service/kafka/stall.py: a client call that blocks past its own timeout ends the process with exit 6 and
one line naming the call; one that returns in time leaves no trace."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from service.errors import StalledError
from service.kafka.stall import GRACE_S, Stall


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_call_past_its_timeout_and_the_grace_ends_the_process_naming_it(capsys):
    clock, exits = Clock(), []
    stall = Stall(exits.append, clock, watch=False)
    with stall.guard("send_offsets_to_transaction", 30):
        clock.now += 30 + GRACE_S - 0.5
        assert stall.check() == 0.5
        assert exits == []
        clock.now += 0.5
        stall.check()
    assert exits == [StalledError.exit_code] == [6]
    line = capsys.readouterr().err.strip()
    assert line.startswith("microbatch: stalled: ") and "send_offsets_to_transaction" in line
    assert f"{30 + GRACE_S:g}s" in line and "\n" not in line


def test_a_call_that_returns_disarms_the_guard():
    clock, exits = Clock(), []
    stall = Stall(exits.append, clock, watch=False)
    assert stall.check() is None
    with stall.guard("commit_transaction", 5):
        clock.now += 1
    clock.now += 3600
    assert stall.check() is None
    with stall.guard("commit_transaction", 5):  # each call gets its own deadline
        assert stall.check() == 5 + GRACE_S
    assert exits == []


def test_a_process_blocked_inside_librdkafka_exits_6():
    """The real thing: the main thread blocked in a C call that holds no GIL (a flush towards a broker
    that is not there, with a timeout far off); the watcher thread ends the process."""
    script = textwrap.dedent(
        """
        from confluent_kafka import Producer
        from service.kafka.stall import Stall

        producer = Producer({"bootstrap.servers": "127.0.0.1:9", "message.timeout.ms": 600000})
        producer.produce("t", b"x")
        with Stall(grace_s=0.3).guard("flush", 0.2):
            producer.flush(300)
        print("returned")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 6, done.stderr
    assert "returned" not in done.stdout
    assert "microbatch: stalled: the Kafka client's flush has not returned after 0.5s" in done.stderr
