"""service/tools/processes.py on real child processes: SIGTERM first, SIGKILL once the bound has passed."""

from __future__ import annotations

import signal
from pathlib import Path

from service.tools.processes import Child, start
from tests.support.harness import wait_for

HANDLER = (
    "import signal, sys, time\nsignal.signal(signal.SIGTERM, {})\nprint('up', flush=True)\ntime.sleep(60)\n"
)
STUBBORN = HANDLER.format("signal.SIG_IGN")
POLITE = HANDLER.format("lambda *_: sys.exit(0)")


def start_script(tmp_path: Path, name: str, source: str) -> Child:
    (tmp_path / f"{name}.py").write_text(source)
    child = start((name,), {}, tmp_path / f"{name}.log", cwd=tmp_path)
    wait_for(lambda: "up" in child.log(), 30, f"{name} to install its handler")
    return child


def test_a_child_that_ignores_sigterm_is_killed_once_the_bound_has_passed(tmp_path):
    child = start_script(tmp_path, "stubborn", STUBBORN)
    assert child.stop(timeout_s=0.5) == -signal.SIGKILL
    assert not child.alive()


def test_a_child_that_honours_sigterm_exits_with_its_own_code(tmp_path):
    child = start_script(tmp_path, "polite", POLITE)
    assert child.stop(timeout_s=30) == 0
