"""The loop's own CPU per record, with no Kafka and no machine noise: the tree's ``build_pipeline`` driven by
the test fakes on the fake clock (natural batching, adaptive sizes), fetches arriving every 2.5 ms: of 5
records by default, as at light load (2,000/s), or of PER_FETCH (500: a backlog's fetches). Prints
microseconds of process CPU per record.

    .venv/bin/python bench/loop_cost.py [FETCHES] [PER_FETCH]

To compare two trees, run it from this checkout with ``PYTHONPATH=<the other tree>`` in turn (it also
knows ``service.app.build_pipeline``'s signature of before the redesign, a6cf271).
"""

from __future__ import annotations

import gc
import importlib
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from service.config import Settings
from service.flow.inflight import Inline
from service.flow.records import InputRecord
from service.observability import Health, Metrics, Telemetry
from service.processors import ModelInfo
from service.processors.features import FeaturesProcessor
from tests.support.fakes import At, FakeClock, FakeEngine, FakeSink, FakeSource


def main() -> None:
    fetches = int(sys.argv[1]) if len(sys.argv) > 1 else 2000  # the fake source allows 10,000 consumes
    per_fetch = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    value = msgspec.json.encode({"a": 1.0, "b": 2.0})
    clock = FakeClock()
    script = [
        At(
            clock.now + i * 0.0025,
            [InputRecord("in", 0, i * per_fetch + k, None, value, None, None, 0.0) for k in range(per_fetch)],
        )
        for i in range(fetches)
    ]
    events: list = []
    settings = Settings(
        input={"topics": ["in"]},
        output={"topic": "out"},
        dlq={"topic": "dlq"},
        log={"stats_interval_s": 3600},
    )
    source, sink = FakeSource(script, clock, events), FakeSink(events)
    fake_sink: Any = sink  # the fake takes a list where the Protocol says Sequence
    info = ModelInfo("m", Path("."), ("features",), ("score",), settings={"features": ["a", "b"]})
    telemetry = Telemetry(Metrics(), Health(60, 60, clock), 3600, clock)

    def wall_ms() -> int:
        return round(clock.now * 1000)

    try:
        from service.flow.model import Model, ModelRef
        from service.startup import build_pipeline

        ref = ModelRef("m", "1", "CPUExecutionProvider")
        model = Model.of(FakeEngine(), FeaturesProcessor(info), ref)
        pipeline = build_pipeline(
            settings, source, fake_sink, model, telemetry, clock=clock, wall_ms=wall_ms, executor=Inline()
        )
    except ImportError:  # a tree before the redesign: its wiring took the engine and processor apart
        app: Any = importlib.import_module("service.app")
        ref = importlib.import_module("service.flow.encode").ModelRef("m", "1", "CPUExecutionProvider")
        pipeline = app.build_pipeline(
            settings,
            source,
            sink,
            FakeEngine(),
            FeaturesProcessor(info),
            ref,
            telemetry,
            clock=clock,
            wall_ms=wall_ms,
            executor=Inline(),
        )
    source.on_exhausted = pipeline.stop
    gc.collect()
    start = time.process_time()
    pipeline.run()
    print(f"{(time.process_time() - start) / (fetches * per_fetch) * 1e6:.2f} us/record")


if __name__ == "__main__":
    main()
