"""A secured broker of the tests' own (``kafka.sh`` with ``KAFKA_SECURITY=secured``): SASL_SSL with
SCRAM-SHA-512, mTLS, StandardAuthorizer with no access without an ACL, certificates made at start by
``gen-certs.sh``. Its PLAINTEXT listener is the tests' admin (a super user on loopback); the service only
ever uses the secured ones, as a principal with just the ACLs a test grants it."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.support.broker import REPO_ROOT, FaultBroker
from tests.support.oidc import AUDIENCE, OidcProvider

SECURED_PORT = int(os.environ.get("KAFKA_SECURED_PORT", "19392"))
APP_USER, APP_PASSWORD = "app", "app-Scram-pa55word-0042"
CLIENT_KEY_PASSWORD = "alice-Key-pa55phrase-0042"  # alice.key's passphrase (gen-certs.sh)
OIDC_CLIENT, OIDC_SECRET, OIDC_USER = "microbatch", "oidc-Client-s3cret-0042", "svc-oidc"
SECRETS = (APP_PASSWORD, CLIENT_KEY_PASSWORD, OIDC_SECRET)


@dataclass(frozen=True)
class Secured:
    """The running secured broker: ``admin`` (PLAINTEXT, super user), ``sasl_ssl`` (SCRAM), ``mtls`` and
    ``oauth`` (OAUTHBEARER over TLS, tokens from ``oidc``) bootstrap addresses, and the ``pki`` folder
    (``ca.pem``, ``alice.crt``/``alice.key``, a rogue CA's ``mallory.crt``/``mallory.key``)."""

    broker: FaultBroker
    admin: str
    sasl_ssl: str
    mtls: str
    oauth: str
    oidc: OidcProvider
    pki: Path


def start_secured() -> Secured:
    """Start it afresh (data and certificates), and return once it answers. Its identity provider starts
    first: the broker fetches the provider's keys as it starts."""
    state_dir = REPO_ROOT / ".local" / f"kafka-secured-{SECURED_PORT}"
    oidc = OidcProvider(OIDC_CLIENT, OIDC_SECRET, subject=OIDC_USER).start()
    env = {
        **os.environ,
        "KAFKA_PORT": str(SECURED_PORT),
        "KAFKA_STATE_DIR": str(state_dir),
        "KAFKA_AUTO_CREATE": "false",
        "KAFKA_SECURITY": "secured",
        "KAFKA_SCRAM_USERS": f"{APP_USER}:{APP_PASSWORD}",
        "CLIENT_KEY_PASSWORD": CLIENT_KEY_PASSWORD,
        "KAFKA_OAUTH_JWKS_URL": oidc.jwks_url,
        "KAFKA_OAUTH_ISSUER": oidc.issuer,
        "KAFKA_OAUTH_AUDIENCE": AUDIENCE,
    }
    broker = FaultBroker(f"127.0.0.1:{SECURED_PORT}", env, state_dir)
    broker.sh("reset")
    for old in (state_dir / "pki").glob("*"):
        old.unlink()
    broker.start()
    return Secured(
        broker,
        admin=f"127.0.0.1:{SECURED_PORT}",
        sasl_ssl=f"127.0.0.1:{SECURED_PORT + 2}",
        mtls=f"127.0.0.1:{SECURED_PORT + 3}",
        oauth=f"127.0.0.1:{SECURED_PORT + 4}",
        oidc=oidc,
        pki=state_dir / "pki",
    )


def allow(
    admin: str,
    principal: str,
    kind: ResourceType,
    names: Iterable[str],
    operation: AclOperation,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
) -> None:
    """ALLOW ``operation`` on each of ``names`` (of ``kind``) to ``principal``, through the admin listener."""
    bindings = [
        AclBinding(kind, name, pattern, principal, "*", operation, AclPermissionType.ALLOW) for name in names
    ]
    if not bindings:
        return
    client = AdminClient({"bootstrap.servers": admin})  # held until the futures are done
    for future in client.create_acls(bindings).values():
        future.result(15)


def grant(
    admin: str,
    principal: str,
    read: Iterable[str] = (),
    write: Iterable[str] = (),
    groups: Iterable[str] = (),
    group_prefixes: Iterable[str] = (),
    transactional_ids: Iterable[str] = (),
    share_groups: Iterable[str] = (),
) -> None:
    """The least the service needs, as ACLs on ``principal`` (``User:app``): READ and DESCRIBE on the
    topics it reads, WRITE and DESCRIBE on those it writes, READ on its groups (and on groups by prefix),
    exactly-once, WRITE and DESCRIBE on its transactional ids, and on a share group READ,
    DESCRIBE_CONFIGS and ALTER_CONFIGS (its start offset is set at start-up)."""
    read, write = list(read), list(write)
    for operation in (AclOperation.READ, AclOperation.DESCRIBE):
        allow(admin, principal, ResourceType.TOPIC, read, operation)
    for operation in (AclOperation.WRITE, AclOperation.DESCRIBE):
        allow(admin, principal, ResourceType.TOPIC, write, operation)
    allow(admin, principal, ResourceType.GROUP, groups, AclOperation.READ)
    allow(
        admin, principal, ResourceType.GROUP, group_prefixes, AclOperation.READ, ResourcePatternType.PREFIXED
    )
    for operation in (AclOperation.WRITE, AclOperation.DESCRIBE):
        allow(admin, principal, ResourceType.TRANSACTIONAL_ID, transactional_ids, operation)
    share_groups = list(share_groups)
    for operation in (AclOperation.READ, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS):
        allow(admin, principal, ResourceType.GROUP, share_groups, operation)


def secret_file(folder: Path, name: str, secret: str) -> str:
    """``secret`` in a file, as a Kubernetes Secret volume holds it (with a trailing newline)."""
    path = folder / name
    path.write_text(secret + "\n")
    return str(path)


def scram_settings(secured: Secured, folder: Path, **changes: str) -> dict[str, str]:
    """The service's settings for SCRAM-SHA-512 over TLS as ``app``, the password from a file in ``folder``
    (bootstrap servers included), with ``changes`` on top."""
    return {
        "kafka__bootstrap_servers": secured.sasl_ssl,
        "kafka__security_protocol": "SASL_SSL",
        "kafka__sasl_mechanism": "SCRAM-SHA-512",
        "kafka__sasl_username": APP_USER,
        "kafka__sasl_password_file": secret_file(folder, "password", APP_PASSWORD),
        "kafka__ssl_ca_file": str(secured.pki / "ca.pem"),
    } | changes


def mtls_settings(secured: Secured, folder: Path, **changes: str) -> dict[str, str]:
    """The service's settings for mTLS as ``alice``, the key's passphrase from a file in ``folder``."""
    return {
        "kafka__bootstrap_servers": secured.mtls,
        "kafka__security_protocol": "SSL",
        "kafka__ssl_ca_file": str(secured.pki / "ca.pem"),
        "kafka__ssl_cert_file": str(secured.pki / "alice.crt"),
        "kafka__ssl_key_file": str(secured.pki / "alice.key"),
        "kafka__ssl_key_password_file": secret_file(folder, "key-password", CLIENT_KEY_PASSWORD),
    } | changes


def oauth_settings(secured: Secured, folder: Path, **changes: str) -> dict[str, str]:
    """The service's settings for OAUTHBEARER over TLS, with OIDC client credentials from ``secured.oidc``
    (the client secret from a file in ``folder``); the principal is ``User:svc-oidc``, the tokens' ``sub``."""
    return {
        "kafka__bootstrap_servers": secured.oauth,
        "kafka__security_protocol": "SASL_SSL",
        "kafka__sasl_mechanism": "OAUTHBEARER",
        "kafka__sasl_oauthbearer_token_endpoint_url": secured.oidc.token_url,
        "kafka__sasl_oauthbearer_client_id": OIDC_CLIENT,
        "kafka__sasl_oauthbearer_client_secret_file": secret_file(folder, "client-secret", OIDC_SECRET),
        "kafka__sasl_oauthbearer_scope": "kafka",
        "kafka__ssl_ca_file": str(secured.pki / "ca.pem"),
    } | changes


def set_password(admin: str, user: str, password: str) -> None:
    """Give ``user`` a new SCRAM-SHA-512 password at the broker (the old one stops working for new
    connections at once: Kafka keeps one credential per user and mechanism)."""
    credential = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    client = AdminClient({"bootstrap.servers": admin})
    upsert = UserScramCredentialUpsertion(user, credential, password.encode())
    for future in client.alter_user_scram_credentials([upsert]).values():
        future.result(15)
