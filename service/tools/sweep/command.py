"""``microbatch sweep``: throughput and latency per batch size, the knee, and a recommended max size.

For each batch size, in increasing order, one untimed warm-up batch, then timed batches for about
``--seconds`` (at least :data:`MIN_BATCHES`). One batch's wall time is the processor's ``prepare`` (if it
has one) + preprocess + ``Engine.run`` + postprocess, i.e. what the service spends per batch apart from
parsing, Kafka and the batch window. The sweep stops early when a size runs out of memory (earlier sizes
are kept) or when a size's p99 exceeds ``--slo-ms``. The rules that judge the numbers live in
:mod:`service.engine.knee`; this module measures and reports.

Writes ``sweep-<model>.json`` (machine, settings, every row, the recommendation) and ``sweep-<model>.png``
into ``--out``. Exit code 0 with a recommendation, 1 without one (nothing meets the SLO, out of memory at
the smallest size, a model error), 2 for bad flags. The modules: ``measure`` (timing), ``memory`` (NVML),
``knee`` (the rules), ``report`` (JSON and table), ``plot``, ``pipeline`` (``--pipeline``).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from service.config import BatchSettings, KafkaSettings, ModelSettings, Settings
from service.engine import load_model
from service.engine.memory import DeviceMemory
from service.engine.session import Engine
from service.errors import ConfigError, UsageError
from service.flow.model import Model
from service.models.reference import reference_names
from service.tools.sweep.measure import MIN_BATCHES, input_pool, processor_kind, sweep_sizes
from service.tools.sweep.report import build_report, file_safe, format_report, write_json

DEFAULT_SIZES = "1,2,4,8,16,32,64,128,256,512"
MAX_SIZE: int = next(m.le for m in BatchSettings.model_fields["max_size"].metadata if hasattr(m, "le"))
"""The largest MICROBATCH_BATCH__MAX_SIZE the settings accept."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Define the command's options."""
    parser.add_argument("--model", required=True, help="a reference model name, or the path of an .onnx file")
    parser.add_argument(
        "--sizes", default=DEFAULT_SIZES, help=f"batch sizes to try (default {DEFAULT_SIZES})"
    )
    parser.add_argument("--slo-ms", type=float, default=None, help="p99 batch latency budget; stop above it")
    parser.add_argument(
        "--knee-gain",
        type=float,
        default=0.10,
        help="the knee is where doubling the batch gains less than this share of throughput (default 0.10)",
    )
    parser.add_argument("--seconds", type=float, default=1.0, help="time budget per size (default 1.0)")
    parser.add_argument(
        "--providers", default=None, help=f"e.g. cpu or cuda,cpu (default {ModelSettings.env('providers')})"
    )
    parser.add_argument("--out", default=".", help="folder for sweep-<model>.json and .png (default: .)")
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG (and the matplotlib import)")
    parser.add_argument(
        "--pipeline",
        action="store_true",
        help="also drain a backlog through the whole service at each size, on a broker (reference models)",
    )
    parser.add_argument(
        "--bootstrap",
        default=None,
        help=f"brokers for --pipeline (default {KafkaSettings.env('bootstrap_servers')})",
    )
    parser.add_argument(
        "--drain-seconds", type=float, default=4.0, help="about how long each --pipeline drain lasts (4)"
    )


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run the sweep; returns the exit code. Raises UsageError naming the flag at fault."""
    sizes = parse_sizes(args.sizes)
    _check_flags(args)
    missing = _missing_extras(plot=not args.no_plot)
    if missing:
        raise UsageError("sweep", f"needs the 'bench' extra (pip install 'microbatch[bench]'): {missing}")
    out = _out_dir(args.out)  # before the sweep: a bad folder should not cost a whole run
    model_settings = _model_settings(settings, args.model, args.providers)
    loaded = _load(model_settings, args.providers)
    engine, processor, model = loaded.engine, loaded.processor, loaded.ref
    bench, base = _pipeline_bench(args, settings, model_settings, out) if args.pipeline else (None, None)
    pool, inputs = input_pool(processor, processor_kind(model_settings, engine))
    memory = DeviceMemory.open(engine.provider)
    try:
        rows, stop = sweep_sizes(engine, processor, pool, sizes, args.seconds, args.slo_ms, memory)
    finally:
        if memory is not None:
            memory.close()
    if not rows and stop["reason"] == "error":
        raise UsageError("--model", f"the model rejects what its processor feeds it: {stop['detail']}")
    if bench is not None and rows:
        from service.tools.sweep.pipeline import measure_pipeline

        figures = measure_pipeline(bench, base, [r["size"] for r in rows])
        for row in rows:
            row["pipeline"] = figures[row["size"]]

    report = build_report(
        model=model,
        engine=engine,
        memory=memory,
        rows=rows,
        stop=stop,
        settings={
            "sizes": sizes,
            "seconds": args.seconds,
            "min_batches": MIN_BATCHES,
            "slo_ms": args.slo_ms,
            "knee_gain": args.knee_gain,
            "providers": list(model_settings.model.providers),
            "intra_op_threads": model_settings.model.intra_op_threads,
            # Every session and processor option, so runs under different settings can be told apart.
            "model_settings": model_settings.model.model_dump(mode="json"),
            "batch_min_size": settings.batch.min_size,
            "inputs": inputs,
            "pipeline": None
            if bench is None
            else {
                "bootstrap": bench.options.bootstrap,
                "drain_seconds": bench.options.drain_s,
                "partitions": bench.options.partitions,
            },
        },
    )
    stem = f"sweep-{file_safe(model.name)}"  # not Path.with_suffix: a dot in the name is no suffix
    written = [write_json(report, out / f"{stem}.json")]
    if rows and not args.no_plot:
        from service.tools.sweep.plot import plot_sweep

        plot_sweep(report, out / f"{stem}.png")
        written.append(out / f"{stem}.png")
    print(format_report(report))
    print("wrote " + ", ".join(str(p) for p in written))
    ok = report["recommendation"]["max_size"] is not None and stop["reason"] != "error"
    return 0 if ok else 1


# -- flags ------------------------------------------------------------------------------------------------


def parse_sizes(text: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``: sorted, duplicates dropped. Raises UsageError naming --sizes."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise UsageError("--sizes", "give at least one batch size, e.g. 1,2,4,8")
    try:
        sizes = sorted({int(p) for p in parts})
    except ValueError:
        raise UsageError("--sizes", "not a comma-separated list of integers") from None
    if sizes[0] < 1 or sizes[-1] > MAX_SIZE:
        raise UsageError("--sizes", f"batch sizes must be between 1 and {MAX_SIZE}")
    return sizes


def _check_flags(args: argparse.Namespace) -> None:
    if not args.drain_seconds > 0:
        raise UsageError("--drain-seconds", "must be positive")
    if not args.seconds > 0:
        raise UsageError("--seconds", "must be positive")
    if args.slo_ms is not None and not args.slo_ms > 0:
        raise UsageError("--slo-ms", "must be positive")
    if not 0 < args.knee_gain <= 1:
        raise UsageError("--knee-gain", "must be in (0, 1]")


def _missing_extras(*, plot: bool) -> str | None:
    """The first package of the bench extra this run needs that is not installed, else None."""
    needed = ["tqdm"] + (["matplotlib"] if plot else [])
    return next((name for name in needed if importlib.util.find_spec(name) is None), None)


def _out_dir(text: str) -> Path:
    """The output folder, created if missing. Raises UsageError naming --out."""
    out = Path(text)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError("--out", f"cannot create {text!r}: {exc}") from None
    return out


def _model_settings(settings: Settings, model: str, providers: str | None) -> Settings:
    """A copy of ``settings`` serving ``model``: an existing file is a path, anything else a reference
    name."""
    update: dict[str, Any]
    if Path(model).is_file():
        update = {"path": Path(model), "name": None}  # the name then comes from the model's metadata
    elif model in reference_names():
        update = {"name": model, "path": None}  # a path from the environment would win over the name
    else:
        raise UsageError(
            "--model", f"{model!r} is neither a file nor a reference model ({', '.join(reference_names())})"
        )
    if providers is not None:
        update["providers"] = _parse_providers(providers)
    return settings.model_copy(update={"model": settings.model.model_copy(update=update)})


def _parse_providers(text: str) -> list[str]:
    """Through the settings' own validator, so aliases (``cpu``, ``cuda``) mean what they mean in the
    environment."""
    try:
        return ModelSettings(providers=text).providers
    except ValidationError as exc:
        raise UsageError("--providers", exc.errors()[0]["msg"].removeprefix("Value error, ")) from None


def _load(settings: Settings, providers_flag: str | None) -> Model[Engine]:
    """:func:`service.engine.load_model`, with a provider error blamed on --providers when that flag
    chose them."""
    try:
        return load_model(settings)
    except ConfigError as exc:
        if providers_flag is not None and exc.setting == ModelSettings.env("providers"):
            raise UsageError("--providers", str(exc).split(": ", 1)[1]) from None
        raise


def _pipeline_bench(
    args: argparse.Namespace, settings: Settings, model_settings: Settings, out: Path
) -> tuple[Any, Any]:
    """The harness for ``--pipeline`` and the bench scenario of the model, checked before any measuring: a
    reference model (its events can be generated) and a broker that answers. Raises UsageError naming
    --pipeline, or BrokerUnavailableError."""
    from service.tools.sweep.pipeline import open_bench, scenario_for

    base = None if model_settings.model.path is not None else scenario_for(model_settings.model.name)
    if base is None:
        raise UsageError("--pipeline", "needs a reference model: the events it drains are generated for them")
    bootstrap = args.bootstrap or settings.kafka.bootstrap_servers
    return open_bench(settings, bootstrap, args.drain_seconds, out / "sweep-logs"), base
