"""What the Kafka clients tell the rest of the service about themselves, as one value. Pure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from service.flow.records import Access, no_access_report


def _ignore(_flag: bool) -> None:
    """The default of a flag hook: report nothing."""


@dataclass(frozen=True, slots=True)
class ClientHooks:
    """The clients' observers, each told from inside the client's own calls (``consume``, ``poll``,
    ``close``), never from another thread.

    ``brokers(up)``: whether any broker is reachable, False as soon as librdkafka reports all brokers
    down, True when its next statistics show one up (the consumer's, every 5 s). ``access(permission,
    refused)``: a permission refused, or seen to work again (``kafka/access.py``). ``commit(ok)``: every
    auto-commit librdkafka reports. The producer tells only ``access``; the consumer tells all three."""

    brokers: Callable[[bool], None] = _ignore
    access: Access = no_access_report
    commit: Callable[[bool], None] = _ignore


NO_HOOKS = ClientHooks()
"""Nothing is told anything (tests, tools)."""
