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
)

from tests.support.broker import REPO_ROOT, FaultBroker

SECURED_PORT = int(os.environ.get("KAFKA_SECURED_PORT", "19392"))
APP_USER, APP_PASSWORD = "app", "app-Scram-pa55word-0042"
CLIENT_KEY_PASSWORD = "alice-Key-pa55phrase-0042"  # alice.key's passphrase (gen-certs.sh)
SECRETS = (APP_PASSWORD, CLIENT_KEY_PASSWORD)


@dataclass(frozen=True)
class Secured:
    """The running secured broker: ``admin`` (PLAINTEXT, super user), ``sasl_ssl`` and ``mtls``
    bootstrap addresses, and the ``pki`` folder (``ca.pem``, ``alice.crt``/``alice.key``, a rogue CA's
    ``mallory.crt``/``mallory.key``)."""

    broker: FaultBroker
    admin: str
    sasl_ssl: str
    mtls: str
    pki: Path


def start_secured() -> Secured:
    """Start it afresh (data and certificates), and return once it answers."""
    state_dir = REPO_ROOT / ".local" / f"kafka-secured-{SECURED_PORT}"
    env = {
        **os.environ,
        "KAFKA_PORT": str(SECURED_PORT),
        "KAFKA_STATE_DIR": str(state_dir),
        "KAFKA_AUTO_CREATE": "false",
        "KAFKA_SECURITY": "secured",
        "KAFKA_SCRAM_USERS": f"{APP_USER}:{APP_PASSWORD}",
        "CLIENT_KEY_PASSWORD": CLIENT_KEY_PASSWORD,
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
        pki=state_dir / "pki",
    )


def grant(
    admin: str,
    principal: str,
    read: Iterable[str] = (),
    write: Iterable[str] = (),
    groups: Iterable[str] = (),
    group_prefixes: Iterable[str] = (),
) -> None:
    """The least the service needs, as ACLs on ``principal`` (``User:app``): READ and DESCRIBE on the
    topics it reads, WRITE and DESCRIBE on those it writes, READ on its groups (and on groups by prefix)."""

    def allow(
        kind: ResourceType,
        name: str,
        operation: AclOperation,
        pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    ) -> AclBinding:
        return AclBinding(kind, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)

    bindings = [
        allow(ResourceType.TOPIC, t, op) for t in read for op in (AclOperation.READ, AclOperation.DESCRIBE)
    ]
    bindings += [
        allow(ResourceType.TOPIC, t, op) for t in write for op in (AclOperation.WRITE, AclOperation.DESCRIBE)
    ]
    bindings += [allow(ResourceType.GROUP, g, AclOperation.READ) for g in groups]
    bindings += [
        allow(ResourceType.GROUP, g, AclOperation.READ, ResourcePatternType.PREFIXED) for g in group_prefixes
    ]
    client = AdminClient({"bootstrap.servers": admin})  # held until the futures are done
    for future in client.create_acls(bindings).values():
        future.result(15)
