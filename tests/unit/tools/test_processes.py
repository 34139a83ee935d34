"""service/tools/processes.py: a child's environment. Stopping real children:
tests/integration/test_processes.py."""

from __future__ import annotations

from service.tools.processes import settings_env


def test_settings_become_variables_over_a_base_without_the_callers_settings():
    base = {"PATH": "/bin", "MICROBATCH_BATCH__MAX_SIZE": "64", "microbatch_log__level": "debug"}
    env = settings_env({"kafka__group_id": "g", "metrics__port": 0}, base)
    assert env == {"PATH": "/bin", "MICROBATCH_KAFKA__GROUP_ID": "g", "MICROBATCH_METRICS__PORT": "0"}


def test_inherit_keeps_the_callers_settings_except_the_dropped_ones_and_settings_win():
    base = {
        "MICROBATCH_BATCH__MAX_SIZE": "64",
        "MICROBATCH_MODEL__PATH": "/m.onnx",
        "MICROBATCH_LOG__LEVEL": "x",
    }
    env = settings_env(
        {"log__level": "debug"}, base, inherit=True, drop=frozenset({"MICROBATCH_MODEL__PATH"})
    )
    assert env == {"MICROBATCH_BATCH__MAX_SIZE": "64", "MICROBATCH_LOG__LEVEL": "debug"}
