"""Fixtures shared by the integration tests (the broker and topic factory come from tests/conftest.py)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator

import pytest

from tests.support.harness import SERVICE_PARTITIONS, needs_installed
from tests.support.secured import Secured, start_secured


@pytest.fixture
def topics(topic_factory) -> dict[str, str]:
    """Fresh input (SERVICE_PARTITIONS partitions), output and dead-letter topics for one service run."""
    return {
        "in": topic_factory(partitions=SERVICE_PARTITIONS, prefix="in"),
        "out": topic_factory(partitions=SERVICE_PARTITIONS, prefix="out"),
        "dlq": topic_factory(partitions=1, prefix="dlq"),
    }


@pytest.fixture(scope="module")
def secured() -> Iterator[Secured]:
    """A secured broker of the module's own (tests/support/secured.py), stopped by PID at the end."""
    needs_installed(
        None if shutil.which("openssl") else "the secured broker needs openssl: apt-get install openssl"
    )
    broker = start_secured()
    try:
        yield broker
    finally:
        with contextlib.suppress(RuntimeError):
            broker.broker.sh("down")
        broker.oidc.stop()
