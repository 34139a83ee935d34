"""service/config/_diagnose.py and misnamed(): every problem at once, where each value came from, secrets
masked, and the names Kubernetes gives a container left alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog

from service import cli
from service.config import Misnamed, diagnose, misnamed
from service.config._describe import MASK
from service.errors import ConfigError

SECRET = "s3cr3t-pa55word-do-not-print"
VALID = {"MICROBATCH_INPUT__TOPICS": "logs", "MICROBATCH_MODEL__NAME": "log-classifier"}


def set_env(monkeypatch: pytest.MonkeyPatch, **variables: str) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


def by_variable(diagnosis):
    return {e.info.variable: e for e in diagnosis.effective}


def messages(diagnosis) -> list[str]:
    return [str(p) for p in diagnosis.problems]


def test_a_valid_configuration_has_no_problem_and_names_each_source(monkeypatch):
    Path(".env").write_text("MICROBATCH_OUTPUT__TOPIC=scored\n")
    set_env(monkeypatch, **VALID, MICROBATCH_BATCH__MAX_SIZE="32")
    diagnosis = diagnose()
    assert diagnosis.problems == []
    assert diagnosis.settings is not None and diagnosis.settings.batch.max_size == 32
    assert diagnosis.env_file == Path(".env")
    rows = by_variable(diagnosis)
    assert (rows["MICROBATCH_BATCH__MAX_SIZE"].value, rows["MICROBATCH_BATCH__MAX_SIZE"].source) == (
        "32",
        "environment",
    )
    assert (rows["MICROBATCH_OUTPUT__TOPIC"].value, rows["MICROBATCH_OUTPUT__TOPIC"].source) == (
        "scored",
        ".env",
    )
    assert (rows["MICROBATCH_BATCH__MIN_SIZE"].value, rows["MICROBATCH_BATCH__MIN_SIZE"].source) == (
        "4",
        "default",
    )


def test_the_environment_wins_over_dotenv_as_for_run(monkeypatch):
    Path(".env").write_text("MICROBATCH_BATCH__MAX_SIZE=8\n")
    set_env(monkeypatch, **VALID, MICROBATCH_BATCH__MAX_SIZE="32")
    row = by_variable(diagnose())["MICROBATCH_BATCH__MAX_SIZE"]
    assert (row.value, row.source) == ("32", "environment")


def test_every_problem_is_listed_at_once(monkeypatch):
    set_env(
        monkeypatch,
        MICROBATCH_BATCH__MAX_SIZE="many",
        MICROBATCH_BATCH__MAX_SIZ="3",
        MICROBATCH_BACTH__MIN_SIZE="2",
        MICROBATCH_LOG__LEVEL="loud",
        MICROBATCH_INPUT_TOPICS="logs",
    )
    found = messages(diagnose(checks=(lambda _s: [ConfigError("MICROBATCH_MODEL__NAME", "no model")],)))
    assert found[:2] == [
        "MICROBATCH_BACTH: unknown settings section; did you mean MICROBATCH_BATCH?",
        "MICROBATCH_INPUT_TOPICS: not a setting (ignored); did you mean MICROBATCH_INPUT__TOPICS?",
    ]
    assert set(found[2:]) == {
        "MICROBATCH_BATCH__MAX_SIZE: Input should be a valid integer, unable to parse string as an integer",
        "MICROBATCH_BATCH__MAX_SIZ: unknown setting; did you mean MICROBATCH_BATCH__MAX_SIZE?",
        "MICROBATCH_LOG__LEVEL: Input should be 'debug', 'info', 'warning' or 'error'",
        # run's own checks still run on the sections that are valid
        "MICROBATCH_INPUT__TOPICS: at least one input topic is required",
        "MICROBATCH_MODEL__NAME: no model",
    }


def test_an_invalid_value_is_shown_as_given_and_the_rest_of_its_section_as_validated(monkeypatch):
    set_env(monkeypatch, **VALID, MICROBATCH_BATCH__MAX_SIZE="many", MICROBATCH_BATCH__MAX_WAIT_MS="20")
    diagnosis = diagnose()
    assert diagnosis.settings is None  # run would not start
    rows = by_variable(diagnosis)
    assert (rows["MICROBATCH_BATCH__MAX_SIZE"].value, rows["MICROBATCH_BATCH__MAX_SIZE"].invalid) == (
        "many",
        True,
    )
    assert (rows["MICROBATCH_BATCH__MAX_WAIT_MS"].value, rows["MICROBATCH_BATCH__MAX_WAIT_MS"].invalid) == (
        "20",
        False,
    )


def test_a_run_check_is_not_asked_of_a_section_holding_an_invalid_value(monkeypatch):
    # The bad topic name is reported once; "at least one input topic is required" would judge the default.
    set_env(monkeypatch, MICROBATCH_INPUT__TOPICS="bad topic!", MICROBATCH_MODEL__NAME="log-classifier")
    found = messages(diagnose())
    assert len(found) == 1 and found[0].startswith("MICROBATCH_INPUT__TOPICS: topic number 1 is not a legal")


def test_undecodable_json_is_a_problem_too(monkeypatch):
    set_env(monkeypatch, **VALID, MICROBATCH_KAFKA__EXTRA="{not json", MICROBATCH_INPUT_TOPICS="x")
    found = messages(diagnose())
    assert "MICROBATCH_KAFKA__EXTRA: not valid JSON" in found
    assert any(p.startswith("MICROBATCH_INPUT_TOPICS: ") for p in found)


def test_no_secret_is_shown_or_quoted(monkeypatch, tmp_path):
    secret_file = tmp_path / "password"
    secret_file.write_text(SECRET + "\n")
    set_env(
        monkeypatch,
        **VALID,
        MICROBATCH_KAFKA__SSL_KEY_PASSWORD=SECRET,
        MICROBATCH_KAFKA__SASL_PASSWORD_FILE=str(secret_file),
        MICROBATCH_KAFKA__CONSUMER_EXTRA=f'{{"sasl.password": "{SECRET}", "fetch.min.bytes": 1}}',
        # invalid, so shown as given: still masked
        MICROBATCH_KAFKA__PRODUCER_EXTRA=f'{{"sasl.password": "{SECRET}", "acks": "1"}}',
    )
    diagnosis = diagnose()
    rows = by_variable(diagnosis)
    assert rows["MICROBATCH_KAFKA__SSL_KEY_PASSWORD"].value == MASK
    assert (
        rows["MICROBATCH_KAFKA__SASL_PASSWORD"].value,
        rows["MICROBATCH_KAFKA__SASL_PASSWORD"].source,
    ) == (
        MASK,
        "file",
    )
    assert rows["MICROBATCH_KAFKA__CONSUMER_EXTRA"].value == '{"sasl.password":"***","fetch.min.bytes":1}'
    assert rows["MICROBATCH_KAFKA__PRODUCER_EXTRA"].invalid
    everything = " ".join([*messages(diagnosis), *(e.value for e in diagnosis.effective)])
    assert SECRET not in everything


@pytest.mark.parametrize(
    ("name", "closest"),
    [
        ("MICROBATCH_INPUT_TOPICS", "MICROBATCH_INPUT__TOPICS"),
        ("MICROBATCH_BATCH_MAX_SIZE", "MICROBATCH_BATCH__MAX_SIZE"),
        ("MICROBATCH_BATCH_MAXSIZE", "MICROBATCH_BATCH__MAX_SIZE"),
        ("MICROBATCH_MODEL_NAME", "MICROBATCH_MODEL__NAME"),
        ("MICROBATCH_LOG_LVL", "MICROBATCH_LOG__LEVEL"),
    ],
)
def test_a_single_underscore_name_like_a_setting_is_named_with_it(name, closest):
    assert misnamed({name: "x"}) == [Misnamed(name, closest)]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        # What Kubernetes sets for a Service "microbatch" (and "microbatch-metrics") in the namespace.
        ("MICROBATCH_SERVICE_HOST", "10.0.0.7"),
        ("MICROBATCH_SERVICE_PORT", "9400"),
        ("MICROBATCH_SERVICE_PORT_METRICS", "9400"),
        ("MICROBATCH_PORT", "tcp://10.0.0.7:9400"),
        ("MICROBATCH_PORT_9400_TCP", "tcp://10.0.0.7:9400"),
        ("MICROBATCH_PORT_9400_TCP_ADDR", "10.0.0.7"),
        ("MICROBATCH_PORT_9400_TCP_PORT", "9400"),
        ("MICROBATCH_PORT_9400_TCP_PROTO", "tcp"),
        ("MICROBATCH_METRICS_SERVICE_HOST", "10.0.0.8"),
        ("MICROBATCH_METRICS_PORT", "tcp://10.0.0.8:9400"),  # like METRICS__PORT, but a Service's link
        ("MICROBATCH_METRICS_PORT_9400_TCP_PORT", "9400"),
        # Names like no setting, and a whole section as JSON (pydantic-settings reads it).
        ("MICROBATCH_VERSION", "1.2.3"),
        ("MICROBATCH_HOME", "/srv"),
        ("MICROBATCH_KAFKA", "{}"),
        # Names with the delimiter are refused elsewhere (unknown section or field).
        ("MICROBATCH_BATCH__MAX_SIZ", "3"),
    ],
)
def test_platform_and_unrelated_names_are_left_alone(name, value):
    assert misnamed({name: value}) == []


def test_kubernetes_names_make_no_problem_for_config_either(monkeypatch):
    set_env(
        monkeypatch,
        **VALID,
        MICROBATCH_SERVICE_HOST="10.0.0.7",
        MICROBATCH_PORT="tcp://10.0.0.7:9400",
        MICROBATCH_PORT_9400_TCP_PORT="9400",
    )
    assert diagnose().problems == []


def test_run_logs_a_warning_per_misnamed_variable_and_goes_on(monkeypatch):
    set_env(monkeypatch, MICROBATCH_INPUT_TOPICS="logs", MICROBATCH_SERVICE_HOST="10.0.0.7")
    seen = []

    class Command:
        @staticmethod
        def run(_args, settings):
            seen.append(settings)
            return 0

    with structlog.testing.capture_logs() as logs:
        monkeypatch.setattr(cli.logs, "configure", lambda _settings: None)
        assert cli.execute(Command, None) == 0  # type: ignore[arg-type]
    assert len(seen) == 1
    assert [e for e in logs if e["event"] == "unknown_setting"] == [
        {
            "event": "unknown_setting",
            "log_level": "warning",
            "variable": "MICROBATCH_INPUT_TOPICS",
            "did_you_mean": "MICROBATCH_INPUT__TOPICS",
        }
    ]
