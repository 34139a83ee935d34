"""Sample values through the whole path with no Kafka: format, processor, model, result encoding. What
``microbatch check`` prints and ``MICROBATCH_MODEL__SAMPLE`` checks at start-up."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from service.config import ModelSettings, Settings
from service.errors import ConfigError, InvalidMessage, Reason
from service.flow.decode import Decoder
from service.flow.encode import result_record
from service.flow.fields import FieldWatch
from service.flow.inference import Inference
from service.flow.inflight import Inline
from service.flow.model import Model
from service.flow.ports import EngineLike
from service.flow.records import Decoded, InputRecord
from service.formats import Picker, load_format


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one item of sample line ``line`` (from 1) gave: a ``result`` as the service would write it, or a
    dead letter's ``reason`` and ``message``. ``index`` is the item's position when a value holds many."""

    line: int
    index: int | None = None
    result: dict[str, Any] | None = None
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Report:
    """Every sample's outcomes, in order, and hints: configured fields no sample carries, with the
    closest names they did carry, and the setting to fix."""

    outcomes: list[Outcome]
    hints: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.result is None]


Samples = list[tuple[int, bytes]]
"""``(line, value)``: each value with its line in the file, from 1."""


def read_samples(path: Path, whole: bool = False) -> Samples:
    """The values in ``path``: one per non-empty line (JSON lines, log lines, line protocol), or the whole
    file as one value (``whole``: a binary OTLP request)."""
    data = path.read_bytes()
    if whole:
        return [(1, data)]
    lines = data.split(b"\n")
    return [(n, line.rstrip(b"\r")) for n, line in enumerate(lines, 1) if line.strip()]


def run_samples(settings: Settings, model: Model[EngineLike], samples: Samples) -> Report:
    """Decode, batch (at ``MICROBATCH_BATCH__MAX_SIZE``), infer, post-process and encode the samples' values
    as the service would, through the service's own batch path (a failing batch is split until only the
    failing items remain). Never raises for a bad sample: it is an outcome; raises EngineFailedError when
    the model fails on its processor's own sample too (the runtime is broken, as the service says).
    Raises ConfigError naming ``MICROBATCH_ASSEMBLE__ENABLED`` for a model whose items are assembled rows
    (they need points over time: use ``microbatch verify`` on a topic)."""
    if model.rows is not None:
        raise ConfigError(
            settings.assemble.env("enabled"),
            "samples are read one item per value; assembled rows need agents' points over time "
            "(run the service and `microbatch verify` its topics)",
        )
    fields = model.caps.fields
    hints: list[str] = []
    setting = ModelSettings.env("features" if model.caps.features else "text_field")

    def hint(name: str, closest: list[str]) -> None:
        seen = f"; closest names seen: {', '.join(closest)}" if closest else ""
        hints.append(f"no sample carries field {name!r}{seen} (check {setting})")

    # Every item is watched; finish() reports once all are seen.
    watch = FieldWatch(fields, hint, events=sys.maxsize) if fields else None
    decoder = Decoder(
        load_format(settings.input.format),
        model.processor,
        model.caps,
        settings.input.max_value_bytes,
        Picker(settings.output.include_fields),
        watch,
    )
    # The offset is the line: outcomes say where each sample is in the file.
    records = [InputRecord("sample", 0, line, None, v, None, None, 0.0) for line, v in samples]
    accepted, rejected, _counts = decoder.decode(records)
    if watch is not None:
        watch.finish()  # a value may hold many items, or none
    outcomes = [Outcome(r.record.offset, r.index, None, r.reason.value, r.detail) for r in rejected]
    # The service's own batch path, run here: a batch the model fails on is split as the service splits it.
    inference = Inference(model, Inline(), 1, time.perf_counter)
    size = settings.batch.max_size
    for start in range(0, len(accepted), size):
        batch = accepted[start : start + size]
        answers = inference.run_now(batch, None).answers
        outcomes += [_outcome(d, _encoded(settings, model, d, r, len(batch))) for d, r in answers]
    outcomes.sort(key=lambda o: (o.line, o.index or 0))
    return Report(outcomes, hints)


def _encoded(
    settings: Settings, model: Model[EngineLike], decoded: Decoded, result: Any, batch_size: int
) -> dict[str, Any] | InvalidMessage:
    """The ``result`` as the service writes it: one JSON cannot hold is ``invalid_output`` there too."""
    if not isinstance(result, dict):
        return result  # type: ignore[no-any-return]
    try:
        record = result_record(
            decoded.record, settings.output.topic, model.ref, result, batch_size, 0, 0, decoded.index
        )
    except (TypeError, ValueError) as exc:
        return InvalidMessage(Reason.INVALID_OUTPUT, f"result cannot be encoded: {exc}")
    encoded: dict[str, Any] = msgspec.json.decode(record.value or b"")["result"]
    return encoded


def _outcome(decoded: Decoded, result: dict[str, Any] | InvalidMessage) -> Outcome:
    line, index = decoded.record.offset, decoded.index
    if isinstance(result, InvalidMessage):
        return Outcome(line, index, None, result.reason.value, result.detail)
    return Outcome(line, index, result)


def check_at_start(settings: Settings, model: Model[EngineLike]) -> None:
    """``MICROBATCH_MODEL__SAMPLE``: every sample must give a result, else ConfigError naming the setting,
    the first failing line, its reason and any field hint."""
    path = settings.model.sample
    if path is None:
        return
    report = run_samples(settings, model, read_samples(path))
    if not report.outcomes:
        raise ConfigError(settings.model.env("sample"), "the file holds no sample")
    if report.failed:
        first = report.failed[0]
        hints = f"; {'; '.join(report.hints)}" if report.hints else ""
        raise ConfigError(
            settings.model.env("sample"),
            f"{len(report.failed)} of {len(report.outcomes)} samples give no result; line {first.line}: "
            f"{first.reason}: {first.message}{hints}",
        )
