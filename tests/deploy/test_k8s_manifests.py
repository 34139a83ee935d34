"""Static checks of the Kubernetes manifests (``deploy/k8s``), no cluster involved.

Each overlay is rendered with ``kubectl kustomize``, with the KEDA component it ships with, with the HPA
component swapped in, and with a security component (kafka-sasl-ssl, kafka-mtls) added, as docs/DEPLOY.md
describes. Every rendered object must be valid against its API schema (built-in kinds: the Kubernetes
OpenAPI schemas of kubernetes-validate, strict; the CRDs: the schemas vendored under tests/deploy/schemas/),
and the manifests must agree with the service: its settings, its HTTP port and probe paths, its drain time,
the consumer group and topic the autoscaler watches, the brokers' port, and the credential files, which the
tests mount from the example Secret as the kubelet would before loading the settings. The monitoring must
agree with the compose stack's: the same ``service`` label on every series, the same alert rules.

The backfill Job (``jobs/backfill``) is rendered too and held to the same schemas, to the backfill command's
own parser (each index's arguments, which together read every partition once) and to the service it runs
beside: overlays/cpu's image, settings and pod, none of its objects, none of its selectors.
"""

from __future__ import annotations

import base64
import io
import math
import os
import re
import shutil
import subprocess
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import jsonschema
import kubernetes_validate
import pytest
import yaml
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from service import cli
from service.backfill.bounds import Time, parse_partitions
from service.backfill.bounds import parse as parse_bound
from service.backfill.command import backfill_settings
from service.backfill.progress import Progress
from service.config import KafkaSettings, Settings, load_settings, require_topics
from service.errors import ConfigError, EnvironmentNotReadyError, MicrobatchError, UsageError

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
SCHEMAS = ROOT / "tests" / "deploy" / "schemas"
COMPOSE_PROMETHEUS = ROOT / "deploy" / "compose" / "prometheus.yml"
ALERT_RULES = ROOT / "deploy" / "compose" / "alerts.yml"

# The newest Kubernetes schemas the dev dependency (kubernetes-validate>=1.31) is sure to ship.
K8S_VERSION = "1.31"
CRD_FILES = (
    "keda.sh_scaledobjects.yaml",
    "keda.sh_triggerauthentications.yaml",
    "monitoring.coreos.com_servicemonitors.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
)

IMAGE = "ghcr.io/microbatch/microbatch"
CONTAINER = "microbatch"
PARTITIONS_ANNOTATION = "microbatch/input-partitions"
CREDENTIALS_SECRET = "microbatch-kafka"
# docs/DEPLOY.md: the service needs the flush timeout plus about 15 s to drain after SIGTERM.
DRAIN_MARGIN_S = 15
# Model load, warm-up and group join take 10-30 s on top of the wait for a broker.
STARTUP_WORK_S = 30

# The Service label whose value the ServiceMonitor puts into `service`: the app name, which is the name of
# the compose service (`service="microbatch"` under both).
APP_LABEL = "app.kubernetes.io/name"
APP_NAME = "microbatch"

# A secured cluster's TLS listener, where docs/DEPLOY.md has users point the bootstrap servers.
TLS_BOOTSTRAP = "kafka-bootstrap.kafka.svc:9093"


@dataclass(frozen=True)
class Variant:
    """An overlay, with the autoscaler component it includes, the security component added after that,
    the bootstrap servers its ConfigMap merges in (None: as committed), and the delivery component listed
    last (``exactly-once``: the Deployment becomes a StatefulSet)."""

    overlay: str
    autoscaler: str = "keda"
    security: str | None = None
    bootstrap: str | None = None
    delivery: str | None = None

    @property
    def workload(self) -> str:
        return "StatefulSet" if self.delivery == "exactly-once" else "Deployment"


VARIANTS = {
    "cpu": Variant("cpu"),
    "gpu": Variant("gpu"),
    "cpu-hpa": Variant("cpu", "hpa"),
    "gpu-hpa": Variant("gpu", "hpa"),
    "cpu-sasl-ssl": Variant("cpu", security="kafka-sasl-ssl", bootstrap=TLS_BOOTSTRAP),
    "gpu-mtls": Variant("gpu", security="kafka-mtls", bootstrap=TLS_BOOTSTRAP),
    "cpu-hpa-mtls": Variant("cpu", "hpa", "kafka-mtls", TLS_BOOTSTRAP),
    "cpu-exactly-once": Variant("cpu", delivery="exactly-once"),
    "gpu-hpa-sasl-ssl-exactly-once": Variant("gpu", "hpa", "kafka-sasl-ssl", TLS_BOOTSTRAP, "exactly-once"),
}
EXACTLY_ONCE_VARIANTS = [name for name, v in VARIANTS.items() if v.delivery == "exactly-once"]
KEDA_VARIANTS = [name for name, v in VARIANTS.items() if v.autoscaler == "keda"]
SECURED_VARIANTS = [name for name, v in VARIANTS.items() if v.security]
# The security protocol each security component sets.
PROTOCOLS = {"kafka-sasl-ssl": "SASL_SSL", "kafka-mtls": "SSL"}
EXPECTED_PROVIDERS = {
    "cpu": ["CPUExecutionProvider"],
    "gpu": ["CUDAExecutionProvider", "CPUExecutionProvider"],
}


