"""A processor that fails on demand, for the chaos tests: the service loads it with
``MICROBATCH_MODEL__PROCESSOR=tests.support.faulty:FaultyProcessor`` (it runs from the repository root, so
this module is importable) next to the ``metrics-anomaly`` model.

It is the ``features`` processor plus one optional string field of the event, ``"fault"``:

- ``"raise"``: ``preprocess`` raises whenever its batch holds this item, so the service has to split the
  batch down to the item alone, which then gets ``inference_error``; every other item gets its result.
- ``"nan"``: ``postprocess`` replaces this item's score with NaN, so it gets ``invalid_output``.
- ``"slow"``: ``preprocess`` sleeps :data:`SLOW_S` (far beyond the batch window) for a batch holding it;
  the item and its batch-mates still get results, later.
- ``"crash"``: ``preprocess`` SIGKILLs its own process for a batch holding it: a record that kills the
  service every time it is processed.

Any other value, or no ``fault`` field, is a healthy event.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence

import msgspec
import numpy as np

from service.processors.base import ModelInfo, ResultOrError, Tensors
from service.processors.features import FeaturesProcessor

SLOW_S = 1.5
FAULTS = ("raise", "nan", "slow", "crash")

Item = tuple[tuple[float, ...], str | None]


class _Fault(msgspec.Struct):
    fault: str | None = None


class InjectedFault(RuntimeError):
    """What a ``"raise"`` item makes ``preprocess`` raise."""


class FaultyProcessor:
    def __init__(self, info: ModelInfo) -> None:
        self._inner = FeaturesProcessor(info)
        self._fault_decoder = msgspec.json.Decoder(_Fault)

    def parse(self, value: bytes) -> Item:
        row = self._inner.parse(value)  # raises InvalidMessage for bad input, like the real processor
        try:
            fault = self._fault_decoder.decode(value).fault
        except msgspec.ValidationError:  # "fault" present but not a string: just a healthy event
            fault = None
        return row, fault

    def preprocess(self, items: Sequence[Item]) -> Tensors:
        faults = [fault for _row, fault in items]
        if "raise" in faults:
            raise InjectedFault(f"injected fault: a batch of {len(items)} holds a 'raise' item")
        if "slow" in faults:
            time.sleep(SLOW_S)
        if "crash" in faults:
            os.kill(os.getpid(), signal.SIGKILL)
        return self._inner.preprocess([row for row, _fault in items])

    def postprocess(self, outputs: Tensors, items: Sequence[Item]) -> list[ResultOrError]:
        # From the items, not from state kept since preprocess: batches are pipelined (see Processor).
        poisoned = [i for i, (_row, fault) in enumerate(items) if fault == "nan"]
        if poisoned:
            outputs = dict(outputs)
            for name, array in outputs.items():
                if array.dtype.kind == "f":
                    with_nan = array.copy()
                    with_nan[poisoned] = np.nan
                    outputs[name] = with_nan
        return self._inner.postprocess(outputs, [row for row, _fault in items])

    def sample(self) -> Item:
        return self._inner.sample(), None
