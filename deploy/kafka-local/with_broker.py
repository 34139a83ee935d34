"""Run a command against a Kafka broker: one already there, or this checkout's own, started for it and stopped
after it. ``make demo`` runs the demo through it.

    python deploy/kafka-local/with_broker.py COMMAND [ARG...]

The broker, first found of:

1. ``MICROBATCH_KAFKA__BOOTSTRAP_SERVERS``, when set: used as it is;
2. this checkout's broker (``kafka.sh status``), when it runs;
3. a Kafka broker answering on 127.0.0.1:KAFKA_PORT (default 9092): another checkout's, or any other. It
   counts only if it answers a Kafka Metadata request listing a live broker: an open port is not enough;
4. else this checkout's broker, started by ``kafka.sh up`` on KAFKA_PORT when it and the port after it (the
   controller's) are free, else on the first free pair above. It is stopped (``kafka.sh down``, by PID) when
   the command ends, however it ends.

The command gets the broker as MICROBATCH_KAFKA__BOOTSTRAP_SERVERS. Exits with the command's status, or 1
when no broker could be had. Standard library only: it runs before, and without, the venv's packages.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

HOST = "127.0.0.1"
KAFKA_SH = Path(__file__).resolve().parent / "kafka.sh"
PROBE = KAFKA_SH.with_name("probe.py")
BOOTSTRAP_VAR = "MICROBATCH_KAFKA__BOOTSTRAP_SERVERS"
_PORT_SEARCH = 50  # pairs of ports tried above KAFKA_PORT before giving up


def say(message: str) -> None:
    print(f"kafka-local: {message}", file=sys.stderr, flush=True)


def port_open(port: int, host: str = HOST) -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def kafka_answers(port: int, host: str = HOST) -> bool:
    """True if ``host:port`` answers a Kafka Metadata request with at least one live broker (probe.py, the
    check kafka.sh's readiness waits on). Anything else, a refused connection, silence, an HTTP or TLS
    server's answer, is False."""
    probe = [sys.executable, str(PROBE), host, str(port)]
    return subprocess.run(probe, capture_output=True, timeout=30, check=False).returncode == 0


def free_pair(first: int, tries: int = _PORT_SEARCH) -> int:
    """The first port ``p`` of ``first, first + 2, ...`` with ``p`` and ``p + 1`` (the controller's) both
    free. Raises RuntimeError when none of ``tries`` pairs is."""
    for port in range(first, min(first + 2 * tries, 65534), 2):
        if not port_open(port) and not port_open(port + 1):
            return port
    raise RuntimeError(f"no two free ports next to each other in {HOST}:{first}-{first + 2 * tries}")


def _kafka_sh(command: str, port: int | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if port is not None:
        env |= {"KAFKA_PORT": str(port), "KAFKA_CONTROLLER_PORT": str(port + 1)}
    # kafka.sh says what it does on stderr (passed through); stdout is the bootstrap, or the status line.
    return subprocess.run(
        ["bash", str(KAFKA_SH), command], env=env, stdout=subprocess.PIPE, text=True, check=False
    )


def own_running() -> str | None:
    """This checkout's broker's bootstrap when it runs (waiting, as ``kafka.sh up`` does, for one that does
    not answer yet), else None."""
    done = _kafka_sh("status")
    if done.returncode == 0:  # "running: pid N, bootstrap 127.0.0.1:P, state DIR"
        return done.stdout.split("bootstrap ", 1)[1].split(",", 1)[0]
    if done.returncode == 1:  # "running but not answering: pid N, port P, state DIR"
        port = int(done.stdout.split("port ", 1)[1].split(",", 1)[0])
        if _kafka_sh("up", port).returncode == 0:
            return f"{HOST}:{port}"
    return None


def choose() -> tuple[str, int | None]:
    """The bootstrap to use, and the port of the broker started for it (None when none was started).
    Raises RuntimeError when a broker was needed and could not be started."""
    given = os.environ.get(BOOTSTRAP_VAR, "").strip()
    if given:
        say(f"using {BOOTSTRAP_VAR}={given}")
        return given, None
    own = own_running()
    if own:
        say(f"using this checkout's broker on {own}")
        return own, None
    preferred = int(os.environ.get("KAFKA_PORT", "9092"))
    if kafka_answers(preferred):
        say(f"using the Kafka broker already answering on {HOST}:{preferred}")
        return f"{HOST}:{preferred}", None
    port = free_pair(preferred)
    if port != preferred:
        say(f"{HOST}:{preferred} or {preferred + 1} is taken by something that does not answer as Kafka")
    done = _kafka_sh("up", port)
    if done.returncode != 0:
        _kafka_sh("down", port)  # whatever it left half started
        raise RuntimeError(f"could not start a local broker on {HOST}:{port}")
    say(f"started a local broker on {HOST}:{port}; it is stopped when the command ends")
    return f"{HOST}:{port}", port


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        bootstrap, started = choose()
    except RuntimeError as exc:
        say(f"error: {exc}")
        return 1
    # Ctrl-C reaches the command too (same process group); this process waits for it to finish, then
    # stops the broker. SIGTERM is passed on. Handlers, unlike ignored signals, do not reach the command.
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: object) -> None:
        if child is not None and signum == signal.SIGTERM:
            child.send_signal(signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    try:
        child = subprocess.Popen(argv, env=os.environ | {BOOTSTRAP_VAR: bootstrap})
        return child.wait()
    except OSError as exc:  # the command could not be run
        say(f"error: {exc}")
        return 127
    finally:
        if started is not None:
            _kafka_sh("down", started)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
