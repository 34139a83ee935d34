"""A served model: its session, its processor and how results name it; loaded from settings, warmed up."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from service.config import ModelSettings, Settings
from service.engine.session import Engine
from service.errors import ConfigError
from service.flow.decode import takes_format
from service.flow.encode import ModelRef
from service.formats import load_format
from service.models.reference import choose_model
from service.processors import ModelInfo, Processor, load_processor, prepare

# The ModelSettings fields a processor may read (ModelInfo.settings); they win over the model's metadata.
_PROCESSOR_FIELDS = ("features", "text_field", "tokenizer", "max_length", "labels")


@dataclass(frozen=True, slots=True)
class Model:
    """What ``run`` serves: ``engine`` runs batches, ``processor`` feeds it, ``ref`` labels results."""

    engine: Engine
    processor: Processor
    ref: ModelRef


def load_model(settings: Settings) -> Model:
    """Load the configured model and its processor, for the configured input format. Raises ConfigError
    naming the setting at fault."""
    conf = settings.model
    fmt = load_format(settings.input.format)
    choice = choose_model(conf)
    engine = Engine(choice.path, conf.providers, conf.intra_op_threads, conf.allow_spinning)
    name = choice.name or engine.metadata.get("microbatch.name") or Path(choice.path).stem
    version = choice.version or engine.metadata.get("microbatch.version") or "unversioned"
    info = ModelInfo(
        name=name,
        model_dir=Path(choice.path).parent,
        input_names=engine.input_names,
        output_names=engine.output_names,
        metadata=engine.metadata,
        settings={k: getattr(conf, k) for k in _PROCESSOR_FIELDS},
        defaults={"text_field": fmt.text_field} if fmt.text_field else {},
    )
    processor = load_processor(conf.processor, info)
    if not takes_format(processor, fmt):
        raise ConfigError(
            settings.input.env("format"),
            f"the processor reads only json and text values (it has no parse_fields), not {fmt.name}",
        )
    return Model(engine, processor, ModelRef(name, version, engine.provider))


def warm_up(model: Model, sizes: Iterable[int], setting: str) -> None:
    """Run each batch size once so the first real batch does not pay for allocation and kernel choice.
    A model that rejects what its processor feeds it is a configuration error, found here at start-up:
    ConfigError naming ``setting`` (see :func:`blamed_setting`)."""
    processor = model.processor
    for size in sorted(set(sizes)):
        try:
            items = prepare(processor, [processor.sample()] * size)
            processor.postprocess(model.engine.run(processor.preprocess(items)), items)
        except Exception as exc:
            raise ConfigError(setting, f"the model rejects what its processor feeds it: {exc}") from None


def blamed_setting(conf: ModelSettings) -> str:
    """The setting to blame when the model rejects its processor's tensors: the features chosen, else the
    model chosen."""
    if conf.features:
        return conf.env("features")
    return conf.env("path") if conf.path else conf.env("name")
