"""Did every assembled row come out, answering every message that fed it? The service's own format and
assembler, replayed offline over the inputs in offset order with every row left open to the end, say which
messages each row should list; the results say which they did. The demo and the tests check rows with it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec

from service.assemble import Assembler, Closed, rules_for
from service.config import ModelSettings
from service.engine.session import Engine
from service.formats import load_format
from service.models.reference import choose_model

M = TypeVar("M")
Coord = tuple[int, int]  # (partition, offset)
RowKey = tuple[str, int]  # (key, the interval's time in ms), as results give them


def model_metadata(name: str) -> dict[str, str]:
    """A reference model's ``microbatch.*`` metadata."""
    engine = Engine(choose_model(ModelSettings(name=name)).path, ["CPUExecutionProvider"], 1, False)
    return dict(engine.metadata)


def features_of(name: str) -> list[str]:
    return msgspec.json.decode(model_metadata(name)["microbatch.features"])


def replay(
    inputs: Iterable[tuple[M, bytes | None]],
    fmt: str,
    features: Sequence[str],
    interval_s: float,
    required: Sequence[str] = (),
) -> list[Closed[M]]:
    """The rows the service's format and assembler make of ``inputs`` (an id and a value each), in order,
    every row left open until all inputs are in: no time limit, no late points."""
    now = [0.0]
    rows: Assembler[M] = Assembler(
        rules_for(features),
        required,
        key=("host",),
        interval_s=interval_s,
        max_wait_s=1.0,
        grace_s=1.0,
        fill="zero",
        typical={},
        clock=lambda: now[0],
    )
    reader = load_format(fmt, metrics=True)
    for ident, value in inputs:
        try:
            points = [p for p in reader.split(value or b"") if isinstance(p, dict)]
        except Exception:  # unreadable: the service dead-letters it
            continue
        rows.add(ident, points)
    now[0] = float("inf")
    return rows.due()


def expected_rows(
    inputs: Iterable[tuple[Coord, bytes | None]],
    fmt: str,
    features: Sequence[str],
    interval_s: float,
    required: Sequence[str] = (),
) -> dict[RowKey, set[Coord]]:
    """The messages each row should list: every message with a point some feature reads (with a value and
    a host), by the row of its host and interval. Rows without every ``required`` feature are left out:
    they close incomplete, unanswered by design."""
    return {
        (row.key, round(row.time * 1000)): set(row.sources)
        for row in replay(inputs, fmt, features, interval_s, required)
        if row.scored
    }


def listed(result: dict[str, Any], topic: str) -> set[Coord]:
    """The (partition, offset) of every message of ``topic`` a row's result says it answers."""
    prefix = f"{topic}["
    return {
        (int(lane[len(prefix) : -1]), offset)
        for lane, offsets in result["row"]["inputs"]["offsets"].items()
        if lane.startswith(prefix)
        for offset in offsets
    }


@dataclass
class RowCheck:
    """``whole``: rows with a result that lists exactly their messages; ``partial``: rows whose every
    result lists only some (a restart re-read part of them); ``missing``: rows without any result;
    ``unanswered``: messages that fed a row but no result lists; ``strays``: listed messages that feed
    another row or none; ``duplicates``: results beyond one per row."""

    rows: int = 0
    whole: int = 0
    partial: int = 0
    missing: list[RowKey] = field(default_factory=list)
    unanswered: int = 0
    strays: int = 0
    duplicates: int = 0

    @property
    def ok(self) -> bool:
        return not self.missing and not self.unanswered and not self.strays


def check_rows(expected: dict[RowKey, set[Coord]], results: Iterable[dict[str, Any]], topic: str) -> RowCheck:
    """Compare what the rows should list with what their results list."""
    seen: dict[RowKey, list[set[Coord]]] = {}
    for result in results:
        row = result["row"]
        seen.setdefault((row["key"], row["time_ms"]), []).append(listed(result, topic))
    report = RowCheck(rows=len(expected))
    answered: Counter[Coord] = Counter()
    for key, lists in seen.items():
        report.duplicates += len(lists) - 1
        want = expected.get(key, set())
        for got in lists:
            report.strays += len(got - want)
            answered.update(got & want)
    for key, want in expected.items():
        results_of = seen.get(key)
        if not results_of:
            report.missing.append(key)
        elif any(got == want for got in results_of):
            report.whole += 1
        else:
            report.partial += 1
        report.unanswered += sum(1 for coord in want if not answered[coord])
    return report
