"""No configuration error ever prints a secret: every SecretStr setting and every ``*_EXTRA`` setting is set
to a known secret, start-up is made to fail in every way a setting can make it fail, and the secret must
appear nowhere in what ``microbatch run`` writes (stdout, stderr, the log). librdkafka's own log lines are
redacted too (tests/unit/observability/test_logs.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from pydantic import SecretStr

from service.config import KafkaSettings, redact, sections
from service.config._kafka import EXTRA_FIELDS

SECRET = "s3cr3t-Pa55phrase-never-print"


def secret_settings() -> list[str]:
    """Every setting typed SecretStr, walked from the settings classes (a new one is covered at once)."""
    found = []
    for cls in sections().values():
        for name, info in cls.model_fields.items():
            if SecretStr in _types(info.annotation):
                found.append(cls.env(name))
    return found


def _types(annotation: object) -> set[object]:
    args = getattr(annotation, "__args__", ())
    return {annotation, *args}


EXTRAS = [KafkaSettings.env(name) for name in EXTRA_FIELDS]

# Ways a *_EXTRA value holding the secret makes start-up fail: the settings' own checks, JSON that does
# not decode, and librdkafka refusing the options when the clients are created.
EXTRA_FAILURES = {
    "guarantee": {"ssl.key.password": SECRET, "acks": "1"},
    "nested": {"sasl.password": {"inner": SECRET}},
    "list value": {"ssl.key.password": [SECRET]},
    "unknown option": {"no.such.option": SECRET},
    "bad value": {"compression.type": SECRET},  # librdkafka quotes a value it rejects
    "file not found": {
        "security.protocol": "SSL",
        "ssl.keystore.location": SECRET,
        "ssl.keystore.password": SECRET,
    },
}
NOT_JSON = {"truncated": '{"sasl.password": "' + SECRET, "not an object": json.dumps([SECRET])}

# Ways the rest of the configuration makes start-up fail while every secret is set, and what the last line
# then names.
OTHER_FAILURES = {
    "bad value": ({"MICROBATCH_BATCH__MAX_SIZE": "abc"}, "MICROBATCH_BATCH__MAX_SIZE"),
    "unknown section": ({"MICROBATCH_BACTH__MAX_SIZE": "9"}, "MICROBATCH_BACTH"),
    "unknown field": ({"MICROBATCH_KAFKA__SASL_PASWORD": SECRET}, "MICROBATCH_KAFKA__SASL_PASWORD"),
    "cross-field": (
        {"MICROBATCH_KAFKA__SESSION_TIMEOUT_MS": "400000"},
        "MICROBATCH_KAFKA__MAX_POLL_INTERVAL_MS",
    ),
    "librdkafka": (
        {"MICROBATCH_KAFKA__EXTRA": json.dumps({"no.such.option": "1"})},
        "MICROBATCH_KAFKA__EXTRA",
    ),
    "no broker": (
        {"MICROBATCH_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:1", "MICROBATCH_KAFKA__STARTUP_TIMEOUT_S": "1"},
        "no broker at 127.0.0.1:1 answered",
    ),
}


def run_service(env: dict[str, str], cwd) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("MICROBATCH_")}
    base = {
        "MICROBATCH_INPUT__TOPICS": "in",
        "MICROBATCH_MODEL__NAME": "metrics-anomaly",
        "MICROBATCH_METRICS__PORT": "0",
        "MICROBATCH_LOG__FORMAT": "json",
        "MICROBATCH_LOG__LEVEL": "debug",  # the most the service ever says
    }
    return subprocess.run(
        [sys.executable, "-m", "service", "run"],
        env=clean | base | env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def assert_failed_without_the_secret(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode in (2, 3), proc.stdout + proc.stderr
    assert SECRET not in proc.stdout
    assert SECRET not in proc.stderr


def test_the_settings_have_a_secret_to_walk():
    assert "MICROBATCH_KAFKA__SASL_PASSWORD" in secret_settings()


# Each way of failing once, on each *_EXTRA variable in turn (one process per case: they take seconds).
EXTRA_CASES = [
    (EXTRAS[i % len(EXTRAS)], name, value)
    for i, (name, value) in enumerate([*EXTRA_FAILURES.items(), *NOT_JSON.items()])
]


@pytest.mark.parametrize(
    ("variable", "name", "value"), EXTRA_CASES, ids=[f"{c[1]}-{c[0]}" for c in EXTRA_CASES]
)
def test_no_extra_error_prints_the_secret(isolated_env, variable, name, value):
    raw = value if isinstance(value, str) else json.dumps(value)
    proc = run_service({variable: raw}, isolated_env)
    assert variable.removeprefix("MICROBATCH_") in proc.stderr or "MICROBATCH_KAFKA" in proc.stderr
    assert_failed_without_the_secret(proc)


@pytest.mark.parametrize(("failure", "named"), list(OTHER_FAILURES.values()), ids=list(OTHER_FAILURES))
def test_no_error_prints_a_secret_setting(isolated_env, failure, named):
    every_secret = dict.fromkeys(secret_settings(), SECRET)  # all at once: one process per failure
    sasl = {
        "MICROBATCH_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "MICROBATCH_KAFKA__SASL_MECHANISM": "PLAIN",
        "MICROBATCH_KAFKA__SASL_USERNAME": "app",
    }
    proc = run_service(every_secret | sasl | failure, isolated_env)
    assert named in proc.stderr.strip().splitlines()[-1], proc.stderr[-1000:]  # failed as meant to
    assert_failed_without_the_secret(proc)


def test_a_secret_from_the_dotenv_file_is_not_printed_either(isolated_env):
    extra = json.dumps({"ssl.key.password": SECRET, "acks": "0"})
    (isolated_env / ".env").write_text(
        f"MICROBATCH_KAFKA__SASL_PASSWORD={SECRET}\nMICROBATCH_KAFKA__EXTRA={extra}\n"
    )
    assert_failed_without_the_secret(run_service({}, isolated_env))


@pytest.mark.parametrize(
    ("text", "values", "expected"),
    [
        (
            f'Invalid value "{SECRET}" for configuration property "x"',
            [SECRET],
            'Invalid value "***" for configuration property "x"',
        ),
        (f"calling fopen({SECRET}, r)", [SECRET], "calling fopen(***, r)"),
        ("linger.ms=10 acks=1", ["1"], "linger.ms=10 acks=***"),  # a short value only where it stands alone
        ("nothing here", [], "nothing here"),
    ],
)
def test_redact_hides_every_configured_value(text, values, expected):
    assert redact(text, values) == expected


def test_the_private_values_are_the_secrets_and_every_text_value_of_the_extras():
    kafka = KafkaSettings(
        sasl_password=SECRET,
        extra={"a": "some-text", "linger.ms": "5", "b": "no"},
        consumer_extra={"fetch.min.bytes": 2, "c": "true"},
        producer_extra={"ssl.key.password": "pw", "d": True},
    )
    # Numbers, booleans and two-letter words stay visible; a credential option's value never does.
    assert sorted(kafka.private_values()) == sorted([SECRET, "some-text", "pw"])
