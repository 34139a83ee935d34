"""Each security fault at start-up names its cause and the setting to fix, and exits 2 (a configuration
fault) well before the start-up timeout, against the real secured broker (tests/support/secured.py). A
fault the configuration cannot explain still waits and exits 3 (tests/integration/test_service.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.secured import SECRETS, mtls_settings, oauth_settings, scram_settings, secret_file

STARTUP_TIMEOUT_S = 30  # the default: a fault not named in time would exit 3 after it


def run_service(tmp_path: Path, **settings: str) -> tuple[int, str, float]:
    """``microbatch run`` with these ``MICROBATCH_<KEY>`` settings only, to its exit: (code, stderr,
    seconds)."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("MICROBATCH_")}
    env |= {f"MICROBATCH_{k.upper()}": v for k, v in settings.items()}
    env |= {
        "MICROBATCH_INPUT__TOPICS": "in",
        "MICROBATCH_MODEL__NAME": "metrics-anomaly",
        "MICROBATCH_METRICS__ENABLED": "false",
    }
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "service", "run"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT_S + 30,
        check=False,
    )
    return done.returncode, done.stderr, time.monotonic() - started


def _without(settings: dict[str, str], *keys: str) -> dict[str, str]:
    return {k: v for k, v in settings.items() if k not in keys}


FAULTS = {
    "wrong password": (
        lambda s, t: scram_settings(
            s, t, kafka__sasl_password_file=secret_file(t, "wrong", "not-the-password")
        ),
        "MICROBATCH_KAFKA__SASL_PASSWORD_FILE",
        "refused the credentials of user 'app' with SCRAM-SHA-512",
    ),
    "unknown user": (
        lambda s, t: scram_settings(s, t, kafka__sasl_username="nobody"),
        "MICROBATCH_KAFKA__SASL_PASSWORD_FILE",
        "refused the credentials of user 'nobody'",
    ),
    "mechanism the listener lacks": (
        lambda s, t: scram_settings(s, t, kafka__sasl_mechanism="SCRAM-SHA-256"),
        "MICROBATCH_KAFKA__SASL_MECHANISM",
        "does not offer SCRAM-SHA-256; it offers SCRAM-SHA-512",
    ),
    "untrusted CA": (
        lambda s, t: scram_settings(s, t, kafka__ssl_ca_file=str(s.pki / "rogue-ca.pem")),
        "MICROBATCH_KAFKA__SSL_CA_FILE",
        "could not be verified against the CA in",
    ),
    "no CA setting": (
        lambda s, t: _without(scram_settings(s, t), "kafka__ssl_ca_file"),
        "MICROBATCH_KAFKA__SSL_CA_FILE",
        "the system's CAs (none set)",
    ),
    "plaintext to the TLS port": (
        lambda s, t: {"kafka__bootstrap_servers": s.sasl_ssl},
        "MICROBATCH_KAFKA__SECURITY_PROTOCOL",
        "it expects TLS (SSL or SASL_SSL), not PLAINTEXT",
    ),
    "SASL_PLAINTEXT to the TLS port": (
        lambda s, t: scram_settings(s, t, kafka__security_protocol="SASL_PLAINTEXT"),
        "MICROBATCH_KAFKA__SECURITY_PROTOCOL",
        "not SASL_PLAINTEXT",
    ),
    "mTLS with no certificate": (
        lambda s, t: _without(
            mtls_settings(s, t), "kafka__ssl_cert_file", "kafka__ssl_key_file", "kafka__ssl_key_password_file"
        ),
        "MICROBATCH_KAFKA__SSL_CERT_FILE",
        "requires a client certificate signed by a CA it trusts; none was set",
    ),
    "a certificate from a rogue CA": (
        lambda s, t: mtls_settings(
            s,
            t,
            kafka__ssl_cert_file=str(s.pki / "mallory.crt"),
            kafka__ssl_key_file=str(s.pki / "mallory.key"),
        ),
        "MICROBATCH_KAFKA__SSL_CERT_FILE",
        "mallory.crt",
    ),
    "OAUTHBEARER with a wrong client secret": (
        lambda s, t: oauth_settings(
            s, t, kafka__sasl_oauthbearer_client_secret_file=secret_file(t, "wrong", "not-the-password")
        ),
        "MICROBATCH_KAFKA__SASL_OAUTHBEARER_CLIENT_SECRET_FILE",
        "refused client 'microbatch'",
    ),
    "OAUTHBEARER from a URL that is not a token endpoint": (
        lambda s, t: oauth_settings(s, t, kafka__sasl_oauthbearer_token_endpoint_url=s.oidc.jwks_url),
        "MICROBATCH_KAFKA__SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL",
        "did not answer as an OIDC token endpoint (HTTP 404)",
    ),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_security_fault_at_start_up_names_its_cause_and_exits_2(tmp_path, secured, fault):
    settings, setting, reason = FAULTS[fault]
    code, stderr, seconds = run_service(tmp_path, **settings(secured, tmp_path))
    assert code == 2, f"{fault}: exit {code} after {seconds:.1f}s:\n{stderr[-2000:]}"
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"microbatch: invalid setting {setting}: "), last
    assert reason in last, last
    for secret in (*SECRETS, "not-the-password"):
        assert secret not in stderr
