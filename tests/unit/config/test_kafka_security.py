"""TLS, mTLS and SASL settings: the files they name, secrets read from files, the librdkafka options they
become, and errors that name the setting and never the secret."""

from __future__ import annotations

import pytest

from service.config import load_settings
from service.errors import ConfigError

SECRET = "pa55-from-a-secret-volume"


def _kafka(monkeypatch, **variables):
    for name, value in variables.items():
        monkeypatch.setenv(f"MICROBATCH_KAFKA__{name.upper()}", str(value))
    return load_settings().kafka


def test_tls_and_mtls_files_become_librdkafkas_locations(isolated_env, monkeypatch):
    for name in ("ca.pem", "client.pem", "client.key"):
        (isolated_env / name).write_text("PEM")
    kafka = _kafka(
        monkeypatch,
        security_protocol="SSL",
        ssl_ca_file=isolated_env / "ca.pem",
        ssl_cert_file=isolated_env / "client.pem",
        ssl_key_file=isolated_env / "client.key",
        ssl_key_password=SECRET,
    )
    conf = kafka.client_config()
    assert conf["ssl.ca.location"] == str(isolated_env / "ca.pem")
    assert conf["ssl.certificate.location"] == str(isolated_env / "client.pem")
    assert conf["ssl.key.location"] == str(isolated_env / "client.key")
    assert conf["ssl.key.password"] == SECRET
    assert conf["ssl.endpoint.identification.algorithm"] == "https"
    assert SECRET in kafka.private_values()
    assert SECRET not in str(kafka.summary())


def test_endpoint_identification_can_be_turned_off_and_only_applies_to_tls(isolated_env, monkeypatch):
    conf = _kafka(
        monkeypatch, security_protocol="SASL_SSL", ssl_endpoint_identification="false"
    ).client_config()
    assert conf["ssl.endpoint.identification.algorithm"] == "none"
    monkeypatch.setenv("MICROBATCH_KAFKA__SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    assert "ssl.endpoint.identification.algorithm" not in load_settings().kafka.client_config()


@pytest.mark.parametrize(
    ("secret", "option"),
    [
        ("sasl_password", "sasl.password"),
        ("sasl_oauthbearer_client_secret", "sasl.oauthbearer.client.secret"),
        ("ssl_key_password", "ssl.key.password"),
    ],
)
def test_every_secret_can_be_read_from_a_file(isolated_env, monkeypatch, secret, option):
    (isolated_env / "secret").write_text(SECRET + "\n")  # as `kubectl create secret --from-file` keeps it
    kafka = _kafka(monkeypatch, **{f"{secret}_file": isolated_env / "secret"})
    assert kafka.client_config()[option] == SECRET
    assert SECRET in kafka.private_values()


def test_oauthbearer_oidc_client_credentials(isolated_env, monkeypatch):
    conf = _kafka(
        monkeypatch,
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauthbearer_token_endpoint_url="https://idp.example/token",
        sasl_oauthbearer_client_id="microbatch",
        sasl_oauthbearer_client_secret=SECRET,
        sasl_oauthbearer_scope="kafka",
    ).client_config()
    assert conf["sasl.oauthbearer.method"] == "oidc"
    assert conf["sasl.oauthbearer.token.endpoint.url"] == "https://idp.example/token"
    assert (conf["sasl.oauthbearer.client.id"], conf["sasl.oauthbearer.scope"]) == ("microbatch", "kafka")


@pytest.mark.parametrize(
    ("variables", "setting", "reason"),
    [
        ({"sasl_password": SECRET, "sasl_password_file": "secret"}, "SASL_PASSWORD_FILE", "not both"),
        ({"sasl_password_file": "missing"}, "SASL_PASSWORD_FILE", "no such file"),
        ({"sasl_password_file": "empty"}, "SASL_PASSWORD_FILE", "the file is empty"),
        ({"ssl_ca_file": "missing"}, "SSL_CA_FILE", "no such file"),
        ({"ssl_cert_file": "secret"}, "SSL_KEY_FILE", "set both, or neither"),
        ({"ssl_key_file": "secret"}, "SSL_KEY_FILE", "set both, or neither"),
    ],
)
def test_bad_security_settings_name_the_setting_and_never_the_secret(
    isolated_env, monkeypatch, variables, setting, reason
):
    (isolated_env / "secret").write_text(SECRET)
    (isolated_env / "empty").write_text("\n")
    paths = {k: (isolated_env / v if k.endswith("_file") else v) for k, v in variables.items()}
    with pytest.raises(ConfigError) as err:
        _kafka(monkeypatch, **paths)
    assert err.value.setting == f"MICROBATCH_KAFKA__{setting}"
    assert reason in str(err.value)
    assert SECRET not in str(err.value)
