"""deploy/kafka-local/with_broker.py (``make demo``'s broker) on real sockets and a real broker: a Kafka that
answers is used as it is; a port held by something else gets this checkout's own broker on free ports, which
is stopped by PID when the command ends."""

from __future__ import annotations

import contextlib
import http.server
import importlib.util
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.broker import REPO_ROOT, kafka_sh

SCRIPT = REPO_ROOT / "deploy" / "kafka-local" / "with_broker.py"
LIB_DIR = REPO_ROOT / ".local" / "kafka" / "lib"
# What the command run under the helper prints: the bootstrap it got, and the pid of the broker started
# for it (or "-"), read while the command runs.
SHOW = (
    "import os, pathlib, sys\n"
    "pid = pathlib.Path(sys.argv[1], 'kafka.pid')\n"
    "bootstrap = os.environ['MICROBATCH_KAFKA__BOOTSTRAP_SERVERS']\n"
    "print(bootstrap, pid.read_text().strip() if pid.exists() else '-')\n"
)


@pytest.fixture(scope="module")
def with_broker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("with_broker", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def http_server() -> Iterator[int]:
    """Something that is not Kafka, listening on a port of its own; yields the port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def silent_listener() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def run_helper(state_dir: Path, port: int) -> subprocess.CompletedProcess[str]:
    """The helper as another checkout would run it: its own (stopped) broker state, KAFKA_PORT preferred."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("MICROBATCH_KAFKA__BOOTSTRAP_SERVERS", "KAFKA_NODE")
    }
    env |= {"KAFKA_STATE_DIR": str(state_dir), "KAFKA_PORT": str(port)}
    env.pop("KAFKA_CONTROLLER_PORT", None)
    if (LIB_DIR / ".complete").exists():
        env["KAFKA_LIB_DIR"] = str(LIB_DIR)  # the jars the session broker uses: no Maven download
    return subprocess.run(
        [sys.executable, str(SCRIPT), sys.executable, "-c", SHOW, str(state_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_an_http_server_a_silent_port_and_a_closed_one_are_not_kafka(with_broker):
    with http_server() as port:
        assert with_broker.port_open(port)
        assert not with_broker.kafka_answers(port)  # it waits for a line that never comes
    with silent_listener() as port:
        assert not with_broker.kafka_answers(port)
    assert not with_broker.kafka_answers(port)  # closed now


def test_the_session_broker_answers_as_kafka(with_broker, kafka_bootstrap):
    host, port = kafka_bootstrap.split(",")[0].rsplit(":", 1)
    assert with_broker.kafka_answers(int(port), host)


def test_free_ports_skip_a_pair_that_is_taken_or_half_taken(with_broker):
    with http_server() as taken:
        for first in (taken, taken - 1):  # the port itself taken; the controller's (the next) taken
            port = with_broker.free_pair(first)
            assert port > first
            assert not with_broker.port_open(port) and not with_broker.port_open(port + 1)


def test_a_kafka_already_answering_is_used_and_left_alone(kafka_bootstrap, tmp_path):
    host, port = kafka_bootstrap.split(",")[0].rsplit(":", 1)
    if host != "127.0.0.1":
        pytest.skip(f"the helper looks on 127.0.0.1 only; the session broker is {kafka_bootstrap}")
    done = run_helper(tmp_path / "other-checkout", int(port))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"127.0.0.1:{port}", "-"]
    assert f"using the Kafka broker already answering on 127.0.0.1:{port}" in done.stderr


def test_a_port_held_by_something_else_gets_a_broker_of_its_own_stopped_afterwards(tmp_path):
    state_dir = tmp_path / "other-checkout"
    with http_server() as port:
        try:
            done = run_helper(state_dir, port)
        finally:
            if (state_dir / "kafka.pid").exists():  # a failed test must not leave a broker running
                kafka_sh("down", {**os.environ, "KAFKA_STATE_DIR": str(state_dir)})
    assert done.returncode == 0, done.stderr
    bootstrap, pid = done.stdout.split()
    started = int(bootstrap.rsplit(":", 1)[1])
    assert started != port
    assert f"started a local broker on 127.0.0.1:{started}" in done.stderr
    assert not (state_dir / "kafka.pid").exists()
    assert not alive(int(pid))
