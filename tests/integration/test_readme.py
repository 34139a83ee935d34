"""The README's example runs as written, against the real broker: your broker, your topic, your model.

The example is the shell block between the ``readme-example`` markers. Only what a test must change is
changed: the broker address (the session's), the topic names (unique per run), and the group and metrics
port of the service (not in the example, so that this run does not share them). The ``microbatch run`` line
is started as a process, the lines after it are retried until they succeed (a user would run them in another
shell once the results are in), and then the run is stopped with Ctrl-C (SIGINT), which must exit 0.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from service.tools.topics import TopicAdmin
from tests.support.harness import ROOT, free_port

README = ROOT / "README.md"
EXAMPLE = re.compile(r"<!-- readme-example:begin -->\n```sh\n(.*?)```\n<!-- readme-example:end -->", re.S)
README_BROKER = "127.0.0.1:9092"
README_TOPIC = "app-metrics"
AFTER_RUN_TIMEOUT_S = 120.0


def example_lines() -> list[str]:
    match = EXAMPLE.search(README.read_text())
    assert match, "README.md has no readme-example block"
    return [line for line in match.group(1).splitlines() if line.strip()]


def bash(script: list[str], env: dict[str, str], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "\n".join(script)],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        **kwargs,
    )


def test_the_readme_example_runs_as_written(kafka_bootstrap: str, admin: TopicAdmin, tmp_path: Path):
    topic = f"readme-{uuid.uuid4().hex[:10]}"
    lines = [
        line.replace(README_BROKER, kafka_bootstrap).replace(README_TOPIC, topic) for line in example_lines()
    ]
    setup = [line for line in lines if line.startswith((". ", "export "))]
    commands = [line for line in lines if line not in setup]
    run_at = next(i for i, line in enumerate(commands) if line.startswith("microbatch run"))
    before, run_line, after = commands[:run_at], commands[run_at], commands[run_at + 1 :]
    assert setup and before and after, "the example sets up, runs, and then checks"

    env = {k: v for k, v in os.environ.items() if not k.startswith("MICROBATCH_")}
    env |= {
        "MICROBATCH_KAFKA__GROUP_ID": f"readme-{uuid.uuid4().hex[:8]}",
        "MICROBATCH_METRICS__PORT": str(free_port()),
    }
    try:
        first = bash(setup + before, env)
        assert first.returncode == 0, f"{before} failed:\n{first.stdout}\n{first.stderr}"

        log = (tmp_path / "run.log").open("w")
        service = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", "\n".join([*setup, f"exec {run_line}"])],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + AFTER_RUN_TIMEOUT_S
            while True:
                check = bash(setup + after, env)
                if check.returncode == 0:
                    break
                assert service.poll() is None, f"microbatch run exited {service.returncode}"
                if time.monotonic() > deadline:
                    pytest.fail(f"{after} never succeeded:\n{check.stdout}\n{check.stderr}")
                time.sleep(1)
            service.send_signal(signal.SIGINT)
            assert service.wait(timeout=60) == 0, (tmp_path / "run.log").read_text()[-4000:]
        finally:
            if service.poll() is None:
                service.kill()
                service.wait()
    finally:
        admin.delete([topic, f"{topic}.scores"])
