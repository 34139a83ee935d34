"""Static checks of the container files (no Docker engine runs in CI): they must match the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from service.cli import _parser
from service.config import load_settings, require_topics

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _env(service: dict) -> dict[str, str]:
    return {k: str(v) for k, v in (service.get("environment") or {}).items()}


@pytest.mark.parametrize("name", ["microbatch", "producer"])
def test_every_microbatch_variable_in_compose_is_a_valid_setting(compose, name, monkeypatch):
    env = _env(compose["services"][name])
    assert any(k.startswith("MICROBATCH_") for k in env)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()  # raises ConfigError naming any bad or unknown variable
    if name == "microbatch":
        require_topics(settings)
        assert settings.model.name == "metrics-anomaly"


def test_compose_commands_are_valid_cli_invocations(compose):
    for name in ("microbatch", "producer"):
        args = _parser().parse_args(compose["services"][name]["command"])
        assert args.command in {"run", "produce"}


def test_compose_creates_the_topics_the_service_uses(compose):
    script = " ".join(compose["services"]["topics"]["command"])
    env = _env(compose["services"]["microbatch"])
    for key in ("MICROBATCH_INPUT__TOPICS", "MICROBATCH_OUTPUT__TOPIC", "MICROBATCH_DLQ__TOPIC"):
        assert re.search(rf"\b{re.escape(env[key])}:\d+", script), key


def test_dockerfile_runs_as_non_root_without_torch():
    text = (ROOT / "Dockerfile").read_text()
    user = re.findall(r"^USER\s+(\S+)", text, re.MULTILINE)
    assert user and user[-1] not in {"root", "0"}
    install = [line for line in text.splitlines() if "pip install" in line and "--python" in line]
    assert install and all("[" not in line for line in install), "the image must not install extras (torch)"
    assert 'ENTRYPOINT ["microbatch"]' in text
