"""Inference: batches through the processor and the engine, finished in hand-off order.

This class is responsible for: pre-processing a batch on the loop's thread and handing it to the engine
(the inference thread, or inline when a hand-off would cost more than the overlap saves), at most
``depth`` batches at once; post-processing them in the order they were handed off; splitting a batch that
fails, so that only the items failing alone get ``inference_error``; and telling a broken runtime from a
bad item.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass

import structlog

from service.errors import EngineFailedError, InvalidMessage, Reason, is_out_of_memory
from service.flow.inflight import InFlight, Inline, OffloadPolicy, timed_run
from service.flow.model import Model
from service.flow.ports import EngineLike, ExecutorLike
from service.flow.records import Decoded
from service.processors.base import ResultOrError, Tensors

_log = structlog.get_logger("microbatch.inference")

Answer = tuple[Decoded, ResultOrError]
Padding = tuple[int, int] | None


@dataclass(slots=True)
class Finished:
    """A batch done: one answer per item in the batch's order, and what it cost.

    ``service_s`` is pre-process + model + post-process time (not time queued behind another batch);
    ``started`` is when the batch was cut; ``run_s`` its model time when it ran whole (None after a
    split); ``padding`` its (real, padded) cost units when items have a cost."""

    batch: list[Decoded]
    answers: list[Answer]
    service_s: float
    padding: Padding
    started: float
    run_s: float | None = None


class Inference:
    """Not thread-safe: one loop drives it; only ``engine.run`` ever runs on the executor's thread."""

    def __init__(
        self,
        model: Model[EngineLike],
        executor: ExecutorLike,
        depth: int,
        clock: Callable[[], float],
        on_split: Callable[[], None] = lambda: None,
        on_out_of_memory: Callable[[int], None] = lambda _size: None,
    ) -> None:
        """``on_split()``: a failed batch was split; ``on_out_of_memory(size)``: because a batch of
        ``size`` items ran out of memory (the batch size should drop for a while)."""
        self._model = model
        self._executor = executor
        self._inline = Inline()
        self._offload = OffloadPolicy()
        self._depth = max(1, depth)
        self._clock = clock
        self._on_split = on_split
        self._on_out_of_memory = on_out_of_memory
        self._inflight: deque[InFlight] = deque()

    def __len__(self) -> int:
        """Batches handed off and not finished yet."""
        return len(self._inflight)

    def full(self) -> bool:
        return len(self._inflight) >= self._depth

    def submit(self, batch: list[Decoded], padding: Padding) -> None:
        """Pre-process ``batch`` here and hand it to the engine. A batch whose pre-processing fails is
        queued as failed, to be split when its turn comes, so results still leave in batch order."""
        started = self._clock()
        try:
            feeds = self._model.processor.preprocess([d.item for d in batch])
        except Exception as exc:
            failed: Future[tuple[Tensors, float]] = Future()
            failed.set_exception(exc)
            self._inflight.append(InFlight(batch, failed, self._clock() - started, padding, started))
            return
        prep_s = self._clock() - started
        executor = self._executor if self._offload.offload else self._inline
        future = executor.submit(timed_run, self._model.engine, feeds, self._clock)
        self._inflight.append(InFlight(batch, future, prep_s, padding, started))

    def finished(self, timeout_s: float | None) -> Iterator[Finished]:
        """The batches that are done, in hand-off order, post-processed. Waits up to ``timeout_s`` (None:
        for ever, for every batch) for the oldest, then yields only those already done. Raises
        EngineFailedError when the runtime itself is broken."""
        while self._inflight:
            head = self._inflight[0]
            if not head.future.done():
                if timeout_s is not None and timeout_s <= 0:
                    return
                wait([head.future], timeout_s)
                if not head.future.done():
                    return
            self._inflight.popleft()
            begun = self._clock()
            run_s: float | None = None
            try:
                outputs, run_s = head.future.result()
                self._offload.observe(run_s)
                items = [d.item for d in head.batch]
                answers = list(zip(head.batch, self._model.postprocess(outputs, items), strict=True))
            except Exception as exc:
                answers = list(self._split(head.batch, exc))
            service_s = head.prep_s + (run_s or 0.0) + self._clock() - begun
            yield Finished(head.batch, answers, service_s, head.padding, head.started, run_s)
            timeout_s = 0.0

    def run_now(self, batch: list[Decoded], padding: Padding) -> Finished:
        """Run ``batch`` here, at once (the last batches before a commit)."""
        started = self._clock()
        answers = list(self._infer(batch))
        return Finished(batch, answers, self._clock() - started, padding, started)

    def shutdown(self, wait: bool) -> None:
        self._executor.shutdown(wait=wait)

    def _infer(self, batch: Sequence[Decoded]) -> Iterator[Answer]:
        """Yield (item, result) for every item, running the batch on this thread."""
        try:
            results = self._model.score([d.item for d in batch])
        except Exception as exc:
            yield from self._split(batch, exc)
            return
        yield from zip(batch, results, strict=True)

    def _split(self, batch: Sequence[Decoded], exc: Exception) -> Iterator[Answer]:
        """A batch failed with ``exc``: split it in halves and retry, so a failure (a bad item, or running
        out of GPU memory on a big batch) costs only the items that fail when run alone; those get
        ``inference_error``. Running out of memory is reported (``on_out_of_memory``), so the batches
        that follow are cut smaller. Raises EngineFailedError when the model fails on the processor's
        known-good sample as well: then the runtime is broken, not the item."""
        if len(batch) == 1:
            self._check_engine(exc)
            yield batch[0], InvalidMessage(Reason.INFERENCE_ERROR, f"{type(exc).__name__}: {exc}"[:500])
            return
        oom = is_out_of_memory(str(exc))
        _log.warning(
            "batch_failed_splitting",
            size=len(batch),
            out_of_memory=oom,
            error=f"{type(exc).__name__}: {exc}"[:300],
        )
        self._on_split()
        if oom:
            self._on_out_of_memory(len(batch))
        half = len(batch) // 2
        yield from self._infer(batch[:half])
        yield from self._infer(batch[half:])

    def _check_engine(self, item_error: Exception) -> None:
        try:
            self._model.score(self._model.samples(1))
        except Exception as exc:
            raise EngineFailedError(f"the model fails on a known-good sample too: {exc}") from item_error
