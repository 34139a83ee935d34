"""Fixtures shared by the integration tests (the broker and topic factory come from tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.support.harness import SERVICE_PARTITIONS


@pytest.fixture
def topics(topic_factory) -> dict[str, str]:
    """Fresh input (SERVICE_PARTITIONS partitions), output and dead-letter topics for one service run."""
    return {
        "in": topic_factory(partitions=SERVICE_PARTITIONS, prefix="in"),
        "out": topic_factory(partitions=SERVICE_PARTITIONS, prefix="out"),
        "dlq": topic_factory(partitions=1, prefix="dlq"),
    }
