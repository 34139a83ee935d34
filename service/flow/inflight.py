"""Batches handed to the inference thread, and the executor that runs inference inline instead.

ONNX Runtime releases the GIL while it computes, so one worker thread running ``engine.run`` lets the
loop consume, decode and pre-process the next batch meanwhile. Only ``engine.run`` runs on the worker;
everything else stays on the loop's thread, so no other state is shared.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from service.flow.ports import EngineLike, ExecutorLike
from service.flow.records import Decoded
from service.processors.base import Tensors


@dataclass(slots=True)
class InFlight:
    """One batch between hand-off and completion. ``prep_s`` is its pre-processing time; the future
    yields ``(outputs, run_s)``, so queueing behind another batch is not counted as its service time."""

    batch: list[Decoded]
    future: Future[tuple[Tensors, float]]
    prep_s: float
    padding: tuple[int, int] | None  # (real, padded) cost units, when items have a cost
    started: float  # when the batch was cut (its items' queue wait ends here)


def timed_run(engine: EngineLike, feeds: Tensors, clock: Callable[[], float]) -> tuple[Tensors, float]:
    """``engine.run`` and how long it took. Runs on the worker thread."""
    start = clock()
    outputs = engine.run(feeds)
    return outputs, clock() - start


class OffloadPolicy:
    """Whether the next batch goes to the inference thread, from how long inference has been taking.

    Overlap pays only when a batch computes for longer than a hand-off costs: a submit, a thread wake-up
    and the GIL passing back and forth (docs/BENCHMARKS.md, *What makes it fast*, has the figures). So batches
    run inline while the moving average of engine time stays under ``inline_below_s``, and go back to the
    thread once it passes ``offload_above_s`` (two thresholds, so it does not flap). It starts offloading.
    """

    def __init__(
        self, offload_above_s: float = 0.001, inline_below_s: float = 0.0005, weight: float = 0.2
    ) -> None:
        self.offload = True
        self.mean_s: float | None = None
        self._above, self._below, self._weight = offload_above_s, inline_below_s, weight

    def observe(self, run_s: float) -> None:
        """Fold in one batch's engine time."""
        self.mean_s = run_s if self.mean_s is None else self.mean_s + self._weight * (run_s - self.mean_s)
        if self.offload and self.mean_s < self._below:
            self.offload = False
        elif not self.offload and self.mean_s > self._above:
            self.offload = True


class Inline:
    """An executor that runs each call at once, on the caller's thread (``MICROBATCH_BATCH__PIPELINE_DEPTH``
    0, and deterministic unit tests)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args))
        except Exception as exc:
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True) -> None:
        pass


def executor_for(depth: int) -> ExecutorLike:
    """One worker thread when ``depth`` > 0 (more would only contend for the same cores), else inline."""
    if depth == 0:
        return Inline()
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="microbatch-engine")
