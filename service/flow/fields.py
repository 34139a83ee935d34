"""Watch the first events for the fields the processor reads, so that a misspelt field is one loud error at
once rather than thousands of quiet dead letters. Pure."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from service.formats import MISSING, lookup
from service.formats.paths import parse_paths

FIRST_EVENTS = 100
"""How many events are watched: a field none of them carries is reported."""
_NAMES_KEPT = 500  # field names remembered for the closest-name hint; events are not all alike
_DEPTH = 4  # nested levels named (``kubernetes.labels.app``)


class FieldWatch:
    """``see(fields)`` for each of the first ``events`` items (their named fields; ``{}`` for one that has
    none). Once that many are seen, ``report(field, closest)`` is called once for each configured field that
    none of them carried, with up to three of the field names they did carry, closest first."""

    def __init__(
        self, fields: Sequence[str], report: Callable[[str, list[str]], None], events: int = FIRST_EVENTS
    ) -> None:
        self._paths = parse_paths(fields)
        self._report = report
        self._left = events
        self._missing = {text for text, _path in self._paths}
        self._seen: dict[str, None] = {}

    @property
    def done(self) -> bool:
        return self._left <= 0

    def finish(self) -> None:
        """Report now, on the events seen so far (fewer than ``events``: a sample file)."""
        if self._left > 0:
            self._left = 0
            self._report_missing()

    def see(self, fields: Mapping[str, Any]) -> None:
        if self._left <= 0:
            return
        self._left -= 1
        if self._missing and fields:
            self._missing -= {t for t, path in self._paths if lookup(fields, path) is not MISSING}
            if len(self._seen) < _NAMES_KEPT:
                _names(fields, "", 1, self._seen)
        if self._left == 0:
            self._report_missing()

    def _report_missing(self) -> None:
        # A field the processor also reads is not the misspelling of another.
        configured = {text for text, _path in self._paths}
        seen = [name for name in self._seen if name not in configured]
        for text in sorted(self._missing):
            self._report(text, difflib.get_close_matches(text, seen, n=3))


def _names(fields: Mapping[str, Any], prefix: str, depth: int, into: dict[str, None]) -> None:
    for key, value in fields.items():
        name = f"{prefix}{key}"
        into.setdefault(name, None)
        if isinstance(value, Mapping) and depth < _DEPTH:
            _names(value, f"{name}.", depth + 1, into)
