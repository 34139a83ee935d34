"""One sweep's measurements: batches cut from generated inputs, timed per size until a stop rule fires.

One batch's wall time is the processor's ``prepare`` (if it has one) + preprocess + ``Engine.run`` +
postprocess, i.e. what the service spends per batch apart from parsing, Kafka and the batch window.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import numpy as np
import structlog

from service.config import Settings
from service.engine import Engine, knee
from service.engine.knee import Point
from service.errors import InvalidMessage, is_out_of_memory
from service.processors import prepare
from service.tools.generate import EventGenerator

MIN_BATCHES = 5
"""Timed batches per size however long they take, so a percentile is never read off one sample."""
SEED = 1
POOL_SIZE = 4096
"""Generated events per sweep; batches cycle through them, so text batches mix realistic lengths."""


def processor_kind(settings: Settings, engine: Engine) -> str | None:
    """``features`` or ``text`` for a reference model (the generator knows its events), else None."""
    if settings.model.path is not None:
        return None
    return settings.model.processor or engine.metadata.get("microbatch.processor")


def input_pool(processor, kind: str | None) -> tuple[list, str]:
    """Items to cut batches from, and a line saying what they are.

    ``features``: generated metrics events; ``text``: generated log events; each encoded to JSON and parsed
    by the processor, exactly as a consumed message would be. Anything else, or events the processor
    rejects (settings that change the fields it reads), falls back on ``processor.sample()``.
    """
    if kind in ("features", "text"):
        generator = EventGenerator(seed=SEED)
        what = "metrics" if kind == "features" else "log"
        events = generator.metrics(POOL_SIZE) if kind == "features" else generator.logs(POOL_SIZE)
        try:
            items = [processor.parse(msgspec.json.encode(event)) for event in events]
            return items, f"{POOL_SIZE} generated {what} events (seed {SEED}), parsed by the processor"
        except InvalidMessage as exc:
            structlog.get_logger("microbatch.sweep").warning("generated_events_rejected", error=str(exc))
    return [processor.sample()], "the processor's sample() item, repeated"


def batches(pool: list[Any], size: int) -> Iterator[list[Any]]:
    """Endless batches of ``size`` consecutive items of ``pool``, wrapping around it."""
    ring = pool * (size // len(pool) + 2)  # any slice of `size` starting inside the pool fits
    offset = 0
    while True:
        yield ring[offset : offset + size]
        offset = (offset + size) % len(pool)


def sweep_sizes(engine, processor, pool, sizes, seconds, slo_ms, memory) -> tuple[list[dict], dict]:
    """Measure each size in turn until done or a stop rule fires. Returns (rows, stop).

    ``rows`` are the measured sizes in order (a size over the SLO is kept, a size that raised is not);
    ``stop`` is ``{"reason": "completed" | "slo" | "oom" | "error", "size", "detail"}``. ``memory`` is a
    :class:`DeviceMemory` or None.
    """
    from tqdm import tqdm

    rows: list[dict] = []
    stop = {"reason": "completed", "size": None, "detail": "every size was measured"}
    with tqdm(sizes, desc="sweep", unit="size", leave=False) as progress:
        for size in progress:
            progress.set_postfix_str(f"batch {size}")
            try:
                durations = measure(engine, processor, batches(pool, size), seconds)
            except Exception as exc:  # ONNX Runtime raises its own types; the message tells OOM apart
                reason = "oom" if is_out_of_memory(str(exc)) else "error"
                stop = {"reason": reason, "size": size, "detail": " ".join(str(exc).split())[:500]}
                break
            used = memory.used() if memory is not None else None
            row = _row(size, durations, used, slo_ms)
            rows.append(row)
            why = knee.stop_reason(point(row), slo_ms)
            if why:
                stop = {"reason": "slo", "size": size, "detail": why}
                break
    return rows, stop


def measure(engine, processor, source, seconds: float) -> list[float]:
    """Wall times in seconds of timed batches from ``source``, after one untimed warm-up batch (allocation,
    kernel choice): at least :data:`MIN_BATCHES`, and more until ``seconds`` have passed."""
    run_batch(engine, processor, next(source))
    gc.collect()  # a collection due from setting up should not land inside a timed batch
    durations: list[float] = []
    start = time.perf_counter()
    while len(durations) < MIN_BATCHES or time.perf_counter() - start < seconds:
        items = next(source)
        began = time.perf_counter()
        run_batch(engine, processor, items)
        durations.append(time.perf_counter() - began)
    return durations


def run_batch(engine, processor, items: list) -> None:
    """What the service does with a batch of parsed items: the processor's optional ``prepare`` (e.g. batch
    tokenization; the service applies it to each group consumed, about one batch under a backlog), then
    preprocess, run, postprocess."""
    items = prepare(processor, items)
    outputs = engine.run(processor.preprocess(items))
    processor.postprocess(outputs, items)


def _row(size: int, durations: list[float], memory_used: int | None, slo_ms: float | None) -> dict:
    p50, p99 = (round(float(v), 4) for v in np.percentile(durations, [50, 99]) * 1000.0)
    return {
        "size": size,
        "batches": len(durations),
        "items_per_s": round(size * len(durations) / sum(durations), 1),
        "p50_ms": p50,
        "p99_ms": p99,  # rounded before the SLO test, so the file and the verdict agree
        "mean_ms": round(1000.0 * sum(durations) / len(durations), 4),
        "meets_slo": None if slo_ms is None else p99 <= slo_ms,
        "device_memory_used_bytes": memory_used,
    }


def point(row: dict[str, Any]) -> Point:
    return Point(
        row["size"], row["items_per_s"], row["p50_ms"], row["p99_ms"], row["device_memory_used_bytes"]
    )
