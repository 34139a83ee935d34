"""Static checks of the alert rules (``deploy/compose/alerts.yml``), no Prometheus running.

promtool (Debian's ``prometheus`` package) checks that the rules load, alone and through the compose
Prometheus's configuration, and runs their unit tests (``tests/deploy/alerts_test.yml``: each alert fires on a
replica in trouble and not on healthy ones). The rest is read from the files: every alert is complete and
names a runbook section that docs/DEPLOY.md has, queries only metrics the service exports, and watches the
replicas the scrape labels as the service; the compose stack mounts the file where its Prometheus reads it,
and the Kubernetes PrometheusRule holds the same groups.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.test_deploy_files import exported_metric_names
from tests.deploy.test_k8s_manifests import _compose_services
from tests.support.harness import needs_installed

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "compose" / "alerts.yml"
RULE_TESTS = ROOT / "tests" / "deploy" / "alerts_test.yml"
PROMETHEUS_CONFIG = ROOT / "deploy" / "compose" / "prometheus.yml"
COMPOSE_FILE = ROOT / "docker-compose.yml"
PROMETHEUS_RULE = ROOT / "deploy" / "k8s" / "base" / "prometheusrule.yaml"
K8S_SERVICE = ROOT / "deploy" / "k8s" / "base" / "service.yaml"
BACKFILL = ROOT / "deploy" / "k8s" / "jobs" / "backfill" / "kustomization.yaml"
DEPLOY_DOC = ROOT / "docs" / "DEPLOY.md"

GROUP = "microbatch"
SEVERITIES = {"warning", "critical"}
APP_LABEL = "app.kubernetes.io/name"
# "See docs/DEPLOY.md, Runbook: <the section's heading>." ends every description.
RUNBOOK_REFERENCE = re.compile(r"See docs/DEPLOY\.md, Runbook: (?P<section>[^.]+)\.$")
# Series the rules may select that the service does not export: Prometheus's own, per target.
PROMETHEUS_SERIES = {"up"}
# PromQL's keywords, which read like series names once the label lists, matchers and ranges are gone.
PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset"}


def _promtool() -> str:
    found = shutil.which("promtool") or shutil.which("promtool", path="/usr/bin")
    needs_installed(None if found else "promtool not found: apt-get install prometheus")
    assert found
    return found


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    """``promtool argv...`` from the repository root."""
    return subprocess.run(
        [_promtool(), *argv], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def _groups() -> list[dict[str, Any]]:
    return yaml.safe_load(RULES.read_text())["groups"]


def _alerts() -> list[dict[str, Any]]:
    return [rule for group in _groups() for rule in group["rules"] if "alert" in rule]


def _alert(name: str) -> dict[str, Any]:
    (alert,) = [a for a in _alerts() if a["alert"] == name]
    return alert


# --- promtool ------------------------------------------------------------------------------------------


def test_the_rules_pass_promtool_check():
    proc = _run("check", "rules", str(RULES.relative_to(ROOT)))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_compose_prometheus_config_loads_the_rules():
    """`promtool check config` follows `rule_files` from the configuration's directory, as Prometheus does."""
    proc = _run("check", "config", str(PROMETHEUS_CONFIG.relative_to(ROOT)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(_alerts())} rules found" in proc.stdout, proc.stdout


def test_the_rules_pass_their_unit_tests():
    proc = _run("test", "rules", str(RULE_TESTS.relative_to(ROOT)))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_is_unit_tested_firing_and_quiet():
    """Each alert has a check where it fires and one where it does not (before its `for`, or healthy
    series only); every check names an alert of the rules."""
    spec = yaml.safe_load(RULE_TESTS.read_text())
    assert {(RULE_TESTS.parent / path).resolve() for path in spec["rule_files"]} == {RULES.resolve()}
    checks = [check for test in spec["tests"] for check in test.get("alert_rule_test", [])]
    names = {alert["alert"] for alert in _alerts()}
    assert {check["alertname"] for check in checks} <= names
    fires = {check["alertname"] for check in checks if check.get("exp_alerts")}
    quiet = {check["alertname"] for check in checks if not check.get("exp_alerts")}
    assert names - fires == set(), "never shown to fire"
    assert names - quiet == set(), "never shown not to fire"


# --- the rules themselves ------------------------------------------------------------------------------


def test_one_group_of_alerts_each_with_for_severity_summary_and_description():
    groups = _groups()
    assert [group["name"] for group in groups] == [GROUP]
    alerts = _alerts()
    assert alerts and len(alerts) == len(groups[0]["rules"]), "alerting rules only"
    assert len({a["alert"] for a in alerts}) == len(alerts), "alert names must be unique"
    for alert in alerts:
        name = alert["alert"]
        assert re.fullmatch(r"Microbatch[A-Z][A-Za-z]+", name), name
        assert "for" in alert, f"{name}: fires on a single evaluation"
        assert alert["labels"]["severity"] in SEVERITIES, name
        annotations = alert["annotations"]
        assert set(annotations) == {"summary", "description"}, name
        for key in ("summary", "description"):
            assert "{{ $labels." in annotations[key] or "{{ $value" in annotations[key], f"{name}: {key}"


def _runbook_sections() -> set[str]:
    """The ``###`` headings of docs/DEPLOY.md's ``## Runbook``."""
    runbook = DEPLOY_DOC.read_text().split("\n## Runbook\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^### (.+?)\s*$", runbook, re.MULTILINE))


