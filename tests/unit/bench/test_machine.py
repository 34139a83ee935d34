"""bench/machine.py: what the results file says of the machine and the local broker."""

from __future__ import annotations

import re

import pytest

from bench import machine


def test_the_local_broker_version_is_read_from_the_repository_pom():
    """The results file names the Apache Kafka version the local broker is built from."""
    version = machine.broker_version(machine.POM)
    assert version is not None and re.fullmatch(r"\d+\.\d+\.\d+", version)


@pytest.mark.parametrize(("text", "expected"), [("1\n", True), ("0\n", False)])
def test_the_scheduler_autogroup_setting_is_read_from_proc(tmp_path, text, expected):
    """The results say whether CPU was shared per session: it decides whether a local broker's GC pause
    stalls its clients for milliseconds or for a tenth of a second."""
    setting = tmp_path / "sched_autogroup_enabled"
    setting.write_text(text)
    assert machine.autogroup(setting) is expected
    assert machine.autogroup(tmp_path / "missing") is None
