"""``microbatch config`` as a user runs it: a real process, its own environment and working directory (so no
``.env`` but the test's), no broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SECRET = "s3cr3t-pa55word-do-not-print"
VALID = {"MICROBATCH_INPUT__TOPICS": "logs", "MICROBATCH_MODEL__NAME": "log-classifier"}


def microbatch(cwd: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("MICROBATCH_")}
    return subprocess.run(
        [sys.executable, "-m", "service", *argv],
        cwd=cwd,
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def rows(stdout: str) -> dict[str, tuple[str, str]]:
    """``{variable: (value, source)}`` from the table."""
    found = {}
    for line in stdout.splitlines():
        words = line.split()
        if words and words[0].startswith("MICROBATCH_"):
            found[words[0]] = (words[1], " ".join(words[2:]))
    return found


def test_a_valid_setup_exits_0_and_shows_each_value_with_its_source(tmp_path):
    (tmp_path / ".env").write_text("MICROBATCH_OUTPUT__TOPIC=scored\nMICROBATCH_MODEL__NAME=log-classifier\n")
    proc = microbatch(tmp_path, "config", MICROBATCH_INPUT__TOPICS="logs,audit")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    shown = rows(proc.stdout)
    assert shown["MICROBATCH_INPUT__TOPICS"] == ("logs,audit", "environment")
    assert shown["MICROBATCH_OUTPUT__TOPIC"] == ("scored", ".env")
    assert shown["MICROBATCH_MODEL__NAME"] == ("log-classifier", ".env")
    assert shown["MICROBATCH_BATCH__MAX_SIZE"] == ("16", "default")  # common: shown at its default
    assert "MICROBATCH_GPU__DEVICE_ID" not in shown  # neither common nor set
    assert f".env read from {tmp_path.resolve() / '.env'}" in proc.stdout


def test_all_shows_every_setting_and_json_says_the_same(tmp_path):
    every = microbatch(tmp_path, "config", "--all", **VALID)
    assert every.returncode == 0, every.stderr
    assert rows(every.stdout)["MICROBATCH_GPU__DEVICE_ID"] == ("0", "default")
    as_json = microbatch(tmp_path, "config", "--all", "--format", "json", **VALID)
    report = json.loads(as_json.stdout)
    assert report["problems"] == []
    assert {s["variable"]: (s["value"], s["source"]) for s in report["settings"]} == rows(every.stdout)


def test_missing_topics_and_model_are_both_listed_in_one_run(tmp_path):
    proc = microbatch(tmp_path, "config")
    assert proc.returncode == 2
    problems = proc.stderr.splitlines()
    assert problems[0] == "microbatch: 2 problems with the settings:"
    assert problems[1] == "  MICROBATCH_INPUT__TOPICS: at least one input topic is required"
    assert problems[2].startswith("  MICROBATCH_MODEL__NAME: set a reference model (")
    assert problems[2].endswith(") or MICROBATCH_MODEL__PATH")
    assert "Settings in effect" in proc.stdout  # the table is printed all the same


def test_a_single_underscore_name_is_a_problem_with_its_setting_named(tmp_path):
    proc = microbatch(
        tmp_path,
        "config",
        MICROBATCH_INPUT_TOPICS="logs",
        MICROBATCH_BATCH_MAX_SIZE="32",
        MICROBATCH_MODEL__NAME="log-classifier",
        MICROBATCH_SERVICE_HOST="10.0.0.7",  # Kubernetes' own: no problem
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "microbatch: 3 problems with the settings:",
        "  MICROBATCH_BATCH_MAX_SIZE: not a setting (ignored); did you mean MICROBATCH_BATCH__MAX_SIZE?",
        "  MICROBATCH_INPUT_TOPICS: not a setting (ignored); did you mean MICROBATCH_INPUT__TOPICS?",
        "  MICROBATCH_INPUT__TOPICS: at least one input topic is required",
    ]


def test_an_invalid_value_is_listed_with_the_others_and_marked_in_the_table(tmp_path):
    proc = microbatch(
        tmp_path, "config", MICROBATCH_BATCH__MAX_SIZE="many", MICROBATCH_LOG__LEVEL="loud", **VALID
    )
    assert proc.returncode == 2
    assert "  MICROBATCH_BATCH__MAX_SIZE: Input should be a valid integer" in proc.stderr
    assert "  MICROBATCH_LOG__LEVEL: Input should be 'debug', 'info', 'warning' or 'error'" in proc.stderr
    assert rows(proc.stdout)["MICROBATCH_BATCH__MAX_SIZE"] == ("many", "environment (invalid)")


def test_a_secret_is_never_printed(tmp_path):
    (tmp_path / ".env").write_text(f"MICROBATCH_KAFKA__SSL_KEY_PASSWORD={SECRET}\n")
    for argv in (["config"], ["config", "--all", "--format", "json"]):
        proc = microbatch(
            tmp_path,
            *argv,
            **VALID,
            MICROBATCH_KAFKA__SASL_PASSWORD=SECRET,
            MICROBATCH_KAFKA__EXTRA=f'{{"sasl.password": "{SECRET}"}}',
            MICROBATCH_KAFKA__PRODUCER_EXTRA=f'{{"ssl.key.password": "{SECRET}", "acks": "0"}}',  # invalid
        )
        assert proc.returncode == 2  # the producer's acks cannot be overridden
        assert SECRET not in proc.stdout + proc.stderr
    shown = rows(microbatch(tmp_path, "config", **VALID, MICROBATCH_KAFKA__SASL_PASSWORD=SECRET).stdout)
    assert shown["MICROBATCH_KAFKA__SASL_PASSWORD"] == ("***", "environment")


def test_the_top_level_help_lists_config_without_markup(tmp_path):
    proc = microbatch(tmp_path, "--help")
    assert proc.returncode == 0
    assert "The microbatch command (also python -m service)." in proc.stdout
    assert "``" not in proc.stdout
    assert "config" in proc.stdout and "three reference models" in proc.stdout


def test_run_help_names_the_common_settings_and_where_the_rest_are(tmp_path):
    proc = microbatch(tmp_path, "run", "--help")
    assert proc.returncode == 0
    assert "  MICROBATCH_INPUT__TOPICS (required)" in proc.stdout
    assert "  MICROBATCH_KAFKA__BOOTSTRAP_SERVERS (default: 127.0.0.1:9092)" in proc.stdout
    assert "'microbatch config' prints the settings in effect" in proc.stdout
    assert "docs/CONFIG.md" in proc.stdout
