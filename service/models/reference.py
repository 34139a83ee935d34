"""The reference models shipped in this folder, their manifest, and how a setting picks the model to serve."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from service.config import ModelSettings
from service.errors import ConfigError

MODELS_DIR = Path(__file__).parent
MANIFEST = MODELS_DIR / "manifest.json"


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """The model file to load and the name/version results are labelled with (None: from metadata)."""

    path: Path
    name: str | None
    version: str | None


def manifest() -> dict[str, Any]:
    """The committed manifest: ``{"models": {name: {file, sha256, version, ...}}}``."""
    found: dict[str, Any] = msgspec.json.decode(MANIFEST.read_bytes())
    return found


def reference_names() -> list[str]:
    return sorted(manifest()["models"])


def reference_file(name: str) -> Path | None:
    """The committed file of the reference model ``name`` (as ``models list`` shows it); None for a name
    that is not one."""
    entry = manifest()["models"].get(name)
    return None if entry is None else MODELS_DIR / entry["file"]


def choose_model(settings: ModelSettings) -> ModelChoice:
    """``MICROBATCH_MODEL__PATH`` serves the user's file; otherwise ``MICROBATCH_MODEL__NAME`` must name a
    reference model. Raises ConfigError naming the setting."""
    if settings.path is not None:
        return ModelChoice(settings.path, settings.name, settings.version)
    name_env, path_env = settings.env("name"), settings.env("path")
    if not settings.name:
        raise ConfigError(name_env, f"set a reference model ({', '.join(reference_names())}) or {path_env}")
    entry = manifest()["models"].get(settings.name)
    if entry is None:
        raise ConfigError(
            name_env, f"not a reference model; choose one of {reference_names()} or set {path_env}"
        )
    return ModelChoice(MODELS_DIR / entry["file"], settings.name, settings.version or entry.get("version"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def verify() -> dict[str, bool]:
    """Check every committed file against the manifest's sha256: ``{file: matches}``."""
    checks: dict[str, bool] = {}
    for entry in manifest()["models"].values():
        for name, digest in entry.get("files", {entry["file"]: entry["sha256"]}).items():
            path = MODELS_DIR / name
            checks[name] = path.is_file() and sha256(path) == digest
    return checks
