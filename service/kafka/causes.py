"""What librdkafka's reports mean when the service cannot reach its brokers at start-up: the setting at fault
and why, or None for a fault that is not the configuration's (a broker down, a network). Pure.

librdkafka retries every failure for ever and ``list_topics`` only ever says "Broker transport failure"; the
real cause is in its ``error_cb`` errors and its log lines, and this reads them. The texts matched are
those of librdkafka 2.x against Apache Kafka 4 (tests/integration/test_security_faults.py drives each
against a real secured broker).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from service.config import KafkaSettings

_MECHANISMS = re.compile(r"broker's supported mechanisms: ([\w, -]+)")
# librdkafka's OIDC log line: the token endpoint, what it answered, and the HTTP status (-1: no answer).
_TOKEN_REFUSED = re.compile(r'Failed to retrieve OIDC token from "[^"]*": .* \((-?\d+)\)\s*$')
# Answers a URL that is not a token endpoint gives (librdkafka's words about the response).
_NOT_A_TOKEN = (
    "response is not json encoded",
    'expected json response with "access_token"',
    "failed to decode jwt",
)


@dataclass(frozen=True, slots=True)
class Cause:
    """A start-up fault of the configuration: the ``setting`` to fix and the ``reason``, in words."""

    setting: str
    reason: str


def cause_of(text: str, kafka: KafkaSettings) -> Cause | None:
    """The cause a librdkafka error or log ``text`` names, for a client configured by ``kafka``."""
    env = kafka.env
    lowered = text.lower()
    if kafka.sasl_mechanism == "OAUTHBEARER" and (cause := _oidc_cause(text, lowered, kafka)) is not None:
        return cause
    if "unsupported sasl mechanism" in lowered:
        offered = _MECHANISMS.search(text)
        return Cause(
            env("sasl_mechanism"),
            f"the broker does not offer {kafka.sasl_mechanism}"
            + (f"; it offers {offered.group(1).strip()}" if offered else ""),
        )
    if "sasl authentication error" in lowered or "invalid credentials" in lowered:
        secret = "sasl_password_file" if kafka.sasl_password_file else "sasl_password"
        return Cause(
            env(secret),
            f"the broker refused the credentials of user {kafka.sasl_username!r} with {kafka.sasl_mechanism} "
            "(a wrong password, or no such user)",
        )
    if "certificate verify failed" in lowered:
        trusted = f"the CA in {kafka.ssl_ca_file}" if kafka.ssl_ca_file else "the system's CAs (none set)"
        return Cause(
            env("ssl_ca_file"),
            f"the broker's certificate could not be verified against {trusted}: not signed by it, or not "
            f"naming the host connected to ({env('ssl_endpoint_identification')})",
        )
    if (
        "alert bad certificate" in lowered
        or "alert certificate required" in lowered
        or "alert number 42" in lowered
    ):
        given = f"the one in {kafka.ssl_cert_file}" if kafka.ssl_cert_file else "none was set"
        return Cause(
            env("ssl_cert_file"),
            f"the broker requires a client certificate signed by a CA it trusts; {given}",
        )
    tls = kafka.security_protocol in ("SSL", "SASL_SSL")
    if "state apiversion_query" in lowered and "disconnected" in lowered and not tls:
        return Cause(
            env("security_protocol"),
            f"the broker closed the connection at the first request: it expects TLS (SSL or SASL_SSL), not "
            f"{kafka.security_protocol}",
        )
    if "ssl connection closed by peer" in lowered and kafka.security_protocol == "SSL":
        return Cause(
            env("security_protocol"),
            "the broker closed the TLS connection at the first request: it expects SASL_SSL (credentials)",
        )
    return None


def _oidc_cause(text: str, lowered: str, kafka: KafkaSettings) -> Cause | None:
    """OAUTHBEARER with OIDC: the token endpoint refused the client, is not a token endpoint, or the broker
    refused the token it issued. An endpoint that does not answer is not the configuration's fault."""
    env = kafka.env
    url = kafka.sasl_oauthbearer_token_endpoint_url
    if "invalid_token" in lowered and "sasl authentication error" in lowered:
        return Cause(
            env("sasl_oauthbearer_token_endpoint_url"),
            f"the broker refused the token {url} issued (its issuer, audience or signing key is not the one "
            "the broker's listener expects: the broker's log says which)",
        )
    refused = _TOKEN_REFUSED.search(text)
    status = int(refused.group(1)) if refused else None
    if status in (400, 401, 403) or ("failed to acquire" in lowered and "invalid_client" in lowered):
        secret = "sasl_oauthbearer_client_secret"
        return Cause(
            env(f"{secret}_file" if kafka.sasl_oauthbearer_client_secret_file else secret),
            f"the token endpoint {url} refused client {kafka.sasl_oauthbearer_client_id!r} (a wrong client "
            f"secret, an unknown client, or a scope it may not have){f' (HTTP {status})' if status else ''}",
        )
    if status in (404, 405) or any(words in lowered for words in _NOT_A_TOKEN):
        return Cause(
            env("sasl_oauthbearer_token_endpoint_url"),
            f"{url} did not answer as an OIDC token endpoint"
            + (f" (HTTP {status})" if status else " (no access token in its answer)"),
        )
    return None


# librdkafka options the security settings set, and the setting behind each (checked in this order).
_OPTIONS = (
    ("ssl.key.location", "ssl_key_file"),
    ("ssl.certificate.location", "ssl_cert_file"),
    ("ssl.ca.location", "ssl_ca_file"),
    ("sasl.username", "sasl_username"),
    ("sasl.password", "sasl_password"),
    ("sasl.oauthbearer", "sasl_oauthbearer_token_endpoint_url"),
)


def client_error_setting(message: str, kafka: KafkaSettings) -> str | None:
    """The security setting behind librdkafka's refusal to build a client (``message``), or None when it
    names none of their options (then an ``*_EXTRA`` setting is to blame)."""
    for option, field in _OPTIONS:
        if option not in message:
            continue
        if field == "ssl_key_file" and kafka.ssl_key_password is not None:
            # librdkafka cannot tell a wrong passphrase from a bad key: "ssl.key.location failed".
            return kafka.env("ssl_key_password_file" if kafka.ssl_key_password_file else "ssl_key_password")
        return kafka.env(field)
    return None
