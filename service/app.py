"""``microbatch run``: build the pieces from settings, warm the model up, run the loop until a signal."""

from __future__ import annotations

import signal
from pathlib import Path

import structlog

from service.config import Settings, require_topics
from service.engine import Engine
from service.outputs import ModelRef
from service.pipeline import Pipeline
from service.processors import ModelInfo, Processor, load_processor
from service.reference import choose_model
from service.sink import Sink
from service.source import Source

_log = structlog.get_logger("microbatch")

_PROCESSOR_FIELDS = ("features", "text_field", "tokenizer", "max_length", "labels")


def load_model(settings: Settings) -> tuple[Engine, Processor, ModelRef]:
    """Load the configured model and its processor. Raises ConfigError naming the setting at fault."""
    choice = choose_model(settings.model)
    engine = Engine(choice.path, settings.model.providers, settings.model.intra_op_threads)
    name = choice.name or engine.metadata.get("microbatch.name") or Path(choice.path).stem
    version = choice.version or engine.metadata.get("microbatch.version") or "unversioned"
    info = ModelInfo(
        name=name,
        model_dir=Path(choice.path).parent,
        input_names=engine.input_names,
        output_names=engine.output_names,
        metadata=engine.metadata,
        settings={k: getattr(settings.model, k) for k in _PROCESSOR_FIELDS},
    )
    processor = load_processor(settings.model.processor, info)
    return engine, processor, ModelRef(name, version, engine.provider)


def warm_up(engine: Engine, processor: Processor, sizes: set[int]) -> None:
    """Run each batch size once so the first real batch does not pay for allocation and kernel choice."""
    sample = processor.sample()
    for size in sorted(sizes):
        engine.run(processor.preprocess([sample] * size))


def run_service(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT, then drain, commit and close. Returns the process exit code."""
    require_topics(settings)
    engine, processor, model = load_model(settings)
    warm_up(engine, processor, {1, settings.batch.min_size, settings.batch.max_size})
    source, sink = Source(settings.kafka), Sink(settings.kafka)
    pipeline = Pipeline(settings, source, sink, engine, processor, model)

    def _stop(signum: int, _frame: object) -> None:
        _log.info("stopping", signal=signal.Signals(signum).name)
        pipeline.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    _log.info(
        "started",
        model=model.name,
        version=model.version,
        provider=model.provider,
        inputs=settings.input.topics,
        output=settings.output.topic,
        dlq=settings.dlq.topic,
        batch=settings.batch.model_dump(),
        kafka=settings.kafka.summary(),
    )
    pipeline.run()
    return 0
