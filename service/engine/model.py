"""Loading the model to serve from settings (its session, its processor, how results name it), and warming
it up."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import msgspec

from service.config import AssembleSettings, ModelSettings, Settings
from service.engine.artifacts import read_classifier, read_config
from service.engine.binding import row_bucket
from service.engine.knee import LIMIT
from service.engine.providers import Shapes
from service.engine.session import Engine
from service.errors import ConfigError
from service.flow.decode import takes_format
from service.flow.model import Model, ModelRef, RowPlan
from service.flow.ports import EngineLike
from service.formats import METRICS_FORMATS, load_format
from service.models.reference import choose_model
from service.processors import Capabilities, ModelInfo, load_processor

DEFAULT_MAX_LENGTH = 512
"""The longest sequence TensorRT's profile covers when ``MICROBATCH_MODEL__MAX_LENGTH`` is unset."""
# The ModelSettings fields a processor may read (ModelInfo.settings); they win over the model's metadata.
_PROCESSOR_FIELDS = (
    "name",
    "path",
    "features",
    "text_field",
    "tokenizer",
    "max_length",
    "padding",
    "labels",
    "outputs",
    "logits",
)


def served_shapes(settings: Settings) -> Shapes:
    """The batch sizes and sequence lengths the service will run: batches from 1 through ``MAX_SIZE``
    (usual) to the drain ceiling (``DRAIN_MAX_SIZE``, else the largest the warm-up tries), sequences from
    1 to ``MAX_LENGTH`` (else 512), a quarter of it usual."""
    batch = settings.batch
    longest = settings.model.max_length or DEFAULT_MAX_LENGTH
    return Shapes(
        batch=(1, batch.max_size, max(batch.max_size, batch.drain_max_size or LIMIT)),
        sequence=(1, max(1, longest // 4), longest),
    )


def load_model(settings: Settings) -> Model[Engine]:
    """Load the configured model and its processor, for the configured input format. Raises ConfigError
    naming the setting at fault."""
    conf = settings.model
    choice = choose_model(conf)
    engine = Engine(
        choice.path,
        conf.providers,
        conf.intra_op_threads,
        conf.allow_spinning,
        settings.gpu,
        served_shapes(settings),
        default_providers="providers" not in conf.model_fields_set,
    )
    assembling = settings.assemble.enabled
    if assembling is None:
        assembling = engine.metadata.get("microbatch.assemble") is not None
    fmt = load_format(settings.input.format, metrics=assembling)
    if assembling and not fmt.metrics:
        raise ConfigError(
            settings.input.env("format"),
            f"rows are assembled from agents' metrics ({', '.join(METRICS_FORMATS)}), not {fmt.name}",
        )
    name = choice.name or engine.metadata.get("microbatch.name") or Path(choice.path).stem
    version = choice.version or engine.metadata.get("microbatch.version") or "unversioned"
    model_dir = Path(choice.path).parent
    info = ModelInfo(
        name=name,
        model_dir=model_dir,
        input_names=engine.input_names,
        output_names=engine.output_names,
        metadata=engine.metadata,
        settings={k: getattr(conf, k) for k in _PROCESSOR_FIELDS},
        defaults={"text_field": fmt.text_field} if fmt.text_field else {},
        inputs=engine.inputs,
        outputs=engine.outputs,
        # PyTorch's exporter emits no ONNX-ML classifiers: its (large) graphs need not be parsed again.
        classifier=None if engine.producer == "pytorch" else read_classifier(Path(choice.path)),
        config=read_config(model_dir),
    )
    processor = load_processor(conf.processor, info)
    caps = Capabilities.of(processor)
    if not takes_format(caps, fmt):
        raise ConfigError(
            settings.input.env("format"),
            f"the processor reads only json and text values (it has no parse_fields), not {fmt.name}",
        )
    rows = plan_rows(settings.assemble, caps, engine.metadata) if assembling else None
    return Model(engine, processor, ModelRef(name, version, engine.provider), caps, rows)


def plan_rows(conf: AssembleSettings, caps: Capabilities, metadata: Mapping[str, str]) -> RowPlan:
    """The rows for the processor's features (``caps``): required ones from the settings, else the model's
    ``microbatch.required``, else all; optional ones from the settings, else the rest. Raises ConfigError
    naming the setting at fault."""
    features = caps.features
    if not features or caps.parse_fields is None:
        raise ConfigError(
            ModelSettings.env("processor"), "assembled rows need a processor of named features ('features')"
        )
    typical = _typical(metadata)
    required = list(conf.required if conf.required is not None else _listed(metadata, "microbatch.required"))
    if not required and conf.required is None:
        required = list(features)
    _known(conf.env("required"), required, features)
    rest = [f for f in features if f not in required]
    if conf.optional is not None:
        _known(conf.env("optional"), conf.optional, features)
        left = [f for f in rest if f not in conf.optional]
        if left:
            raise ConfigError(conf.env("optional"), f"features neither required nor optional: {left}")
        rest = list(conf.optional)
    if conf.fill == "typical":
        untypical = [f for f in rest if f not in typical]
        if untypical:
            raise ConfigError(conf.env("fill"), f"the model has no microbatch.typical value for {untypical}")
    return RowPlan(tuple(features), tuple(required), typical)


def _known(setting: str, names: Iterable[str], features: Iterable[str]) -> None:
    unknown = sorted(set(names) - set(features))
    if unknown:
        raise ConfigError(setting, f"not features of the model: {unknown}")


def _listed(metadata: Mapping[str, str], key: str) -> list[str]:
    raw = metadata.get(key)
    if raw is None:
        return []
    value = msgspec.json.decode(raw)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(ModelSettings.env("path"), f"the model's {key} is not a list of feature names")
    return value


def _typical(metadata: Mapping[str, str]) -> dict[str, float]:
    raw = metadata.get("microbatch.typical")
    if raw is None:
        return {}
    value = msgspec.json.decode(raw)
    if not isinstance(value, dict) or not all(isinstance(v, int | float) for v in value.values()):
        raise ConfigError(
            ModelSettings.env("path"), "the model's microbatch.typical is not an object of numbers"
        )
    return {str(k): float(v) for k, v in value.items()}


def warm_up(
    model: Model[EngineLike], sizes: Iterable[int], setting: str, outputs_setting: str | None = None
) -> None:
    """Run each batch size once so the first real batch does not pay for allocation and kernel choice;
    with I/O binding, every batch-size bucket up to the largest too (each gets its buffers now).
    A model that rejects what its processor feeds it is a configuration error, found here at start-up:
    ConfigError naming ``setting`` (see :func:`blamed_setting`); outputs the processor cannot read are one
    too, naming ``outputs_setting`` (default ``setting``) and the output."""
    warm = set(sizes)
    if isinstance(model.engine, Engine) and model.engine.bound is not None:
        warm |= {row_bucket(n) for n in range(1, max(warm) + 1)}
    for size in sorted(warm):
        try:
            items = model.samples(size)
            outputs = model.engine.run(model.processor.preprocess(items))
        except Exception as exc:
            raise ConfigError(setting, f"the model rejects what its processor feeds it: {exc}") from None
        try:
            model.postprocess(outputs, items)
        except Exception as exc:
            raise ConfigError(
                outputs_setting or setting, f"the processor cannot read the model's outputs: {exc}"
            ) from None


def model_setting(conf: ModelSettings) -> str:
    """The setting that chose the model (its outputs are the model's own)."""
    return conf.env("path") if conf.path else conf.env("name")


def blamed_setting(conf: ModelSettings) -> str:
    """The setting to blame when the model rejects its processor's tensors: the features chosen, else the
    model chosen."""
    if conf.features:
        return conf.env("features")
    return conf.env("path") if conf.path else conf.env("name")
