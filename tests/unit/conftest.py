"""Shared fixtures of the unit tier: a fake clock, an isolated environment and small factories."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog

from service.flow.records import Headers, InputRecord
from service.processors.base import ModelInfo
from tests.support.fakes import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def restored_logging() -> Iterator[None]:
    """A test that runs ``cli.main`` configures structlog with the stderr of that moment (pytest's capture,
    closed after the test); later tests must not log into it."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No MICROBATCH_* variable of the caller and no stray ``.env`` in the cwd can reach a test."""
    for name in list(os.environ):
        if name.upper().startswith("MICROBATCH_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


MakeRecord = Callable[..., InputRecord]


@pytest.fixture
def make_record() -> MakeRecord:
    """Build an InputRecord; every field has a harmless default."""

    def make(
        value: bytes | None = b"{}",
        *,
        topic: str = "in",
        partition: int = 0,
        offset: int = 0,
        key: bytes | None = None,
        headers: Headers | None = None,
        timestamp_ms: int | None = None,
        received: float = 0.0,
    ) -> InputRecord:
        return InputRecord(topic, partition, offset, key, value, headers, timestamp_ms, received)

    return make


@pytest.fixture
def features_info() -> Callable[..., ModelInfo]:
    """A ModelInfo for the ``features`` processor: one input named ``features``."""

    def make(
        features: list[str] | None = None,
        *,
        metadata: dict[str, str] | None = None,
        input_names: tuple[str, ...] = ("features",),
        output_names: tuple[str, ...] = ("score",),
    ) -> ModelInfo:
        settings = {"features": features} if features is not None else {}
        return ModelInfo(
            name="test-model",
            model_dir=Path("."),
            input_names=input_names,
            output_names=output_names,
            metadata=metadata or {},
            settings=settings,
        )

    return make
