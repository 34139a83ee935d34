"""The loaded model: the one object that serves a batch. Pure (its engine is behind ``EngineLike``).

This class is responsible for: holding what serving one model takes (the engine that runs batches, the
processor that feeds it and reads its outputs, the processor's capabilities resolved once, how results
name the model, and the rows assembled for it), and the one batch path every user of a model runs
(serving, ``check --sample``, the drain ceiling, the warm-up): pre-process, run, post-process, one result
per item. A model that changes while the service runs replaces this object whole, between batches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec

from service.errors import BatchMismatchError
from service.flow.ports import EngineLike
from service.processors.base import Capabilities, Processor, ResultOrError, Tensors


class ModelRef(msgspec.Struct, frozen=True):
    """How results name the model that produced them."""

    name: str
    version: str
    provider: str


@dataclass(frozen=True, slots=True)
class RowPlan:
    """Rows to assemble for the model (``MICROBATCH_ASSEMBLE__*``): its features in its order, those a row
    must have to be scored, and the typical values that may fill the others."""

    features: tuple[str, ...]
    required: tuple[str, ...]
    typical: Mapping[str, float]


E = TypeVar("E", bound=EngineLike)
E_co = TypeVar("E_co", bound=EngineLike, covariant=True)


@dataclass(frozen=True, slots=True)
class Model(Generic[E_co]):
    """What the service serves: ``engine`` runs batches, ``processor`` feeds it (``caps``: what it offers
    beyond the required methods, looked up once: :meth:`of`), ``ref`` labels results; ``rows`` says how to
    assemble its items from agents' points (None: one item per message or record)."""

    engine: E_co
    processor: Processor
    ref: ModelRef
    caps: Capabilities
    rows: RowPlan | None = None

    @staticmethod
    def of(engine: E, processor: Processor, ref: ModelRef, rows: RowPlan | None = None) -> Model[E]:
        """The model with its processor's capabilities looked up (once, here)."""
        return Model(engine, processor, ref, Capabilities.of(processor), rows)

    def score(self, items: list[Any]) -> list[ResultOrError]:
        """One batch, whole, on this thread: exactly one result per item, in order. Raises what the
        processor or the engine raise, and BatchMismatchError for a result count that does not match."""
        return self.postprocess(self.engine.run(self.processor.preprocess(items)), items)

    def postprocess(self, outputs: Tensors, items: Sequence[Any]) -> list[ResultOrError]:
        """The processor's results for ``items``; BatchMismatchError unless there is one per item."""
        results = self.processor.postprocess(outputs, items)
        if len(results) != len(items):
            raise BatchMismatchError(f"{len(results)} results for {len(items)} inputs")
        return results

    def samples(self, count: int) -> list[Any]:
        """``count`` copies of the processor's known-good sample, prepared as consumed items are."""
        return self.caps.prepare([self.processor.sample()] * count)
