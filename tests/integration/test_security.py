"""The service on a secured broker (tests/support/secured.py), configured through the security settings
alone: SCRAM-SHA-512 over TLS with the password read from a file, mTLS with an encrypted key whose
passphrase is read from a file, and OAUTHBEARER with OIDC client credentials (tokens from a real token
endpoint, tests/support/oidc.py, their signatures checked by the broker). As a principal holding only the
ACLs the service needs, every input gets its result and its offset committed, and no secret appears in
what the service writes (its debug log, librdkafka's ``debug=all``, ``/metrics``). No ACL on the input
topic is named as one, not as a missing topic, and stops start-up (exit 3). A permission refused while
running (READ on the group, READ on the input, WRITE on the output) is named, counted and fails
``/readyz`` after the bound, and granting it mid-run is enough: nothing is lost."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AclOperation, ResourceType

from service.tools.reader import READER_GROUPS
from service.tools.topics import TopicAdmin
from tests.support.broker import make_topic_factory
from tests.support.harness import (
    SERVICE_PARTITIONS,
    committed,
    counts,
    end_offsets,
    free_port,
    http_get,
    metrics_events,
    produce,
    read_topic,
    scrape,
    source_of,
    start_on_topics,
    wait_for,
)
from tests.support.secured import (
    APP_USER,
    OIDC_USER,
    SECRETS,
    Secured,
    allow,
    grant,
    mtls_settings,
    oauth_settings,
    scram_settings,
    secret_file,
    set_password,
)

EVENTS = 400


@pytest.fixture
def secured_topics(secured: Secured) -> Iterator[dict[str, str]]:
    made = make_topic_factory(TopicAdmin({"bootstrap.servers": secured.admin}))
    make = next(made)
    yield {
        "in": make(partitions=SERVICE_PARTITIONS, prefix="in"),
        "out": make(partitions=SERVICE_PARTITIONS, prefix="out"),
        "dlq": make(partitions=1, prefix="dlq"),
    }
    with contextlib.suppress(StopIteration):
        next(made)


def _serve_all(tmp_path, secured: Secured, topics, group_id, principal: str, settings: dict[str, str]) -> str:
    """Grant ``principal`` the service's ACLs, run the service with ``settings`` (its bootstrap servers
    among them) over ``EVENTS`` events, and check every one has exactly one result and every offset is
    committed. Returns all it wrote: its log (at debug level, librdkafka's ``debug=all`` in it) and its
    ``/metrics``, for the tests to look for secrets in."""
    grant(
        secured.admin, principal, read=[topics["in"]], write=[topics["out"], topics["dlq"]], groups=[group_id]
    )
    coords = produce(secured.admin, topics["in"], metrics_events(EVENTS, seed=61))
    port = free_port()
    verbose = {"log__level": "debug", "kafka__extra": '{"debug": "all"}', "metrics__port": str(port)}
    service = _start(tmp_path, topics, group_id, verbose | settings)
    try:
        _all_answered_and_committed(secured, topics, group_id, coords)
        metrics = http_get(port, "/metrics")[1]
    finally:
        code = service.stop()
    log = service.log()
    assert code == 0, log[-3000:]
    assert "microbatch_outputs_acknowledged_total" in metrics and "[thrd:" in log  # both were read
    return log + metrics


def _all_answered_and_committed(secured: Secured, topics, group_id, coords) -> None:
    """Every input at ``coords`` has exactly one result, and every input offset is committed."""
    outputs = read_topic(secured.admin, topics["out"], expected=len(coords))
    assert counts([source_of(o) for o in outputs]) == counts(coords)
    ends = end_offsets(secured.admin, topics["in"], SERVICE_PARTITIONS)
    wait_for(
        lambda: committed(secured.admin, group_id, topics["in"], SERVICE_PARTITIONS) == ends,
        30,
        "every offset committed",
    )


def _start(tmp_path, topics, group_id, settings: dict[str, str]):
    rest = dict(settings)
    return start_on_topics(tmp_path, rest.pop("kafka__bootstrap_servers"), topics, group_id, **rest)


def test_the_pipeline_runs_over_scram_and_tls_with_the_password_from_a_file(
    tmp_path, secured, secured_topics, group_id
):
    settings = scram_settings(secured, tmp_path)
    log = _serve_all(tmp_path, secured, secured_topics, group_id, f"User:{APP_USER}", settings)
    assert '"sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "app"' in log  # the start-up line says so
    for secret in SECRETS:
        assert secret not in log


def _refused_without_more(tmp_path, secured: Secured, topics, group_id, settings: dict[str, str]) -> str:
    """Grant only the topics' ACLs and start the service with ``settings``: it must stop at start-up with
    exit 3. Returns its log."""
    grant(secured.admin, f"User:{APP_USER}", read=[topics["in"]], write=[topics["out"], topics["dlq"]])
    (tmp_path / "refused").mkdir()
    refused = _start(tmp_path / "refused", topics, group_id, settings)
    code = refused.proc.wait(timeout=90)
    assert code == 3, refused.log()[-3000:]
    return refused.log()


def test_exactly_once_needs_write_and_describe_on_its_transactional_id_and_says_so(
    tmp_path, secured, secured_topics, group_id
):
    """Without the transactional id's ACLs start-up stops (exit 3) naming them; granted, every input is
    answered once and committed in transactions."""
    settings = scram_settings(secured, tmp_path, delivery__guarantee="exactly-once", kafka__instance_id="r0")
    topics = secured_topics
    refused = _refused_without_more(tmp_path, secured, topics, group_id, settings)
    assert f"not authorised to use transactional id '{group_id}.r0': grant WRITE and DESCRIBE" in refused
    grant(secured.admin, f"User:{APP_USER}", transactional_ids=[f"{group_id}.r0"])
    _serve_all(tmp_path, secured, topics, group_id, f"User:{APP_USER}", settings)


def test_a_share_group_needs_read_and_its_configs_on_the_group_and_says_so(
    tmp_path, secured, secured_topics, group_id
):
    """Without the group's ACLs start-up stops (exit 3) naming the one it lacks; granted READ,
    DESCRIBE_CONFIGS and ALTER_CONFIGS on the group, every input is answered."""
    settings = scram_settings(secured, tmp_path, kafka__group_type="share")
    topics = secured_topics
    refused = _refused_without_more(tmp_path, secured, topics, group_id, settings)
    assert f"grant DESCRIBE_CONFIGS on group '{group_id}'" in refused
    grant(secured.admin, f"User:{APP_USER}", share_groups=[group_id])
    coords = produce(secured.admin, topics["in"], metrics_events(EVENTS, seed=62))
    (tmp_path / "granted").mkdir()
    service = _start(tmp_path / "granted", topics, group_id, settings)
    try:
        outputs = read_topic(secured.admin, topics["out"], expected=len(coords))
    finally:
        code = service.stop()
    assert code == 0, service.log()[-3000:]
    assert counts([source_of(o) for o in outputs]) == counts(coords)


def test_the_pipeline_runs_over_mtls_with_the_key_passphrase_from_a_file(
    tmp_path, secured, secured_topics, group_id
):
    settings = mtls_settings(secured, tmp_path)
    # The principal is the certificate's CN (ssl.principal.mapping.rules).
    log = _serve_all(tmp_path, secured, secured_topics, group_id, "User:alice", settings)
    for secret in SECRETS:
        assert secret not in log


def test_the_pipeline_runs_over_oauthbearer_with_oidc_client_credentials_from_a_file(
    tmp_path, secured, secured_topics, group_id
):
    issued = secured.oidc.tokens_issued
    settings = oauth_settings(secured, tmp_path)
    # The principal is the token's subject, which the broker checked against the provider's keys.
    log = _serve_all(tmp_path, secured, secured_topics, group_id, f"User:{OIDC_USER}", settings)
    assert secured.oidc.tokens_issued >= issued + 2  # one per client, from the token endpoint
    assert '"sasl_mechanism": "OAUTHBEARER"' in log
    for secret in SECRETS:
        assert secret not in log


def test_a_password_rotated_at_the_broker_keeps_the_running_service_going_and_a_restart_reads_the_new_one(
    tmp_path, secured, secured_topics, group_id
):
    # A user of its own, so that the other tests' user keeps its password.
    topics, user = secured_topics, "rotating"
    first, rotated = "rot-First-pa55word-0044", "rot-New-pa55word-0045"
    set_password(secured.admin, user, first)
    principal = f"User:{user}"
    grant(
        secured.admin, principal, read=[topics["in"]], write=[topics["out"], topics["dlq"]], groups=[group_id]
    )
    settings = scram_settings(
        secured,
        tmp_path,
        kafka__sasl_username=user,
        kafka__sasl_password_file=secret_file(tmp_path, "pw", first),
    )
    events = metrics_events(3 * 100, seed=71)
    coords = produce(secured.admin, topics["in"], events[:100])
    service = _start(tmp_path, topics, group_id, settings)
    try:
        read_topic(secured.admin, topics["out"], expected=100)
        # The rotation: the broker's credential first, then the mounted file, as a Secret's update does.
        set_password(secured.admin, user, rotated)
        Path(settings["kafka__sasl_password_file"]).write_text(rotated + "\n")
        coords += produce(secured.admin, topics["in"], events[100:200])
        read_topic(secured.admin, topics["out"], expected=200)  # its connections stay authenticated
    finally:
        code = service.stop()
    logs = service.log()
    assert code == 0, logs[-3000:]
    coords += produce(secured.admin, topics["in"], events[200:])
    restarted = _start(tmp_path, topics, group_id, settings)  # a rolling restart: the new file is read
    try:
        outputs = read_topic(secured.admin, topics["out"], expected=300)
        ends = end_offsets(secured.admin, topics["in"], SERVICE_PARTITIONS)
        wait_for(
            lambda: committed(secured.admin, group_id, topics["in"], SERVICE_PARTITIONS) == ends,
            30,
            "every offset committed",
        )
    finally:
        code = restarted.stop()
    logs += restarted.log()
    assert code == 0, logs[-3000:]
    assert set(counts([source_of(o) for o in outputs])) == set(counts(coords))  # at least once: none lost
    for secret in (*SECRETS, first, rotated):
        assert secret not in logs


def test_no_acl_on_the_input_topic_is_named_as_such_not_as_a_missing_topic(
    tmp_path, secured, secured_topics, group_id
):
    service = _start(tmp_path, secured_topics, group_id, scram_settings(secured, tmp_path))
    wait_for(lambda: not service.alive(), 60, "the service to stop")
    code = service.stop()
    assert code == 3, service.log()[-2000:]
    assert f"not authorised to DESCRIBE input topic(s) ['{secured_topics['in']}']" in service.log()


def test_verify_with_the_services_credentials_says_which_permission_it_lacks_and_exits_4(
    tmp_path, secured, secured_topics, group_id
):
    topics = secured_topics
    settings = scram_settings(secured, tmp_path)
    _serve_all(tmp_path, secured, topics, group_id, f"User:{APP_USER}", settings)  # a real run to check
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("MICROBATCH_")}
    env |= {f"MICROBATCH_{k.upper()}": v for k, v in settings.items()}
    command = [sys.executable, "-m", "service", "verify", "--input", topics["in"]]
    command += ["--output", topics["out"], "--dlq", topics["dlq"], "--timeout", "20"]

    def verify() -> subprocess.CompletedProcess[str]:
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)

    # The service's ACLs let it write the outputs, not read them back: verify names what it lacks.
    refused = verify()
    assert refused.returncode == 4, refused.stderr[-2000:]
    assert "Traceback" not in refused.stderr
    assert "could not check: not authorised to READ a group of its own: grant READ on groups prefixed " in (
        refused.stderr
    ), refused.stderr[-1000:]
    grant(secured.admin, f"User:{APP_USER}", group_prefixes=[READER_GROUPS])
    refused = verify()
    assert refused.returncode == 4, refused.stderr[-2000:]
    assert f"could not check: not authorised to READ topic '{topics['out']}'" in refused.stderr, (
        refused.stderr
    )
    grant(secured.admin, f"User:{APP_USER}", read=[topics["out"], topics["dlq"]])
    checked = verify()
    assert checked.returncode == 0, checked.stdout + checked.stderr[-1000:]
    assert "OK: nothing lost" in checked.stdout, checked.stdout


def test_permissions_refused_while_running_are_named_fail_readiness_and_granting_them_loses_nothing(
    tmp_path, secured, secured_topics, group_id
):
    topics, principal = secured_topics, f"User:{APP_USER}"
    # What start-up checks (DESCRIBE on the topics) and the dead letters' WRITE: READ on the group, READ on
    # the input and WRITE on the output are missing, and are granted one at a time while the service runs.
    allow(secured.admin, principal, ResourceType.TOPIC, [topics["in"], topics["out"]], AclOperation.DESCRIBE)
    grant(secured.admin, principal, write=[topics["dlq"]])
    coords = produce(secured.admin, topics["in"], metrics_events(EVENTS, seed=67))
    port = free_port()
    settings = scram_settings(secured, tmp_path, metrics__port=str(port), metrics__broker_timeout_s="3")
    service = _start(tmp_path, topics, group_id, settings)
    permissions = [f"READ on group '{group_id}'", f"READ on topic '{topics['in']}'"]
    permissions.append(f"WRITE on topic '{topics['out']}'")

    def unready_for(permission: str) -> None:
        def refused() -> bool:
            with contextlib.suppress(OSError):  # the port opens once the model is loaded
                status, why = http_get(port, "/readyz")
                return status == 503 and why.startswith(f"not authorised: {permission} refused for ")
            return False

        wait_for(refused, 60, f"/readyz failing for want of {permission}")

    try:
        unready_for(permissions[0])
        grant(secured.admin, principal, groups=[group_id])
        unready_for(permissions[1])
        allow(secured.admin, principal, ResourceType.TOPIC, [topics["in"]], AclOperation.READ)
        unready_for(permissions[2])
        nothing = committed(secured.admin, group_id, topics["in"], SERVICE_PARTITIONS)
        failures = scrape(port)
        grant(secured.admin, principal, write=[topics["out"]])
        _all_answered_and_committed(secured, topics, group_id, coords)
        wait_for(lambda: http_get(port, "/readyz") == (200, "ok\n"), 30, "/readyz ok again")
    finally:
        code = service.stop()
    log = service.log()
    assert code == 0, log[-3000:]
    assert all(offset < 0 for offset in nothing.values()), nothing  # nothing committed while refused
    metric = "microbatch_authorization_failures_total"
    wanted = [(group_id, "READ", "group"), (topics["in"], "READ", "topic"), (topics["out"], "WRITE", "topic")]
    for name, operation, resource in wanted:
        assert failures[f'{metric}{{name="{name}",operation="{operation}",resource="{resource}"}}'] >= 1
    for permission in permissions:
        assert f'"permission": "{permission}", "hint": "grant {permission} to' in log, permission
        assert f'"permission": "{permission}", "event": "authorised"' in log, permission
