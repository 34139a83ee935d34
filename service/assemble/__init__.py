"""Row assembly: agents' data points -> one row per key (host) and interval. Pure.

``rules`` says how a feature comes from a row's series (the semantic-convention host metrics), ``rates``
turns cumulative counters into rates, ``rows`` keeps the open rows and closes them.
"""

from __future__ import annotations

from service.assemble.rates import Rates
from service.assemble.rows import Assembler, Closed, Fed, Fill
from service.assemble.rules import SEMCONV, Rule, Source, rules_for

__all__ = ["SEMCONV", "Assembler", "Closed", "Fed", "Fill", "Rates", "Rule", "Source", "rules_for"]
