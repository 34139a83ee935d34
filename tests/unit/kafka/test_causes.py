"""service/kafka/causes.py: librdkafka's texts (as librdkafka 2.16 writes them against Kafka 4.4) to the
setting at fault; the real broker drives each in tests/integration/test_security_faults.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.config import KafkaSettings
from service.kafka.causes import cause_of, client_error_setting

AUTH = (
    "sasl_ssl://127.0.0.1:19193/bootstrap: SASL authentication error: Authentication failed during "
    "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 "
    "(after 327ms in state AUTH_REQ)"
)
MECHANISM = (
    "sasl_ssl://127.0.0.1:19193/bootstrap: SASL SCRAM-SHA-256 mechanism handshake failed: Broker: "
    "Unsupported SASL mechanism: broker's supported mechanisms: SCRAM-SHA-512 (after 2ms in state "
    "AUTH_HANDSHAKE)"
)
VERIFY = (
    "sasl_ssl://127.0.0.1:19193/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate "
    "verify failed: broker certificate could not be verified, verify that ssl.ca.location is correctly "
    "configured or root CA certificates are installed (install ca-certificates package) (after 3ms in state "
    "SSL_HANDSHAKE)"
)
BAD_CERT = (
    "ssl://127.0.0.1:19194/bootstrap: Receive failed: error:0A000412:SSL routines::ssl/tls alert bad "
    "certificate: SSL alert number 42 (after 4ms in state APIVERSION_QUERY)"
)
PLAIN_TO_TLS = (
    "127.0.0.1:19193/bootstrap: Disconnected: connection closed by peer: receive 0 after POLLIN (after 1ms "
    "in state APIVERSION_QUERY)"
)

# OAUTHBEARER with OIDC client credentials (tests/support/oidc.py's token endpoint).
TOKEN_URL = "http://127.0.0.1:41234/token"
OIDC = {
    "sasl_mechanism": "OAUTHBEARER",
    "sasl_oauthbearer_token_endpoint_url": TOKEN_URL,
    "sasl_oauthbearer_client_id": "microbatch",
    "sasl_oauthbearer_client_secret": "s3cret",
}
CLIENT_REFUSED = (
    f'Failed to retrieve OIDC token from "{TOKEN_URL}": {{"error": "invalid_client", "error_description": '
    '"client authentication failed"} (401)'
)
CLIENT_REFUSED_CB = (
    'Failed to acquire SASL OAUTHBEARER token: {"error": "invalid_client", "error_description": "client '
    'authentication failed"}'
)
NOT_AN_ENDPOINT = f'Failed to retrieve OIDC token from "{TOKEN_URL}": {{"error": "not_found"}} (404)'
NO_ENDPOINT = (
    f'Failed to retrieve OIDC token from "{TOKEN_URL}": Failed to connect to 127.0.0.1 port 41234 after 0 '
    "ms: Could not connect to server (-1)"
)
TOKEN_REFUSED = (
    'sasl_ssl://127.0.0.1:19396/bootstrap: SASL authentication error: {"status":"invalid_token"} (after '
    "311ms in state AUTH_REQ)"
)


def kafka(**values: object) -> KafkaSettings:
    return KafkaSettings(**values)


@pytest.mark.parametrize(
    ("text", "values", "setting", "reason"),
    [
        (AUTH, {"sasl_username": "app", "sasl_mechanism": "SCRAM-SHA-512"}, "SASL_PASSWORD", "user 'app'"),
        (MECHANISM, {"sasl_mechanism": "SCRAM-SHA-256"}, "SASL_MECHANISM", "it offers SCRAM-SHA-512"),
        (VERIFY, {"security_protocol": "SASL_SSL"}, "SSL_CA_FILE", "the system's CAs"),
        (BAD_CERT, {"security_protocol": "SSL"}, "SSL_CERT_FILE", "none was set"),
        (PLAIN_TO_TLS, {}, "SECURITY_PROTOCOL", "not PLAINTEXT"),
        (PLAIN_TO_TLS, {"security_protocol": "SASL_PLAINTEXT"}, "SECURITY_PROTOCOL", "not SASL_PLAINTEXT"),
        (CLIENT_REFUSED, OIDC, "SASL_OAUTHBEARER_CLIENT_SECRET", "refused client 'microbatch'"),
        (CLIENT_REFUSED_CB, OIDC, "SASL_OAUTHBEARER_CLIENT_SECRET", f"the token endpoint {TOKEN_URL}"),
        (NOT_AN_ENDPOINT, OIDC, "SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL", "(HTTP 404)"),
        (TOKEN_REFUSED, OIDC, "SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL", "the broker refused the token"),
    ],
)
def test_each_text_names_its_setting(text, values, setting, reason):
    cause = cause_of(text, kafka(**values))
    assert cause is not None
    assert cause.setting == f"MICROBATCH_KAFKA__{setting}"
    assert reason in cause.reason


def test_a_token_endpoint_that_does_not_answer_is_not_the_configurations_fault(tmp_path: Path):
    assert cause_of(NO_ENDPOINT, kafka(**OIDC)) is None  # like a broker that is down: waited for
    secret = tmp_path / "client-secret"
    secret.write_text("s3cret\n")
    from_file = OIDC | {"sasl_oauthbearer_client_secret": None, "sasl_oauthbearer_client_secret_file": secret}
    cause = cause_of(CLIENT_REFUSED, kafka(**from_file))
    assert cause is not None and cause.setting == "MICROBATCH_KAFKA__SASL_OAUTHBEARER_CLIENT_SECRET_FILE"


def test_a_disconnect_over_tls_and_a_refused_connection_are_not_the_configurations():
    assert cause_of(PLAIN_TO_TLS, kafka(security_protocol="SSL")) is None  # a broker going away
    assert cause_of("Connect to ipv4#127.0.0.1:9092 failed: Connection refused", kafka()) is None
    assert cause_of("1/1 brokers are down", kafka()) is None


def test_a_client_the_library_refuses_to_build_names_the_security_setting(tmp_path: Path):
    (tmp_path / "c").write_text("x")
    with_password = kafka(ssl_cert_file=tmp_path / "c", ssl_key_file=tmp_path / "c", ssl_key_password="pw")
    message = "ssl.key.location failed: error:0A080009:SSL routines::PEM lib"
    assert client_error_setting(message, with_password) == "MICROBATCH_KAFKA__SSL_KEY_PASSWORD"
    assert client_error_setting("sasl.username and sasl.password must be set", kafka()) == (
        "MICROBATCH_KAFKA__SASL_USERNAME"
    )
    assert client_error_setting('No such configuration property: "foo"', kafka()) is None
