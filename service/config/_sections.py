"""The settings sections other than Kafka's: input, output, dead letters, batching, model, GPU, logs,
metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from service.config._base import TOPIC_RULE, CsvList, Section, TopicName, legal_topic, not_below, split_list
from service.formats.paths import parse_paths

_PROVIDER_ALIASES = {
    "cuda": "CUDAExecutionProvider",
    "cpu": "CPUExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
}


InputFormat = Literal[
    "json", "text", "syslog", "otlp-proto", "otlp-json", "collectd-json", "influx", "telegraf-json"
]


class InputSettings(Section):
    """What to consume, and how its shippers write it."""

    topics: CsvList = Field(default_factory=list)
    """The topics to consume, ``a,b,c``; ``run`` needs at least one, and none may be the output or
    dead-letter topic."""
    format: InputFormat = "json"
    """How one message holds its items: a JSON object, a line of text, a syslog line, an OTLP request
    (one item per log record, or per data point when rows are assembled), or an agent's metrics (one item
    per data point: collectd, Influx line protocol, Telegraf). See docs/FORMATS.md."""
    max_value_bytes: int = Field(1_048_576, ge=1)
    """The largest message value taken, in bytes; larger ones go to the dead-letter topic as
    ``value_too_large``."""
    idle_poll_ms: int = Field(100, ge=1, le=10_000)
    """How long one consume call may block while no batch is open, in milliseconds."""
    max_in_flight: int = Field(10_000, ge=1)
    """Consumed items not yet acknowledged (one per message, one per log record of an OTLP request) above
    which the consumer pauses, resuming at half; keep it well above ``BATCH__MAX_SIZE`` and a fetch's
    worth of items."""

    @field_validator("topics", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return split_list(value)

    @field_validator("topics")
    @classmethod
    def _legal(cls, value: list[str]) -> list[str]:
        bad = [i + 1 for i, topic in enumerate(value) if not legal_topic(topic)]
        if bad:
            raise ValueError(f"topic number {bad[0]} is not a legal Kafka topic name ({TOPIC_RULE})")
        return value


class OutputSettings(Section):
    """Where results go."""

    topic: TopicName = "microbatch-results"
    """The topic results are produced to, one per input item."""
    flush_timeout_s: float = Field(30.0, gt=0)
    """The longest wait for outstanding deliveries at a partition revoke and at shutdown, in seconds;
    exactly-once, also for a transaction's deliveries before its commit (still outstanding then, it is
    aborted) and for each call to the transaction coordinator (10 s past it, the process exits 6)."""
    include_fields: CsvList = Field(default_factory=list)
    """Input fields (dotted paths) copied into each result's ``fields``, so an alert says where it came
    from: ``host,resource.service.name,severity_text``."""

    @field_validator("include_fields", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return split_list(value)

    @field_validator("include_fields")
    @classmethod
    def _paths(cls, value: list[str]) -> list[str]:
        return _valid_paths(value)


class DlqSettings(Section):
    """Where rejected messages go, unchanged, with error headers."""

    topic: TopicName = "microbatch-dlq"
    """The dead-letter topic: the original bytes of each message that gives no result, with the reason in
    its headers."""


class DeliverySettings(Section):
    """The delivery guarantee (docs/RELIABILITY.md). At-least-once: an input's offset is committed once
    its outputs are acknowledged, so a crash may answer the uncommitted tail twice. Exactly-once: results,
    dead letters and the input offsets they complete are written in one Kafka transaction, so a reader
    with ``isolation.level=read_committed`` sees each input answered once; the producer's transactional
    id is ``<KAFKA__GROUP_ID>.<KAFKA__INSTANCE_ID>``."""

    guarantee: Literal["at-least-once", "exactly-once"] = "at-least-once"
    """``at-least-once``, or ``exactly-once`` (Kafka transactions; readers must use
    ``isolation.level=read_committed``)."""
    transaction_ms: int = Field(100, ge=1, le=600_000)
    """Exactly-once: how long a transaction gathers batches before it is committed, in milliseconds.
    Results become visible to ``read_committed`` readers at the commit, so this adds up to that much
    latency; shorter costs more commits."""
    transaction_max_records: int = Field(10_000, ge=1)
    """Exactly-once: a transaction is committed sooner once it holds this many records (results and dead
    letters): what an abort makes the service process again."""


class BatchSettings(Section):
    """Micro-batching: a batch is cut at the target size, or when its oldest item has waited ``max_wait_ms``.

    With ``adaptive`` on, the target moves within [``min_size``, ``max_size``] with load, and up to
    ``drain_max_size`` while batches are cheap and another waits (the stretch) or a backlog is late (the
    drain regime; see ``service/flow/sizing.py``); off, it is always ``max_size``.
    """

    min_size: int = Field(4, ge=1, le=65_536)
    """The floor of the adaptive target size, in items (and a warm-up size); at most ``MAX_SIZE``. An idle
    loop cuts smaller batches (``NATURAL``)."""
    # validate_default: the check against min_size must run when only MIN_SIZE is set, too.
    max_size: int = Field(16, ge=1, le=65_536, validate_default=True)
    """A batch is cut when it holds the target number of items, at most this many in the stream regime
    unless batches are cheap (the stretch) or a late backlog drains; both stop at ``DRAIN_MAX_SIZE``.
    ``microbatch sweep`` finds the knee."""
    max_wait_ms: float = Field(50.0, gt=0, le=60_000)
    """A batch is also cut when its oldest item has waited this long, in milliseconds, whatever its
    size."""
    drain_max_size: int | None = Field(None, ge=1, le=65_536)
    """The largest batch while draining a late backlog (the drain regime) or stretching past ``MAX_SIZE``,
    in items; unset: the model's throughput knee, measured at warm-up (logged as ``batch_sizes``). Either
    way capped so that peak memory stays under 70% of the limit. At least ``MAX_SIZE``; equal to it:
    neither regime."""
    natural: bool = True
    """Natural batching: when nothing is computing and nothing more is fetched, cut the open batch at once,
    whatever its size, instead of waiting for the target or the window (not while stretched or
    draining); off, an open batch waits for the target or the window."""
    linger_ms: float = Field(1.0, ge=0, le=1_000, validate_default=True)
    """With natural batching, how long a batch just opened waits for more to be fetched before it may be
    cut, in milliseconds (like the producer's ``linger.ms``): at light load, fewer and larger batches,
    so less CPU per event for about this much latency; 0 cuts what was fetched at once. Below
    ``MAX_WAIT_MS``."""
    adaptive: bool = True
    """Move the target size within [``MIN_SIZE``, ``MAX_SIZE``] with load: grow while a backlog waits or
    the loop is busy, shrink while idle, halve when a batch overruns the SLO budget; off, always
    ``MAX_SIZE`` (and no stretch or drain regime)."""
    latency_slo_ms: float = Field(250.0, gt=0, le=600_000, validate_default=True)
    """End-to-end latency target of the adaptive sizing, in milliseconds: one batch may take
    (SLO - ``MAX_WAIT_MS``) / 2. Above ``MAX_WAIT_MS`` when adaptive."""
    max_tokens: int = Field(8192, ge=0, le=16_777_216)
    """Cost cap per batch, in tokens, for processors that report a cost (text: count x longest item), so
    long lines cannot blow up memory; 0: no cap. One item larger than the cap still runs, alone."""
    bucket_window: int = Field(256, ge=0, le=65_536)
    """For processors that report a cost (text): choose each batch among up to this many waiting
    messages, by similar length, to cut padding; 0 keeps arrival order. Results of one partition may then
    come out of offset order (commits do not)."""
    pipeline_depth: int = Field(2, ge=0, le=16)
    """Batches handed to the inference thread and not yet finished; while one runs, the next is consumed
    and pre-processed. 0 runs inference on the loop's own thread."""

    @field_validator("max_size")
    @classmethod
    def _not_below_min(cls, value: int, info: ValidationInfo) -> int:
        return not_below(cls, value, info, "min_size")

    @field_validator("drain_max_size")
    @classmethod
    def _not_below_max(cls, value: int | None, info: ValidationInfo) -> int | None:
        return None if value is None else not_below(cls, value, info, "max_size")

    @field_validator("linger_ms")
    @classmethod
    def _below_the_window(cls, value: float, info: ValidationInfo) -> float:
        wait = info.data.get("max_wait_ms")
        if wait is not None and value >= wait:
            raise ValueError(f"must be < {cls.env('max_wait_ms')}")
        return value

    @field_validator("latency_slo_ms")
    @classmethod
    def _above_the_window(cls, value: float, info: ValidationInfo) -> float:
        wait = info.data.get("max_wait_ms")
        if info.data.get("adaptive") and wait is not None and value <= wait:
            raise ValueError(f"must be > {cls.env('max_wait_ms')} when {cls.env('adaptive')} is on")
        return value


class ModelSettings(Section):
    """Which model to serve and how to feed it.

    Either ``name`` picks a reference model shipped with the service, or ``path`` points at the user's own
    ONNX file. Processor fields left unset are read from the model's ``microbatch.*`` metadata.
    """

    name: str | None = None
    """A reference model shipped with the service: ``metrics-anomaly``, ``log-classifier`` or
    ``host-anomaly``. With ``PATH`` set, only the name results carry. ``run`` needs this or ``PATH``."""
    path: Path | None = None
    """Your own ``.onnx`` file; wins over ``NAME``."""
    providers: CsvList = Field(default_factory=lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    """ONNX Runtime execution providers, in order of preference; ``cuda``, ``cpu``, ``tensorrt`` work
    too. CUDA that cannot serve is dropped with a ``providers_unavailable`` warning saying why."""
    intra_op_threads: int = Field(0, ge=0, le=256)
    """ONNX Runtime threads per batch; 0 lets ONNX Runtime choose (one thread per core)."""
    allow_spinning: bool = False
    """Let idle ONNX Runtime threads spin-wait for work: lower latency per batch on dedicated cores, but
    it starves the loop thread when they share cores."""
    processor: str | None = None
    """``features``, ``text``, or ``package.module:Class`` for a processor of your own; unset: the model's
    ``microbatch.processor``, else ``text`` for a model with an ``input_ids`` input and ``features`` for
    one with a single float input."""
    version: str | None = None
    """The model version written into results; unset: the model's own."""
    features: CsvList | None = None
    """``features``: the numeric input fields (dotted paths), in the model's order; unset: the model's."""
    text_field: str | None = None
    """``text``: the field (a dotted path) holding the text; unset: where the input format puts it
    (``syslog``, ``text``: ``message``; OTLP: ``body``), else the model's ``microbatch.text_field``."""
    tokenizer: Path | None = None
    """``text``: a ``tokenizers`` JSON file (WordPiece, BPE or Unigram); unset: the model's, else
    ``tokenizer.json`` beside it."""
    max_length: int | None = Field(None, ge=1, le=65_536)
    """``text``: tokens kept per item; unset: the model's, else the tokenizer's, else the fixed sequence
    length, else 128. Never more than a fixed sequence length."""
    padding: Literal["longest", "max_length"] | None = None
    """``text``: pad each batch to its longest line, or every line to ``MAX_LENGTH`` (a model with a fixed
    sequence length). Unset: what the tokenizer or the model says, else ``longest``."""
    labels: CsvList | None = None
    """Class names by position, for any classifier output; unset: the model's ``microbatch.labels``, else
    ``id2label`` of a ``config.json`` beside it, else the classifier's own (docs/MODELS.md, "Outputs")."""
    outputs: CsvList | None = None
    """The outputs to put in results, ``output`` or ``output=field`` each; unset: all, under their names."""
    logits: str | None = None
    """The output of raw class scores to turn into ``label``, ``score`` and ``probabilities`` (softmax);
    unset: one named ``logits``, if any; ``none``: no output."""
    sample: Path | None = None
    """A file of sample input values (one per line) run through the whole path at start-up, with no Kafka:
    a sample that gives no result stops start-up (``microbatch check``)."""

    @field_validator("providers", "features", "labels", "outputs", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return split_list(value)

    @field_validator("providers")
    @classmethod
    def _canonical(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one execution provider is required")
        return [_PROVIDER_ALIASES.get(p.lower(), p) for p in value]

    @field_validator("features")
    @classmethod
    def _feature_paths(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else _valid_paths(value)

    @field_validator("text_field")
    @classmethod
    def _text_path(cls, value: str | None) -> str | None:
        if value == "":
            raise ValueError(f"is empty; to read each value whole, set {InputSettings.env('format')}=text")
        return None if value is None else _valid_paths([value])[0]

    @field_validator("outputs")
    @classmethod
    def _output_entries(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and any(not entry.partition("=")[0].strip() for entry in value):
            raise ValueError("an entry names no output (write output or output=field)")
        return value

    @field_validator("path", "tokenizer", "sample")
    @classmethod
    def _exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError("no such file")
        return value


def _valid_paths(paths: list[str]) -> list[str]:
    parse_paths(paths)  # PathError is a ValueError: pydantic reports it against the setting
    return paths


class AssembleSettings(Section):
    """Row assembly: many agents' data points -> one row per key (host) and interval, scored as one item.

    On when ``enabled`` says so, or (unset) when the model's ``microbatch.assemble`` metadata asks for it
    (``host-anomaly``). ``required`` and ``optional`` default to the model's ``microbatch.required`` and
    the rest of its features. See docs/RELIABILITY.md for what a row's delivery means.
    """

    enabled: bool | None = None
    """Assemble rows per key and interval from agents' data points; unset: when the model's
    ``microbatch.assemble`` metadata asks for it (``host-anomaly``)."""
    key: str = "host"
    """The point field (a path) whose value keys the rows; a point without one is keyed by its message's
    Kafka key, and dead-lettered when that is null too."""
    interval_s: float = Field(10.0, gt=0, le=86_400)
    """The agents' collection interval, in seconds (collectd ``Interval``, Telegraf ``interval``): a point
    belongs to the row of the interval nearest its time."""
    max_wait_s: float = Field(15.0, gt=0, le=3_600)
    """How long a row may wait for its features from its first point, in seconds: then it is scored if it
    has the required ones (the optional ones filled), or closed incomplete (counted and logged)."""
    grace_ms: float = Field(200.0, ge=0, le=60_000)
    """A complete row still waits this long for the rest of its agent's burst (a second interface, the
    other CPUs) before it is scored, in milliseconds."""
    required: CsvList | None = None
    """Features a row must have to be scored; unset: the model's ``microbatch.required``."""
    optional: CsvList | None = None
    """Features that may be filled (``FILL``); unset: the model's other features."""
    fill: Literal["last", "typical", "zero"] = "last"
    """A missing optional feature: the host's last value (else the model's typical one), the model's
    typical value (``microbatch.typical``), or 0."""

    @field_validator("required", "optional", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return split_list(value)

    @field_validator("key")
    @classmethod
    def _key_path(cls, value: str) -> str:
        return _valid_paths([value])[0]


class LogSettings(Section):
    """Logging and the periodic stats line."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    """The least severe log level written."""
    format: Literal["auto", "json", "console"] = "auto"
    """How log lines are written; ``auto`` is console on a terminal, JSON otherwise."""
    stats_interval_s: float = Field(10.0, gt=0)
    """The period of the stats log line, in seconds."""


class GpuSettings(Section):
    """How ONNX Runtime uses an NVIDIA GPU, when the CUDA or TensorRT provider serves (ignored on CPU).

    TensorRT is opt-in: put ``TensorrtExecutionProvider`` (``tensorrt``) first in
    ``MICROBATCH_MODEL__PROVIDERS``; its optimisation profile is derived from the batch sizes and sequence
    lengths the service will run (``engine.providers.trt_profile``)."""

    device_id: int = Field(0, ge=0, le=255)
    """Which GPU of the machine (CUDA's numbering, after ``CUDA_VISIBLE_DEVICES``)."""
    mem_limit_mb: int = Field(0, ge=0)
    """The most device memory ONNX Runtime's arena may take, in MiB (CUDA's ``gpu_mem_limit``); 0: no
    limit of ours."""
    arena_extend_strategy: Literal["kSameAsRequested", "kNextPowerOfTwo"] = "kSameAsRequested"
    """How the arena grows: by what a run asks for, or to the next power of two (ONNX Runtime's default,
    which can reserve up to twice what is used)."""
    cudnn_conv_algo_search: Literal["HEURISTIC", "EXHAUSTIVE", "DEFAULT"] = "HEURISTIC"
    """How cuDNN picks convolution kernels: by heuristics, or by timing every candidate on each new shape
    (ONNX Runtime's default; slow first batches of every shape)."""
    io_binding: bool = True
    """Copy each batch to the device once, into buffers kept per shape bucket, and its outputs back once
    (``engine/binding.py``); off: ONNX Runtime's plain ``run``, which copies and allocates every call."""
    trt_fp16: bool = False
    """TensorRT: allow half-precision kernels (faster; results may move in the last digits). Its
    optimisation profile covers the batch sizes and sequence lengths the service will run."""
    trt_cache_dir: Path | None = None
    """TensorRT: keep built engines here, so a restart does not rebuild them (minutes); unset: no cache."""


class MetricsSettings(Section):
    """The HTTP port for Prometheus metrics (``/metrics``) and the probes (``/healthz``, ``/readyz``)."""

    enabled: bool = True
    """Serve Prometheus metrics and the health probes over HTTP."""
    host: str = "0.0.0.0"
    """Listen address; ``0.0.0.0`` so that Prometheus and the kubelet can reach a container."""
    port: int = Field(9400, ge=0, le=65_535)
    """The TCP port of ``/metrics``, ``/healthz`` and ``/readyz``; 0 picks a free one (logged in the
    ``started`` line): for several services on one host."""
    liveness_timeout_s: float = Field(60.0, gt=0, le=3_600)
    """``/healthz`` fails when the consume loop has not come round for this long, in seconds (a stuck
    loop); more than ``OUTPUT__FLUSH_TIMEOUT_S``."""
    broker_timeout_s: float = Field(30.0, gt=0, le=3_600)
    """``/readyz`` fails when no broker has answered, or a permission the service needs has been refused,
    for this long, in seconds."""
