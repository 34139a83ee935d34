"""The reference models shipped in ``service/models/`` and how a setting picks the model to serve."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import msgspec

from service.config import ModelSettings
from service.errors import ConfigError

MODELS_DIR = Path(__file__).parent / "models"
MANIFEST = MODELS_DIR / "manifest.json"


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """The model file to load and the name/version results are labelled with (None: from metadata)."""

    path: Path
    name: str | None
    version: str | None


def manifest() -> dict:
    """The committed manifest: ``{"models": {name: {file, sha256, version, ...}}}``."""
    return msgspec.json.decode(MANIFEST.read_bytes())


def reference_names() -> list[str]:
    return sorted(manifest()["models"])


def choose_model(settings: ModelSettings) -> ModelChoice:
    """``MICROBATCH_MODEL__PATH`` serves the user's file; otherwise ``MICROBATCH_MODEL__NAME`` must name a
    reference model. Raises ConfigError naming the setting."""
    if settings.path is not None:
        return ModelChoice(settings.path, settings.name, settings.version)
    if not settings.name:
        raise ConfigError(
            "MICROBATCH_MODEL__NAME",
            f"set a reference model ({', '.join(reference_names())}) or MICROBATCH_MODEL__PATH",
        )
    entry = manifest()["models"].get(settings.name)
    if entry is None:
        raise ConfigError(
            "MICROBATCH_MODEL__NAME",
            f"{settings.name!r} is not a reference model; choose one of {reference_names()} "
            "or set MICROBATCH_MODEL__PATH",
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