def _kubectl() -> str:
    """The kubectl binary. Skips without one, but fails in CI (``CI=true``), where it must be installed."""
    found = shutil.which("kubectl") or shutil.which("kubectl", path="/usr/bin")
    if found:
        return found
    reason = "kubectl not found: the tests render deploy/k8s with `kubectl kustomize`"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _kustomize(kubectl: str, directory: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, f"kubectl kustomize {directory} failed:\n{proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


@dataclass(frozen=True)
class Manifests:
    """One rendering of an overlay: its objects and lookups into them, and with a security component the
    Secret its secret/ kustomization makes (from placeholder files), which the cluster would hold. The pod
    and container are those of the ``workload`` (the Deployment; the Job for jobs/backfill)."""

    variant: Variant
    objects: list[dict[str, Any]]
    secret: dict[str, Any] | None = None
    workload: str = "Deployment"

    @property
    def overlay(self) -> str:
        return self.variant.overlay

    @property
    def autoscaler(self) -> str:
        return self.variant.autoscaler

    @property
    def security(self) -> str | None:
        return self.variant.security

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        found = self.of_kind(kind)
        assert len(found) == 1, f"expected one {kind}, found {len(found)}"
        return found[0]

    @property
    def deployment(self) -> dict[str, Any]:
        """The service's workload: its Deployment, or the StatefulSet it becomes under exactly-once."""
        return self.one(self.variant.workload)

    @property
    def pod(self) -> dict[str, Any]:
        return self.one(self.workload)["spec"]["template"]

    @property
    def container(self) -> dict[str, Any]:
        containers = {c["name"]: c for c in self.pod["spec"]["containers"]}
        assert CONTAINER in containers, f"no container named {CONTAINER!r}"
        return containers[CONTAINER]

    @property
    def config(self) -> dict[str, str]:
        return self.one("ConfigMap").get("data", {})

    @property
    def partitions(self) -> int:
        return int(self.deployment["metadata"]["annotations"][PARTITIONS_ANNOTATION])

    @property
    def secret_data(self) -> dict[str, str]:
        assert self.secret is not None, "no example Secret for this variant"
        data = {k: base64.b64decode(v).decode() for k, v in self.secret.get("data", {}).items()}
        return data | self.secret.get("stringData", {})

    def secret_volumes(self) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
        """mountPath -> (the container's volumeMount, the ``secret`` of its volume)."""
        volumes = {v["name"]: v for v in self.pod["spec"].get("volumes", [])}
        return {
            m["mountPath"]: (m, volumes[m["name"]]["secret"])
            for m in self.container.get("volumeMounts", [])
            if "secret" in volumes[m["name"]]
        }

    def secret_files(self) -> dict[Path, str]:
        """Path in the container -> the Secret key the kubelet puts there."""
        files = {}
        for path, (_, volume) in self.secret_volumes().items():
            items = volume.get("items") or [{"key": k, "path": k} for k in self.secret_data]
            files |= {Path(path) / item["path"]: item["key"] for item in items}
        return files

    def mount_secrets(self, root: Path) -> None:
        """Write the Secret's keys where the kubelet would mount them, with ``root`` standing for ``/``.
        Fails where the pod would not start: a volume of another Secret, or of a key it lacks."""
        for path, (_, volume) in self.secret_volumes().items():
            assert self.secret is not None, f"{path}: a Secret volume, and no Secret to fill it"
            assert volume["secretName"] == self.secret["metadata"]["name"], f"{path}: no such Secret"
        for path, key in self.secret_files().items():
            assert key in self.secret_data, f"{path}: the Secret has no key {key!r}, the pod would not start"
            target = root / path.relative_to("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(self.secret_data[key])

    def environment(self, root: Path | None = None) -> dict[str, str]:
        """What the container's environment would hold: the ConfigMap, then ``env`` (which wins). A Secret
        reference reads as the Secret's value (a placeholder where the Secret is made outside the
        repository), a CPU limit reference as whole cores, as the kubelet has it. With ``root``, a path
        into a Secret volume reads as the file :meth:`mount_secrets` wrote under it."""
        env = dict(self.config)
        mounted = self.secret_files() if root is not None else {}
        for var in self.container.get("env", []):
            if "value" in var:
                value = var["value"]
                env[var["name"]] = str(root / value.lstrip("/")) if root and Path(value) in mounted else value
                continue
            source = var["valueFrom"]
            if "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                if self.secret is None:
                    env[var["name"]] = "from-secret"
                elif ref["key"] in self.secret_data and ref["name"] == self.secret["metadata"]["name"]:
                    env[var["name"]] = self.secret_data[ref["key"]]
                else:
                    assert ref.get("optional"), (
                        f"{var['name']}: no key {ref['key']!r}, the pod would not start"
                    )
            elif source.get("fieldRef", {}).get("fieldPath") == "metadata.name":
                env[var["name"]] = f"{self.deployment['metadata']['name']}-0"  # the first pod's name
            elif source.get("resourceFieldRef", {}).get("resource") == "limits.cpu":
                ref = source["resourceFieldRef"]
                cores = _cores(self.container["resources"]["limits"]["cpu"]) / _cores(ref.get("divisor", "1"))
                env[var["name"]] = str(math.ceil(cores))
            else:
                raise AssertionError(f"{var['name']}: unexpected source {source}")
        return env


def _cores(quantity: str | int | float) -> float:
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _customised(tree: Path, variant: Variant) -> Path:
    """The overlay in ``tree`` changed the way docs/DEPLOY.md tells users to: the autoscaler component
    swapped, the security component listed after it, the bootstrap servers merged into the settings."""
    kustomization = tree / "overlays" / variant.overlay / "kustomization.yaml"
    text = kustomization.read_text()
    keda, literals = "  - ../../components/keda\n", "    literals:\n"
    assert keda in text, f"{variant.overlay}: the overlay no longer includes the KEDA component"
    assert text.count(literals) == 1, f"{variant.overlay}: expected one configMapGenerator with literals"
    components = f"  - ../../components/{variant.autoscaler}\n"
    if variant.security:
        components += f"  - ../../components/{variant.security}\n"
    if variant.delivery:
        components += f"  - ../../components/{variant.delivery}\n"
    text = text.replace(keda, components)
    if variant.bootstrap:
        text = text.replace(
            literals, f"{literals}      - MICROBATCH_KAFKA__BOOTSTRAP_SERVERS={variant.bootstrap}\n"
        )
    kustomization.write_text(text)
    return kustomization.parent


def _users_secret_files(directory: str, names: list[str]) -> list[str]:
    """For copying deploy/k8s: leave out the credentials a user may have put into a ``secret/`` directory."""
    if Path(directory).name != "secret":
        return []
    return [name for name in names if name not in {"kustomization.yaml", ".gitignore"}]


def _placeholder(name: str) -> str:
    """Stand-in content of a Secret file the user provides: PEM-shaped for certificates and keys."""
    if name.endswith((".pem", ".crt", ".key")):
        kind = "PRIVATE KEY" if name.endswith(".key") else "CERTIFICATE"
        return f"-----BEGIN {kind}-----\nplaceholder for {name}\n-----END {kind}-----\n"
    return f"placeholder-{name}\n"  # a trailing newline, as an editor leaves it


def _example_secret(kubectl: str, tree: Path, security: str) -> dict[str, Any]:
    """The Secret that ``components/<security>/secret`` makes, from placeholder files put in its place."""
    directory = tree / "components" / security / "secret"
    (generator,) = yaml.safe_load((directory / "kustomization.yaml").read_text())["secretGenerator"]
    for entry in generator.get("files", []):
        name = entry.split("=")[-1]
        (directory / name).write_text(_placeholder(name))
    (secret,) = _kustomize(kubectl, directory)
    return secret


@pytest.fixture(scope="module")
def render(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Variant], Manifests]:
    """Render a variant (cached): the overlay as committed, or a copy changed as :func:`_customised` says."""
    kubectl = _kubectl()
    cache: dict[Variant, Manifests] = {}

    def rendered(variant: Variant) -> Manifests:
        if variant not in cache:
            directory, secret = K8S / "overlays" / variant.overlay, None
            if variant != Variant(variant.overlay):
                tree = tmp_path_factory.mktemp(variant.overlay) / "k8s"
                shutil.copytree(K8S, tree, ignore=_users_secret_files)
                directory = _customised(tree, variant)
                if variant.security:
                    secret = _example_secret(kubectl, tree, variant.security)
            cache[variant] = Manifests(variant, _kustomize(kubectl, directory), secret, variant.workload)
        return cache[variant]

    return rendered


@pytest.fixture(params=list(VARIANTS))
def manifests(request: pytest.FixtureRequest, render: Callable[[Variant], Manifests]) -> Manifests:
    return render(VARIANTS[request.param])


@pytest.fixture
def settings(manifests: Manifests, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    """The service's settings as the container would load them, its Secret volumes mounted under
    ``tmp_path``; raises ConfigError naming a bad variable (a file setting naming no file among them)."""
    manifests.mount_secrets(tmp_path)
    for name, value in manifests.environment(tmp_path).items():
        monkeypatch.setenv(name, value)
    return load_settings()


# --- schemas -------------------------------------------------------------------------------------------


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """A CRD's OpenAPI schema as a JSON Schema that rejects undeclared fields, as the API server's strict
    field validation does (without it they are silently pruned, so a misspelt field just does nothing)."""
    out = dict(schema)
    if "properties" in schema:
        out["properties"] = {k: _strict(v) for k, v in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = _strict(schema["additionalProperties"])
    if "items" in schema:
        out["items"] = _strict(schema["items"])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in schema:
            out[key] = [_strict(s) for s in schema[key]]
    return out


def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> strict JSON Schema, for every version the vendored CRDs serve."""
    schemas = {}
    for name in CRD_FILES:
        crd = yaml.safe_load((SCHEMAS / name).read_text())
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served", True):
                key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                schemas[key] = _strict(version["schema"]["openAPIV3Schema"])
    return schemas


CRD_SCHEMAS = _crd_schemas()


def test_vendored_crd_schemas_reject_unknown_fields():
    """The strict conversion works: a misspelt field of a custom resource fails."""
    schema = CRD_SCHEMAS[("keda.sh/v1alpha1", "ScaledObject")]
    good = {"spec": {"scaleTargetRef": {"name": "x"}, "triggers": [{"type": "kafka", "metadata": {}}]}}
    jsonschema.validate(good, schema)
    bad = {"spec": good["spec"] | {"maxReplicas": 3}}
    with pytest.raises(jsonschema.ValidationError, match="maxReplicas"):
        jsonschema.validate(bad, schema)


def _validate(obj: dict[str, Any]) -> None:
    """Fails unless ``obj`` is valid against its API schema (strict), or its vendored CRD's."""
    where = f"{obj['kind']}/{obj['metadata']['name']}"
    crd = CRD_SCHEMAS.get((obj["apiVersion"], obj["kind"]))
    if crd is not None:
        try:
            jsonschema.validate(obj, crd)
        except jsonschema.ValidationError as exc:
            pytest.fail(f"{where}: {exc.message} at {'.'.join(map(str, exc.absolute_path))}")
        return
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{where}: {exc.message} at {'.'.join(map(str, exc.absolute_path))}")
    except kubernetes_validate.SchemaNotFoundError as exc:
        pytest.fail(f"{where}: {exc.message}; vendor its CRD under tests/deploy/schemas/ if it is one")


def test_every_object_is_valid_against_its_schema(manifests: Manifests):
    for obj in manifests.objects:
        _validate(obj)


def test_all_objects_live_in_the_one_namespace(manifests: Manifests):
    """Component objects too: a ScaledObject in another namespace would not find its Deployment."""
    namespace = manifests.one("Namespace")["metadata"]["name"]
    for obj in manifests.objects:
        if obj["kind"] != "Namespace":
            assert obj["metadata"].get("namespace") == namespace, f"{obj['kind']}/{obj['metadata']['name']}"


# --- the service's settings ----------------------------------------------------------------------------


def _is_known_setting(name: str) -> bool:
    """``MICROBATCH_<SECTION>__<FIELD>`` naming a real field. Settings ignores an unknown *section*
    (``MICROBATCH_BATHC__MAX_SIZE``) silently, so loading them is not enough to catch that typo."""
    section, delimiter, field = name.removeprefix("MICROBATCH_").partition("__")
    model = Settings.model_fields.get(section.lower())
    return bool(delimiter) and model is not None and field.lower() in model.annotation.model_fields


def test_every_setting_is_a_valid_microbatch_variable(manifests: Manifests, settings: Settings):
    names = set(manifests.environment())
    assert set(manifests.config) <= {n for n in names if n.startswith("MICROBATCH_")}, "non-setting key"
    unknown = sorted(n for n in names if n.startswith("MICROBATCH_") and not _is_known_setting(n))
    assert not unknown, f"not settings of the service: {unknown}"
    require_topics(settings)
    configmap = manifests.one("ConfigMap")["metadata"]["name"]
    assert {"configMapRef": {"name": configmap}} in manifests.container["envFrom"]


def test_the_overlay_picks_its_execution_providers(manifests: Manifests, settings: Settings):
    assert settings.model.providers == EXPECTED_PROVIDERS[manifests.overlay]
    assert settings.model.name in {"metrics-anomaly", "log-classifier"}
    assert settings.log.format == "json"


def test_onnx_runtime_threads_fit_the_cpu_limit(manifests: Manifests, settings: Settings):
    limit = _cores(manifests.container["resources"]["limits"]["cpu"])
    assert 1 <= settings.model.intra_op_threads <= math.ceil(limit)


# The Kafka settings that hold a secret, and those that name a file (a secret's, a certificate's, a key's).
SECRET_SETTINGS = {
    KafkaSettings.env(name)
    for name, field in KafkaSettings.model_fields.items()
    if SecretStr in get_args(field.annotation)
}
FILE_SETTINGS = {KafkaSettings.env(name) for name in KafkaSettings.model_fields if name.endswith("_file")}


def test_credentials_come_from_the_secret_that_is_not_committed(manifests: Manifests):
    refs = {
        var["name"]: var["valueFrom"]["secretKeyRef"]
        for var in manifests.container["env"]
        if "secretKeyRef" in var.get("valueFrom", {})
    }
    volumes = [volume["secretName"] for _, volume in manifests.secret_volumes().values()]
    assert {ref["name"] for ref in refs.values()} | set(volumes) <= {CREDENTIALS_SECRET}
    if manifests.security is None:
        # Optional, so that a cluster without SASL needs no Secret at all.
        assert set(refs) == {KafkaSettings.env("sasl_username"), KafkaSettings.env("sasl_password")}
        assert all(ref["optional"] is True for ref in refs.values())
        assert not volumes
    else:
        assert volumes == [CREDENTIALS_SECRET]
        # Secrets only as files: the environment shows in /proc/<pid>/environ.
        assert not set(refs) & SECRET_SETTINGS
    assert not manifests.of_kind("Secret")
    assert not set(manifests.config) & SECRET_SETTINGS
    assert not any("SASL_PASSWORD" in key or "SASL_USERNAME" in key for key in manifests.config)


# --- the HTTP contract ---------------------------------------------------------------------------------


def _port_number(container: dict[str, Any], port: int | str) -> int:
    """A probe's or Service's port, by number or by the container port's name."""
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}
    assert port in named, f"no container port named {port!r}"
    return named[port]


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    match = selector.get("matchLabels", selector)
    return bool(match) and all(labels.get(k) == v for k, v in match.items())


def test_probes_hit_the_health_endpoints_on_the_settings_port(manifests: Manifests, settings: Settings):
    container = manifests.container
    assert settings.metrics.enabled
    assert settings.metrics.host in {"0.0.0.0", "::"}, "the kubelet and Prometheus connect from outside"
    expected = {"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    for probe, path in expected.items():
        get = container[probe]["httpGet"]
        assert get["path"] == path, probe
        assert get.get("scheme", "HTTP") == "HTTP", probe
        assert _port_number(container, get["port"]) == settings.metrics.port, probe
    startup = container["startupProbe"]
    budget = startup["periodSeconds"] * startup["failureThreshold"]
    assert budget >= settings.kafka.startup_timeout_s + STARTUP_WORK_S, "start-up would be killed"


def test_service_and_servicemonitor_target_the_metrics_port(manifests: Manifests, settings: Settings):
    _assert_scraped(manifests, settings)


def _assert_scraped(manifests: Manifests, settings: Settings) -> None:
    """The Service selects the pods and targets the metrics port; the ServiceMonitor scrapes it."""
    service = manifests.one("Service")
    assert _selects(service["spec"]["selector"], manifests.pod["metadata"]["labels"])
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    for port in ports.values():
        assert _port_number(manifests.container, port["targetPort"]) == settings.metrics.port
    monitor = manifests.one("ServiceMonitor")
    assert _selects(monitor["spec"]["selector"], service["metadata"]["labels"])
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in ports
        assert endpoint.get("path", "/metrics") == "/metrics"


def test_network_policy_admits_only_metrics_in_and_kafka_and_dns_out(
    manifests: Manifests, settings: Settings
):
    _assert_network_policy(manifests, settings)


def _assert_network_policy(manifests: Manifests, settings: Settings) -> None:
    policy = manifests.one("NetworkPolicy")["spec"]
    assert _selects(policy["podSelector"], manifests.pod["metadata"]["labels"])
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    for rule in policy["ingress"]:
        assert rule.get("ports"), "an ingress rule without ports admits every port"
        assert {_port_number(manifests.container, p["port"]) for p in rule["ports"]} == {
            settings.metrics.port
        }
    allowed = set()
    for rule in policy["egress"]:
        assert rule.get("ports"), "an egress rule without ports allows every port"
        allowed |= {(p["port"], p.get("protocol", "TCP")) for p in rule["ports"]}
    brokers = {int(server.rsplit(":", 1)[1]) for server in settings.kafka.bootstrap_servers.split(",")}
    assert {(port, "TCP") for port in brokers} | {(53, "UDP"), (53, "TCP")} == allowed


@pytest.mark.parametrize(
    ("bootstrap", "port"),
    [
        ("kafka-bootstrap.kafka.svc:9093", 9093),
        ("b-1.kafka.example.com:9096,b-2.kafka.example.com:9096", 9096),
    ],
)
@pytest.mark.parametrize("overlay", ["cpu", "gpu"])
def test_the_kafka_egress_port_follows_the_bootstrap_servers(
    render: Callable[[Variant], Manifests], overlay: str, bootstrap: str, port: int
):
    """An overlay's own bootstrap servers move the port (components/kafka-egress), as an integer: a
    string would be read as the name of a port."""
    manifests = render(Variant(overlay, bootstrap=bootstrap))
    assert manifests.config["MICROBATCH_KAFKA__BOOTSTRAP_SERVERS"] == bootstrap
    kafka_rule = manifests.one("NetworkPolicy")["spec"]["egress"][0]
    assert kafka_rule["ports"] == [{"port": port, "protocol": "TCP"}]
    assert type(kafka_rule["ports"][0]["port"]) is int


# --- monitoring: the `service` label and the alert rules -----------------------------------------------


def _meta_label(label: str) -> str:
    """The meta label under which Kubernetes service discovery shows a Service's label: every character a
    label name cannot hold (``.``, ``/``, ``-``) becomes ``_``."""
    return "__meta_kubernetes_service_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", label)


def _compose_services() -> set[str]:
    """The values of `service` under compose: the DNS names its Prometheus scrapes (``__meta_dns_name``)."""
    config = yaml.safe_load(COMPOSE_PROMETHEUS.read_text())
    return {
        name
        for job in config["scrape_configs"]
        for sd in job.get("dns_sd_configs", [])
        for name in sd["names"]
    }


def test_scraped_series_carry_the_app_name_as_service_like_under_compose(manifests: Manifests):
    """The operator labels series with `service` = the Service's name (microbatch-metrics); a relabeling of
    each endpoint, applied after the operator's own, replaces it with the Service's app name, so the
    dashboard's filter and the alert rules see `service="microbatch"` as under compose."""
    service = manifests.one("Service")
    assert service["metadata"]["labels"][APP_LABEL] == APP_NAME
    assert APP_NAME in _compose_services()
    for endpoint in manifests.one("ServiceMonitor")["spec"]["endpoints"]:
        to_service = [r for r in endpoint.get("relabelings", []) if r.get("targetLabel") == "service"]
        assert to_service, "`service` would be the Service's name, microbatch-metrics"
        last = to_service[-1]
        assert last["sourceLabels"] == [_meta_label(APP_LABEL)]
        assert last.get("action", "replace").lower() == "replace"
        assert last.get("regex", "(.*)") == "(.*)" and last.get("replacement", "$1") == "$1"


def test_the_alert_rules_are_the_compose_prometheus_rules(manifests: Manifests):
    """One PrometheusRule, with the groups of deploy/compose/alerts.yml (tests/deploy/test_alerts.py
    unit-tests them with promtool)."""
    rule = manifests.one("PrometheusRule")
    assert rule["metadata"]["labels"][APP_LABEL] == APP_NAME
    assert rule["spec"]["groups"] == yaml.safe_load(ALERT_RULES.read_text())["groups"]


# --- the pod -------------------------------------------------------------------------------------------


def test_gpu_is_requested_only_by_the_gpu_overlay(manifests: Manifests):
    resources = manifests.container["resources"]
    spec = manifests.pod["spec"]
    gpu_tolerated = any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", []))
    if manifests.overlay == "gpu":
        assert int(resources["limits"]["nvidia.com/gpu"]) == 1
        assert int(resources["requests"].get("nvidia.com/gpu", 1)) == 1
        assert gpu_tolerated
        assert spec.get("nodeSelector")
    else:
        assert "nvidia.com/gpu" not in resources.get("limits", {})
        assert "nvidia.com/gpu" not in resources.get("requests", {})
        assert not gpu_tolerated


def test_image_is_the_release_of_this_tree(manifests: Manifests):
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    suffix = "-gpu" if manifests.overlay == "gpu" else ""
    assert manifests.container["image"] == f"{IMAGE}:{version}{suffix}"


def test_runs_as_non_root_with_nothing_it_does_not_need(manifests: Manifests):
    pod = manifests.pod["spec"].get("securityContext", {})
    container = manifests.container.get("securityContext", {})

    def effective(key: str) -> Any:
        return container.get(key, pod.get(key))

    assert effective("runAsNonRoot") is True
    assert effective("runAsUser") == 10001
    assert effective("seccompProfile") == {"type": "RuntimeDefault"}
    assert container.get("readOnlyRootFilesystem") is True
    assert container.get("allowPrivilegeEscalation") is False
    assert container.get("capabilities", {}).get("drop") == ["ALL"]
    assert not container.get("privileged", False)


def test_tmp_is_a_writable_empty_dir(manifests: Manifests):
    volumes = {v["name"]: v for v in manifests.pod["spec"].get("volumes", [])}
    mounts = {m["mountPath"]: m for m in manifests.container.get("volumeMounts", [])}
    assert "/tmp" in mounts
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    assert not mounts["/tmp"].get("readOnly", False)


def test_no_api_token_and_no_service_links(manifests: Manifests):
    account = manifests.one("ServiceAccount")
    spec = manifests.pod["spec"]
    assert account["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    assert spec.get("automountServiceAccountToken") is False
    # Service links inject MICROBATCH_* look-alikes for a Service named "microbatch".
    assert spec.get("enableServiceLinks") is False


def test_grace_period_outlasts_the_drain(manifests: Manifests, settings: Settings):
    grace = manifests.pod["spec"]["terminationGracePeriodSeconds"]
    assert grace > settings.output.flush_timeout_s
    assert grace >= settings.output.flush_timeout_s + DRAIN_MARGIN_S


def test_rollout_keeps_capacity_and_the_autoscaler_owns_replicas(manifests: Manifests):
    spec = manifests.deployment["spec"]
    assert "replicas" not in spec, "each apply would reset the autoscaler's replica count"
    if manifests.variant.workload == "StatefulSet":  # no surge: a second pod of one name would be fenced
        assert spec["updateStrategy"]["type"] == "RollingUpdate"
        assert spec["podManagementPolicy"] == "Parallel"
        return
    rolling = spec["strategy"]["rollingUpdate"]
    assert spec["strategy"]["type"] == "RollingUpdate"
    assert rolling["maxUnavailable"] in (0, "0%")
    assert rolling["maxSurge"] not in (0, "0%")


def test_replicas_spread_over_zones_and_nodes_and_drain_one_at_a_time(manifests: Manifests):
    labels = manifests.pod["metadata"]["labels"]
    constraints = manifests.pod["spec"]["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in constraints} >= {
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    }
    assert all(_selects(c["labelSelector"], labels) for c in constraints)
    budget = manifests.one("PodDisruptionBudget")["spec"]
    assert _selects(budget["selector"], labels)
    assert "minAvailable" not in budget, "a single replica could never be drained"
    assert budget["maxUnavailable"] not in (0, "0%")


@pytest.mark.parametrize("manifests", EXACTLY_ONCE_VARIANTS, indirect=True)
def test_exactly_once_gives_each_replica_its_pod_name_for_transactions_and_static_membership(
    manifests: Manifests, settings: Settings
):
    """The pod's name, stable under a StatefulSet, is both ids: a restarted replica aborts what it left
    open at once and takes its own partitions back."""
    assert settings.delivery.guarantee == "exactly-once"
    env = {var["name"]: var.get("valueFrom", {}) for var in manifests.container["env"]}
    for name in ("MICROBATCH_KAFKA__INSTANCE_ID", "MICROBATCH_KAFKA__GROUP_INSTANCE_ID"):
        assert env[name] == {"fieldRef": {"fieldPath": "metadata.name"}}, name
    assert manifests.of_kind("Deployment") == []
    assert manifests.deployment["spec"]["serviceName"] == manifests.one("Service")["metadata"]["name"]


# --- autoscaling ---------------------------------------------------------------------------------------


def test_exactly_one_autoscaler_targets_the_deployment_up_to_the_partition_count(manifests: Manifests):
    scaled = manifests.of_kind("ScaledObject")
    hpas = manifests.of_kind("HorizontalPodAutoscaler")
    assert len(scaled) + len(hpas) == 1, "two autoscalers on one Deployment fight over its replicas"
    deployment = manifests.deployment["metadata"]["name"]
    if manifests.autoscaler == "keda":
        spec = scaled[0]["spec"]
        maximum, minimum = spec["maxReplicaCount"], spec["minReplicaCount"]
    else:
        spec = hpas[0]["spec"]
        maximum, minimum = spec["maxReplicas"], spec["minReplicas"]
    target = spec["scaleTargetRef"]
    assert target["name"] == deployment
    assert target.get("kind", "Deployment") == manifests.variant.workload
    assert maximum == manifests.partitions, "replicas beyond the partition count sit idle"
    assert 1 <= minimum <= maximum


@pytest.mark.parametrize("manifests", KEDA_VARIANTS, indirect=True)
def test_keda_watches_the_group_and_topic_the_service_consumes(manifests: Manifests, settings: Settings):
    (trigger,) = manifests.one("ScaledObject")["spec"]["triggers"]
    meta = trigger["metadata"]
    assert trigger["type"] == "kafka"
    assert meta["bootstrapServers"] == settings.kafka.bootstrap_servers
    assert meta["consumerGroup"] == settings.kafka.group_id
    assert settings.input.topics == [meta["topic"]], "the trigger watches one topic: the one consumed"
    assert meta["limitToPartitionsWithLag"] == "true"
    assert meta.get("offsetResetPolicy", "latest") == settings.kafka.auto_offset_reset
    assert int(meta["lagThreshold"]) > 0


# --- a secured cluster: components/kafka-sasl-ssl and components/kafka-mtls ------------------------------

# KEDA 2.16.1 (the release of the vendored CRDs), pkg/scalers/kafka_scaler.go: the trigger metadata and
# the authentication parameters the Kafka scaler reads (its AWS MSK IAM ones left out).
KEDA_KAFKA_METADATA = {
    "bootstrapServers", "bootstrapServersFromEnv", "consumerGroup", "consumerGroupFromEnv", "topic",
    "topicFromEnv", "partitionLimitation", "offsetResetPolicy", "lagThreshold", "activationLagThreshold",
    "allowIdleConsumers", "excludePersistentLag", "scaleToZeroOnInvalidOffset", "limitToPartitionsWithLag",
    "version", "sasl", "saslTokenProvider", "tls", "unsafeSsl", "awsRegion",
}  # fmt: skip
KEDA_KAFKA_AUTH = {
    "sasl", "saslTokenProvider", "username", "password", "scopes", "oauthTokenEndpointUri",
    "oauthExtensions", "tls", "ca", "cert", "key", "keyPassword", "keytab", "realm", "kerberosConfig",
    "kerberosServiceName", "kerberosDisableFAST",
}  # fmt: skip
# KEDA's `sasl` for each MICROBATCH_KAFKA__SASL_MECHANISM.
KEDA_SASL = {
    "PLAIN": "plaintext",
    "SCRAM-SHA-256": "scram_sha256",
    "SCRAM-SHA-512": "scram_sha512",
    "OAUTHBEARER": "oauthbearer",
}
# The Kafka setting each KEDA parameter stands for: KEDA must connect as the service does.
KEDA_AUTH_SETTINGS = {
    "username": "sasl_username",
    "password": "sasl_password",
    "ca": "ssl_ca_file",
    "cert": "ssl_cert_file",
    "key": "ssl_key_file",
    "keyPassword": "ssl_key_password",
}


def _secret_key_of(manifests: Manifests, field: str) -> str | None:
    """The key of the credentials Secret that the pod takes the Kafka setting ``field`` from, through its
    variable or its file (``SASL_PASSWORD`` or ``SASL_PASSWORD_FILE``); None where it takes none."""
    names = {KafkaSettings.env(f) for f in (field, f"{field}_file") if f in KafkaSettings.model_fields}
    for var in manifests.container.get("env", []):
        if var["name"] in names:
            if "value" in var:
                return manifests.secret_files().get(Path(var["value"]))
            return var["valueFrom"].get("secretKeyRef", {}).get("key")
    return None


@pytest.mark.parametrize("manifests", SECURED_VARIANTS, indirect=True)
def test_file_settings_name_the_files_of_a_read_only_secret_volume(manifests: Manifests):
    env = manifests.environment()
    named = {Path(env[name]): name for name in FILE_SETTINGS & set(env)}
    assert named, "the component names no credential file"
    mounted = manifests.secret_files()
    for path, name in named.items():
        assert path in mounted, f"{name}={path}: no Secret volume puts a file there"
    assert set(mounted) <= set(named), (
        f"files no setting names: {sorted(map(str, set(mounted) - set(named)))}"
    )
    for path, (mount, _) in manifests.secret_volumes().items():
        assert mount.get("readOnly") is True, path


@pytest.mark.parametrize("manifests", SECURED_VARIANTS, indirect=True)
def test_secret_files_are_readable_by_the_service_and_no_one_else(manifests: Manifests):
    """As the kubelet sets up a Secret volume: its files belong to root, and to the pod's fsGroup if it has
    one, which also gets read access (kubernetes/kubernetes#57923: 0400 becomes 0440) and is among the
    container's groups. The service's user must be able to read them, no other user."""
    pod = manifests.pod["spec"]["securityContext"]
    container = manifests.container.get("securityContext", {})
    uid = container.get("runAsUser", pod.get("runAsUser"))
    fs_group = pod.get("fsGroup")
    groups = {
        container.get("runAsGroup", pod.get("runAsGroup")),
        fs_group,
        *pod.get("supplementalGroups", []),
    }
    assert uid not in (None, 0)
    for path, (_, volume) in manifests.secret_volumes().items():
        for item in volume.get("items", []):
            mode = item.get("mode", volume.get("defaultMode", 0o644)) | (0o440 if fs_group is not None else 0)
            where = f"{path}/{item['path']} (mode {mode:o})"
            group = fs_group if fs_group is not None else 0
            assert mode & 0o004 or (mode & 0o040 and group in groups), f"{where}: uid {uid} cannot read it"
            assert not mode & 0o007, f"{where}: readable by any user"
            assert not mode & 0o333, f"{where}: writable or executable"


@pytest.mark.parametrize("manifests", SECURED_VARIANTS, indirect=True)
def test_the_service_reads_its_credentials_from_the_mounted_files(manifests: Manifests, settings: Settings):
    kafka = settings.kafka
    assert kafka.security_protocol == PROTOCOLS[manifests.security]
    assert kafka.ssl_endpoint_identification
    files = {name: getattr(kafka, name) for name in KafkaSettings.model_fields if name.endswith("_file")}
    assert kafka.ssl_ca_file is not None, "a private CA: the component's point"
    for name, path in files.items():
        secret = name.removesuffix("_file")
        if path is not None and secret in KafkaSettings.model_fields:
            assert getattr(kafka, secret).get_secret_value() == path.read_text().rstrip("\r\n"), name
    if kafka.security_protocol.startswith("SASL_"):
        assert kafka.sasl_mechanism in KEDA_SASL
        assert kafka.sasl_username == manifests.secret_data["username"]
        assert kafka.sasl_password is not None
    else:
        assert (kafka.sasl_mechanism, kafka.sasl_username, kafka.sasl_password) == (None, None, None)
        assert kafka.ssl_cert_file is not None and kafka.ssl_key_file is not None
    assert kafka.client_config()["ssl.ca.location"] == str(kafka.ssl_ca_file)


@pytest.mark.parametrize("manifests", SECURED_VARIANTS, indirect=True)
def test_the_example_secret_is_the_one_the_pod_and_keda_read(manifests: Manifests):
    secret = manifests.secret
    assert secret is not None
    kubernetes_validate.validate(secret, K8S_VERSION, strict=True)
    assert secret["metadata"]["name"] == CREDENTIALS_SECRET, "a name suffix would miss the pod's reference"
    assert secret["metadata"]["namespace"] == manifests.one("Namespace")["metadata"]["name"]
    assert secret.get("type", "Opaque") == "Opaque"
    refs = [var["valueFrom"].get("secretKeyRef") for var in manifests.container["env"] if "valueFrom" in var]
    read = set(manifests.secret_files().values()) | {ref["key"] for ref in refs if ref}
    for auth in manifests.of_kind("TriggerAuthentication"):
        read |= {target["key"] for target in auth["spec"]["secretTargetRef"]}
    assert set(manifests.secret_data) == read, "keys that nothing reads, or keys missing"


@pytest.mark.parametrize("security", sorted(PROTOCOLS))
def test_the_example_secret_files_stay_out_of_git(security: str):
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an unpacked archive): git has no ignore rules to ask")
    directory = (K8S / "components" / security / "secret").relative_to(ROOT)
    (generator,) = yaml.safe_load((ROOT / directory / "kustomization.yaml").read_text())["secretGenerator"]
    files = [str(directory / entry.split("=")[-1]) for entry in generator["files"]]
    kept = str(directory / "kustomization.yaml")
    proc = subprocess.run(
        [git, "check-ignore", "--no-index", *files, kept],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert sorted(proc.stdout.split()) == sorted(files), "ignore the secret files, keep the kustomization"


@pytest.mark.parametrize("manifests", KEDA_VARIANTS, indirect=True)
def test_keda_connects_to_kafka_as_the_service_does(manifests: Manifests, settings: Settings):
    """The same protocol, and the same user, password, CA and certificate: the same keys of the same Secret
    that the pod reads. KEDA refuses `tls` or `sasl` given both in the trigger and the authentication."""
    (trigger,) = manifests.one("ScaledObject")["spec"]["triggers"]
    meta, kafka = trigger["metadata"], settings.kafka
    assert set(meta) <= KEDA_KAFKA_METADATA, f"not read by KEDA: {sorted(set(meta) - KEDA_KAFKA_METADATA)}"
    tls = kafka.security_protocol in ("SSL", "SASL_SSL")
    assert meta.get("tls", "disable") == ("enable" if tls else "disable")
    sasl = KEDA_SASL[kafka.sasl_mechanism] if kafka.security_protocol.startswith("SASL_") else "none"
    assert meta.get("sasl", "none") == sasl
    if "authenticationRef" not in trigger:
        assert kafka.security_protocol == "PLAINTEXT", "KEDA would connect without credentials"
        assert not manifests.of_kind("TriggerAuthentication")
        return
    ref = trigger["authenticationRef"]
    assert ref.get("kind", "TriggerAuthentication") == "TriggerAuthentication"
    (auth,) = [a for a in manifests.of_kind("TriggerAuthentication") if a["metadata"]["name"] == ref["name"]]
    targets = {t["parameter"]: t for t in auth["spec"]["secretTargetRef"]}
    assert set(targets) <= KEDA_KAFKA_AUTH, f"not read by KEDA: {sorted(set(targets) - KEDA_KAFKA_AUTH)}"
    assert not set(targets) & set(meta)
    assert {t["name"] for t in targets.values()} == {CREDENTIALS_SECRET}
    for parameter, field in KEDA_AUTH_SETTINGS.items():
        key = targets[parameter]["key"] if parameter in targets else None
        assert key == _secret_key_of(manifests, field), f"KEDA's {parameter} is not the service's {field}"
    if tls:
        assert "ca" in targets, "KEDA would not trust the brokers' certificates"


# --- a backfill: jobs/backfill -------------------------------------------------------------------------

BACKFILL = K8S / "jobs" / "backfill"
# Kubernetes sets it in every pod of an Indexed Job; `$(NAME)` in the arguments expands a container variable.
INDEX_VARIABLE = "JOB_COMPLETION_INDEX"
VARIABLE_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
BACKFILL_KINDS = {"Job", "ConfigMap", "Service", "ServiceMonitor", "NetworkPolicy"}
BACKFILL_METRICS = {"microbatch_backfill_range_offsets", "microbatch_backfill_read_offsets"}


@pytest.fixture(scope="module")
def job() -> Manifests:
    """jobs/backfill as committed: the Job, and what it takes from the base (it mirrors overlays/cpu)."""
    return Manifests(Variant("cpu"), _kustomize(_kubectl(), BACKFILL), workload="Job")


@pytest.fixture
def service(render: Callable[[Variant], Manifests]) -> Manifests:
    """overlays/cpu as committed: the service the backfill runs beside."""
    return render(Variant("cpu"))


@pytest.fixture
def job_settings(job: Manifests, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings as each of the Job's pods loads them."""
    for name, value in job.environment().items():
        monkeypatch.setenv(name, value)
    return load_settings()


def _job_argv(job: Manifests, index: int) -> list[str]:
    """The container's arguments as pod ``index`` gets them: the kubelet expands ``$(JOB_COMPLETION_INDEX)``.
    Fails on any other reference, and on a ``$`` left over (``$VAR``, ``${VAR}``: no shell expands them)."""
    args = job.container["args"]
    referenced = {name for arg in args for name in VARIABLE_REFERENCE.findall(arg)}
    assert referenced == {INDEX_VARIABLE}, f"expected $({INDEX_VARIABLE}) alone, found {sorted(referenced)}"
    argv = [VARIABLE_REFERENCE.sub(str(index), arg) for arg in args]
    assert not any("$" in arg for arg in argv), f"left unexpanded: {argv}"
    return argv


def _on_exit(job_spec: dict[str, Any], code: int) -> str:
    """The podFailurePolicy's action when the container exits with ``code``: the first rule that matches,
    ``Count`` (against the index's retries) when none does."""
    for rule in job_spec.get("podFailurePolicy", {}).get("rules", []):
        codes = rule.get("onExitCodes")
        if codes is None or codes.get("containerName", CONTAINER) != CONTAINER:
            continue
        if (code in codes["values"]) == (codes["operator"] == "In"):
            return str(rule["action"])
    return "Count"


def test_backfill_objects_are_valid_and_live_in_the_namespace(job: Manifests, service: Manifests):
    namespace = service.one("Namespace")["metadata"]["name"]
    assert {o["kind"] for o in job.objects} == BACKFILL_KINDS
    for obj in job.objects:
        _validate(obj)
        assert obj["metadata"].get("namespace") == namespace, f"{obj['kind']}/{obj['metadata']['name']}"


def test_backfill_leaves_the_services_objects_alone(job: Manifests, service: Manifests):
    """Every object is the backfill's own: one named as the overlay's would be overwritten by
    ``kubectl apply -k`` and deleted by ``kubectl delete -k``. No selector of the service takes the Job's
    pods in: the PodDisruptionBudget (its maxUnavailable cannot count a Job's pods and would block every
    drain), the HPA (it averages the CPU of the Deployment's selector), the Service, the NetworkPolicy."""
    theirs = {(o["kind"], o["metadata"]["name"]) for o in service.objects}
    ours = {(o["kind"], o["metadata"]["name"]) for o in job.objects}
    assert not ours & theirs, f"shared with overlays/cpu: {sorted(ours & theirs)}"
    labels = job.pod["metadata"]["labels"]
    selectors = {
        "Deployment": service.deployment["spec"]["selector"],
        "PodDisruptionBudget": service.one("PodDisruptionBudget")["spec"]["selector"],
        "Service": service.one("Service")["spec"]["selector"],
        "NetworkPolicy": service.one("NetworkPolicy")["spec"]["podSelector"],
    }
    taken = [kind for kind, selector in selectors.items() if _selects(selector, labels)]
    assert not taken, f"the service's {taken} select the backfill's pods"


def test_backfill_is_an_indexed_job_whose_failed_indexes_are_retried(job: Manifests, service: Manifests):
    spec = job.one("Job")["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["parallelism"] == spec["completions"]
    assert 1 <= spec["completions"] <= service.partitions, "an index without a partition exits 2"
    assert job.pod["spec"]["restartPolicy"] == "Never"
    assert spec["backoffLimitPerIndex"] >= 1, "an incomplete index (exit 1) must get a pod that resumes it"
    assert spec.get("backoffLimit", spec["backoffLimitPerIndex"]) >= spec["backoffLimitPerIndex"]
    assert spec["podReplacementPolicy"] == "Failed", "two pods of one index would read the same partitions"
    assert spec["ttlSecondsAfterFinished"] > 0
    # Incomplete or stopped (1) and no broker or topic yet (3) are retried; a bad flag or setting is not.
    assert _on_exit(spec, MicrobatchError.exit_code) == "Count"
    assert _on_exit(spec, EnvironmentNotReadyError.exit_code) == "Count"
    assert _on_exit(spec, UsageError.exit_code) == _on_exit(spec, ConfigError.exit_code) == "FailJob"
    disrupted = {"type": "DisruptionTarget", "status": "True"}
    rules = spec["podFailurePolicy"]["rules"]
    evicted = [rule["action"] for rule in rules if disrupted in rule.get("onPodConditions", [])]
    assert evicted == ["Ignore"], "a drained pod committed and stopped: not its index's failure"


def test_backfill_arguments_parse_and_give_each_partition_to_one_pod(
    job: Manifests, service: Manifests, job_settings: Settings
):
    """Every pod's arguments parse with the command's own parser; all share one --job (one group, each pod
    committing only its partitions), --from, --to and --output; together the indexes read every partition
    of the input topic once."""
    assert "command" not in job.container, "the image's entrypoint is microbatch"
    spec = job.one("Job")["spec"]
    readers: dict[int, list[int]] = {p: [] for p in range(service.partitions)}
    parsed = []
    for index in range(spec["completions"]):
        args = cli.parser("backfill").parse_args(_job_argv(job, index))
        assert args.command == "backfill"
        chosen = parse_partitions("--partitions", args.partitions)
        for partition, indexes in readers.items():
            if chosen(partition):
                indexes.append(index)
        parsed.append(args)
    wrong = {p: indexes for p, indexes in readers.items() if len(indexes) != 1}
    assert not wrong, f"partition -> the indexes that read it: {wrong}"
    assert len({(a.job, a.start, a.end, a.output) for a in parsed}) == 1, "one backfill, not several"
    args = parsed[0]
    settings = backfill_settings(job_settings, args.job, args.output)  # a bad --job or --output raises
    assert settings.kafka.group_id == f"{job_settings.kafka.group_id}-backfill-{args.job}"
    assert settings.output.topic not in {job_settings.output.topic, job_settings.dlq.topic}
    now_ms = time.time_ns() // 1_000_000
    start = parse_bound("--from", args.start, lambda: now_ms)
    end = parse_bound("--to", args.end, lambda: now_ms)
    if isinstance(start, Time) and isinstance(end, Time):
        assert start.ms < end.ms, "an empty range"


def test_backfill_runs_the_services_image_settings_and_pod(
    job: Manifests, service: Manifests, job_settings: Settings
):
    assert job.container["image"] == service.container["image"]
    assert job.config == service.config, "microbatch.env, merged as overlays/cpu merges it"
    assert job.container["env"] == service.container["env"]
    assert job.environment() == service.environment()
    configmap = job.one("ConfigMap")["metadata"]["name"]
    assert job.container["envFrom"] == [{"configMapRef": {"name": configmap}}]
    unknown = sorted(n for n in job.environment() if n.startswith("MICROBATCH_") and not _is_known_setting(n))
    assert not unknown, f"not settings of the service: {unknown}"
    require_topics(job_settings)
    for key in ("imagePullPolicy", "ports", "resources", "securityContext", "volumeMounts"):
        assert job.container.get(key) == service.container.get(key), key
    for key in (
        "serviceAccountName",
        "automountServiceAccountToken",
        "enableServiceLinks",
        "securityContext",
        "terminationGracePeriodSeconds",
        "volumes",
    ):
        assert job.pod["spec"].get(key) == service.pod["spec"].get(key), key


def test_backfill_serves_its_progress_on_the_metrics_port(job: Manifests, job_settings: Settings):
    """Prometheus scrapes the pods while they run (the backfill's gauges among the metrics); the probes
    ask /healthz, which answers 200 through start-up and 503 only once the read loop is stuck."""
    assert job_settings.metrics.enabled
    assert job_settings.metrics.host in {"0.0.0.0", "::"}
    _assert_scraped(job, job_settings)
    _assert_network_policy(job, job_settings)
    container = job.container
    assert "readinessProbe" not in container, "nothing is routed to the pods"
    for probe in ("startupProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert (get["path"], get.get("scheme", "HTTP")) == ("/healthz", "HTTP"), probe
        assert _port_number(container, get["port"]) == job_settings.metrics.port, probe
    registry = CollectorRegistry()
    Progress(1, registry, stream=io.StringIO())
    assert {family.name for family in registry.collect()} >= BACKFILL_METRICS
