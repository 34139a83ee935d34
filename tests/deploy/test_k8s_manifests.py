"""Static checks of the Kubernetes manifests (``deploy/k8s``), no cluster involved.

Each overlay is rendered with ``kubectl kustomize``, with the KEDA component it ships with and with the HPA
component swapped in as docs/DEPLOY.md describes. Every rendered object must be valid against its API
schema (built-in kinds: the Kubernetes OpenAPI schemas of kubernetes-validate, strict; the CRDs: the
schemas vendored under tests/deploy/schemas/), and the manifests must agree with the service: its
settings, its HTTP port and probe paths, its drain time, and the consumer group and topic the autoscaler
watches.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from service.config import Settings, load_settings, require_topics

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
SCHEMAS = ROOT / "tests" / "deploy" / "schemas"

# The newest Kubernetes schemas the dev dependency (kubernetes-validate>=1.31) is sure to ship.
K8S_VERSION = "1.31"
CRD_FILES = ("keda.sh_scaledobjects.yaml", "monitoring.coreos.com_servicemonitors.yaml")

IMAGE = "ghcr.io/microbatch/microbatch"
CONTAINER = "microbatch"
PARTITIONS_ANNOTATION = "microbatch/input-partitions"
CREDENTIALS_SECRET = "microbatch-kafka"
# docs/DEPLOY.md: the service needs the flush timeout plus about 15 s to drain after SIGTERM.
DRAIN_MARGIN_S = 15
# Model load, warm-up and group join take 10-30 s on top of the wait for a broker.
STARTUP_WORK_S = 30

# variant -> (overlay, autoscaler component)
VARIANTS = {
    "cpu": ("cpu", "keda"),
    "gpu": ("gpu", "keda"),
    "cpu-hpa": ("cpu", "hpa"),
    "gpu-hpa": ("gpu", "hpa"),
}
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
    """One rendering of an overlay: its objects and lookups into them."""

    overlay: str
    autoscaler: str
    objects: list[dict[str, Any]]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        found = self.of_kind(kind)
        assert len(found) == 1, f"expected one {kind}, found {len(found)}"
        return found[0]

    @property
    def deployment(self) -> dict[str, Any]:
        return self.one("Deployment")

    @property
    def pod(self) -> dict[str, Any]:
        return self.deployment["spec"]["template"]

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

    def environment(self) -> dict[str, str]:
        """What the container's environment would hold: the ConfigMap, then ``env`` (which wins). A Secret
        reference reads as a placeholder, a CPU limit reference as whole cores, as the kubelet has it."""
        env = dict(self.config)
        for var in self.container.get("env", []):
            if "value" in var:
                env[var["name"]] = var["value"]
                continue
            source = var["valueFrom"]
            if "secretKeyRef" in source:
                env[var["name"]] = "from-secret"
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


def _with_autoscaler(tree: Path, overlay: str, autoscaler: str) -> Path:
    """The overlay with its autoscaler component swapped, the way docs/DEPLOY.md tells users to."""
    kustomization = tree / "overlays" / overlay / "kustomization.yaml"
    text = kustomization.read_text()
    assert "../../components/keda" in text, f"{overlay}: the overlay no longer includes the KEDA component"
    kustomization.write_text(text.replace("../../components/keda", f"../../components/{autoscaler}"))
    return kustomization.parent


@pytest.fixture(scope="module")
def render(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Manifests]:
    """Render a variant (cached): the overlay as committed, or a copy with the HPA component instead."""
    kubectl = _kubectl()
    cache: dict[str, Manifests] = {}

    def rendered(variant: str) -> Manifests:
        if variant not in cache:
            overlay, autoscaler = VARIANTS[variant]
            directory = K8S / "overlays" / overlay
            if autoscaler != "keda":
                tree = tmp_path_factory.mktemp(variant) / "k8s"
                shutil.copytree(K8S, tree)
                directory = _with_autoscaler(tree, overlay, autoscaler)
            cache[variant] = Manifests(overlay, autoscaler, _kustomize(kubectl, directory))
        return cache[variant]

    return rendered


@pytest.fixture(params=list(VARIANTS))
def manifests(request: pytest.FixtureRequest, render: Callable[[str], Manifests]) -> Manifests:
    return render(request.param)


@pytest.fixture
def settings(manifests: Manifests, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The service's settings as the container would load them; raises ConfigError naming a bad variable."""
    for name, value in manifests.environment().items():
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


def test_every_object_is_valid_against_its_schema(manifests: Manifests):
    for obj in manifests.objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        crd = CRD_SCHEMAS.get((obj["apiVersion"], obj["kind"]))
        if crd is not None:
            try:
                jsonschema.validate(obj, crd)
            except jsonschema.ValidationError as exc:
                pytest.fail(f"{where}: {exc.message} at {'.'.join(map(str, exc.absolute_path))}")
            continue
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{where}: {exc.message} at {'.'.join(map(str, exc.absolute_path))}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            pytest.fail(f"{where}: {exc.message}; vendor its CRD under tests/deploy/schemas/ if it is one")


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


def test_credentials_come_from_an_optional_secret_that_is_not_committed(manifests: Manifests):
    refs = {
        var["name"]: var["valueFrom"]["secretKeyRef"]
        for var in manifests.container["env"]
        if "secretKeyRef" in var.get("valueFrom", {})
    }
    assert set(refs) == {"MICROBATCH_KAFKA__SASL_USERNAME", "MICROBATCH_KAFKA__SASL_PASSWORD"}
    for ref in refs.values():
        assert ref["name"] == CREDENTIALS_SECRET
        assert ref["optional"] is True
    assert not manifests.of_kind("Secret")
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
    assert target.get("kind", "Deployment") == "Deployment"
    assert maximum == manifests.partitions, "replicas beyond the partition count sit idle"
    assert 1 <= minimum <= maximum


@pytest.mark.parametrize(
    "manifests", [v for v, (_, scaler) in VARIANTS.items() if scaler == "keda"], indirect=True
)
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