def test_every_description_names_a_runbook_section_of_the_deploy_doc():
    named = {}
    for alert in _alerts():
        found = RUNBOOK_REFERENCE.search(alert["annotations"]["description"])
        assert found, f"{alert['alert']}: the description does not end with its runbook section"
        named[alert["alert"]] = found["section"]
    missing = {alert: section for alert, section in named.items() if section not in _runbook_sections()}
    assert not missing, f"sections docs/DEPLOY.md's runbook lacks: {missing}"


def _series_names(expr: str) -> set[str]:
    """The series an expression selects: what is left once strings, label matchers, ranges, the label
    lists of by/without/on/ignoring/group_*, function calls' names and keywords are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set(re.findall(r"(?<![\w.])[a-zA-Z_:][a-zA-Z0-9_:]*\b(?!\s*\()", text))
    return names - PROMQL_KEYWORDS


def test_series_names_are_read_from_an_expression():
    expr = 'sum by (service) (rate(a_total{x="y"}[5m])) / (b > 0) and on (i) up{s=~"c|d"} offset 10m'
    assert _series_names(expr) == {"a_total", "b", "up"}


def test_the_rules_query_only_metrics_the_service_exports():
    """Names from the service's own registry (service/observability/metrics.py), as the dashboard's are."""
    exported = exported_metric_names()
    for alert in _alerts():
        names = _series_names(alert["expr"])
        assert names, f"{alert['alert']}: selects no series"
        unknown = names - exported - PROMETHEUS_SERIES
        assert not unknown, f"{alert['alert']}: {sorted(unknown)} not exported by the service"


def test_target_down_watches_the_service_and_not_the_backfill():
    """`up` exists for every target of the Prometheus, so the alert selects the service's by `service`:
    the compose services, and the app name the ServiceMonitor copies (tests/deploy/test_k8s_manifests.py);
    not the backfill Job's pods, which end."""
    (selector,) = re.findall(r'\bup\{service=~"([^"]+)"\}', _alert("MicrobatchTargetDown")["expr"])
    services = _compose_services() | {
        yaml.safe_load(K8S_SERVICE.read_text())["metadata"]["labels"][APP_LABEL]
    }
    backfill = yaml.safe_load(BACKFILL.read_text())["labels"][0]["pairs"][APP_LABEL]
    assert all(re.fullmatch(selector, service) for service in services), services
    assert not re.fullmatch(selector, backfill)


# --- where they are loaded -----------------------------------------------------------------------------


def test_the_compose_prometheus_mounts_the_rules_where_its_config_reads_them():
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    (rule_file,) = config["rule_files"]
    volumes = [
        v.split(":") for v in yaml.safe_load(COMPOSE_FILE.read_text())["services"]["prometheus"]["volumes"]
    ]
    mounts = {
        (ROOT / source).resolve().relative_to(ROOT): (target, *options)
        for source, target, *options in volumes
    }
    config_target, *_ = mounts[PROMETHEUS_CONFIG.relative_to(ROOT)]
    assert mounts[RULES.relative_to(ROOT)] == (str(Path(config_target).parent / rule_file), "ro")
    assert (PROMETHEUS_CONFIG.parent / rule_file).resolve() == RULES.resolve()


def test_the_prometheusrule_holds_the_groups_of_the_rules_file():
    rule = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["spec"]["groups"] == _groups(), f"copy the groups of {RULES.relative_to(ROOT)}"
