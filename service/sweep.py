"""``microbatch sweep``: throughput and latency per batch size, the knee, and a recommended max size.

For each batch size, in increasing order, one untimed warm-up batch, then timed batches for about
``--seconds`` (at least :data:`MIN_BATCHES`). One batch's wall time is the processor's ``prepare`` (if it
has one) + preprocess + ``Engine.run`` + postprocess, i.e. what the service spends per batch apart from
parsing, Kafka and the batch window. The sweep stops early when a size runs out of memory (earlier sizes
are kept) or when a size's p99 exceeds ``--slo-ms``. The rules that judge the numbers live in
:mod:`service.knee`; this module measures and reports.

Writes ``sweep-<model>.json`` (machine, settings, every row, the recommendation) and ``sweep-<model>.png``
into ``--out``. Exit code 0 with a recommendation, 1 without one (nothing meets the SLO, out of memory at
the smallest size, a model error), 2 for bad flags.

Only argparse is imported at module level: the CLI imports this module for every command.
"""

from __future__ import annotations

import argparse

DEFAULT_SIZES = "1,2,4,8,16,32,64,128,256,512"
MIN_BATCHES = 5
"""Timed batches per size however long they take, so a percentile is never read off one sample."""
MAX_SIZE = 65_536
"""The largest MICROBATCH_BATCH__MAX_SIZE the settings accept."""
SEED = 1
POOL_SIZE = 4096
"""Generated events per sweep; batches cycle through them, so text batches mix realistic lengths."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Define the command's options. Cheap: nothing heavy is imported until :func:`run`."""
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
        "--providers", default=None, help="e.g. cpu or cuda,cpu (default MICROBATCH_MODEL__PROVIDERS)"
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
        help="brokers for --pipeline (default MICROBATCH_KAFKA__BOOTSTRAP_SERVERS)",
    )
    parser.add_argument(
        "--drain-seconds", type=float, default=4.0, help="about how long each --pipeline drain lasts (4)"
    )


def run(args: argparse.Namespace, settings) -> int:
    """Run the sweep; returns the exit code. Raises ConfigError naming the flag at fault."""
    import sys

    from service.errors import ConfigError

    sizes = parse_sizes(args.sizes)
    _check_flags(args)
    missing = _missing_extras(plot=not args.no_plot)
    if missing:
        print(
            f"microbatch: sweep needs the 'bench' extra (pip install 'microbatch[bench]'): {missing}",
            file=sys.stderr,
        )
        return 2
    out = _out_dir(args.out)  # before the sweep: a bad folder should not cost a whole run
    model_settings = _model_settings(settings, args.model, args.providers)
    engine, processor, model = _load(model_settings, args.providers)
    bench, base = _pipeline_bench(args, settings, model_settings, out) if args.pipeline else (None, None)
    pool, inputs = input_pool(processor, _processor_kind(model_settings, engine))
    memory = DeviceMemory.open(engine.provider)
    try:
        rows, stop = sweep_sizes(engine, processor, pool, sizes, args.seconds, args.slo_ms, memory)
    finally:
        if memory is not None:
            memory.close()
    if not rows and stop["reason"] == "error":
        raise ConfigError("--model", f"the model rejects what its processor feeds it: {stop['detail']}")
    if bench is not None and rows:
        from service.sweep_pipeline import measure_pipeline

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
    stem = f"sweep-{_file_safe(model.name)}"  # not Path.with_suffix: a dot in the name is no suffix
    written = [_write_json(report, out / f"{stem}.json")]
    if rows and not args.no_plot:
        from service.plot import plot_sweep

        plot_sweep(report, out / f"{stem}.png")
        written.append(out / f"{stem}.png")
    print(format_report(report))
    print("wrote " + ", ".join(str(p) for p in written))
    ok = report["recommendation"]["max_size"] is not None and stop["reason"] != "error"
    return 0 if ok else 1


# -- flags ------------------------------------------------------------------------------------------------


def parse_sizes(text: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``: sorted, duplicates dropped. Raises ConfigError naming --sizes."""
    from service.errors import ConfigError

    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ConfigError("--sizes", "give at least one batch size, e.g. 1,2,4,8")
    try:
        sizes = sorted({int(p) for p in parts})
    except ValueError:
        raise ConfigError("--sizes", f"{text!r} is not a comma-separated list of integers") from None
    if sizes[0] < 1 or sizes[-1] > MAX_SIZE:
        raise ConfigError("--sizes", f"batch sizes must be between 1 and {MAX_SIZE}, got {text!r}")
    return sizes


def _check_flags(args: argparse.Namespace) -> None:
    from service.errors import ConfigError

    if not args.drain_seconds > 0:
        raise ConfigError("--drain-seconds", f"must be positive, got {args.drain_seconds}")
    if not args.seconds > 0:
        raise ConfigError("--seconds", f"must be positive, got {args.seconds}")
    if args.slo_ms is not None and not args.slo_ms > 0:
        raise ConfigError("--slo-ms", f"must be positive, got {args.slo_ms}")
    if not 0 < args.knee_gain <= 1:
        raise ConfigError("--knee-gain", f"must be in (0, 1], got {args.knee_gain}")


def _missing_extras(*, plot: bool) -> str | None:
    """The first package of the bench extra this run needs that is not installed, else None."""
    import importlib.util

    needed = ["tqdm"] + (["matplotlib"] if plot else [])
    return next((name for name in needed if importlib.util.find_spec(name) is None), None)


def _out_dir(text: str):
    """The output folder, created if missing. Raises ConfigError naming --out."""
    from pathlib import Path

    from service.errors import ConfigError

    out = Path(text)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError("--out", f"cannot create {text!r}: {exc}") from None
    return out


def _model_settings(settings, model: str, providers: str | None):
    """A copy of ``settings`` serving ``model``: an existing file is a path, anything else a reference
    name."""
    from pathlib import Path

    from service.errors import ConfigError
    from service.reference import reference_names

    if Path(model).is_file():
        update = {"path": Path(model), "name": None}  # the name then comes from the model's metadata
    elif model in reference_names():
        update = {"name": model, "path": None}  # a path from the environment would win over the name
    else:
        raise ConfigError(
            "--model", f"{model!r} is neither a file nor a reference model ({', '.join(reference_names())})"
        )
    if providers is not None:
        update["providers"] = _parse_providers(providers)
    return settings.model_copy(update={"model": settings.model.model_copy(update=update)})


def _parse_providers(text: str) -> list[str]:
    """Through the settings' own validator, so aliases (``cpu``, ``cuda``) mean what they mean in the
    environment."""
    from pydantic import ValidationError

    from service.config import ModelSettings
    from service.errors import ConfigError

    try:
        return ModelSettings(providers=text).providers
    except ValidationError as exc:
        raise ConfigError("--providers", exc.errors()[0]["msg"].removeprefix("Value error, ")) from None


def _load(settings, providers_flag: str | None):
    """service.app.load_model, with a provider error blamed on --providers when that flag chose them."""
    from service.app import load_model
    from service.errors import ConfigError

    try:
        return load_model(settings)
    except ConfigError as exc:
        if providers_flag is not None and exc.setting == "MICROBATCH_MODEL__PROVIDERS":
            raise ConfigError("--providers", str(exc).split(": ", 1)[1]) from None
        raise


def _pipeline_bench(args: argparse.Namespace, settings, model_settings, out):
    """The harness for ``--pipeline`` and the bench scenario of the model, checked before any measuring: a
    reference model (its events can be generated) and a broker that answers. Raises ConfigError naming
    --pipeline, or BrokerUnavailableError."""
    from service.errors import ConfigError
    from service.sweep_pipeline import open_bench, scenario_for

    base = None if model_settings.model.path is not None else scenario_for(model_settings.model.name)
    if base is None:
        raise ConfigError(
            "--pipeline", "needs a reference model: the events it drains are generated for them"
        )
    bootstrap = args.bootstrap or settings.kafka.bootstrap_servers
    return open_bench(settings, bootstrap, args.drain_seconds, out / "sweep-logs"), base


# -- inputs -----------------------------------------------------------------------------------------------


def _processor_kind(settings, engine) -> str | None:
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
    import msgspec
    import structlog

    from service.errors import InvalidMessage
    from service.generate import EventGenerator

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


def batches(pool: list, size: int):
    """Endless batches of ``size`` consecutive items of ``pool``, wrapping around it."""
    ring = pool * (size // len(pool) + 2)  # any slice of `size` starting inside the pool fits
    offset = 0
    while True:
        yield ring[offset : offset + size]
        offset = (offset + size) % len(pool)


# -- measuring --------------------------------------------------------------------------------------------


def sweep_sizes(engine, processor, pool, sizes, seconds, slo_ms, memory) -> tuple[list[dict], dict]:
    """Measure each size in turn until done or a stop rule fires. Returns (rows, stop).

    ``rows`` are the measured sizes in order (a size over the SLO is kept, a size that raised is not);
    ``stop`` is ``{"reason": "completed" | "slo" | "oom" | "error", "size", "detail"}``. ``memory`` is a
    :class:`DeviceMemory` or None.
    """
    from tqdm import tqdm

    from service import knee

    rows: list[dict] = []
    stop = {"reason": "completed", "size": None, "detail": "every size was measured"}
    with tqdm(sizes, desc="sweep", unit="size", leave=False) as progress:
        for size in progress:
            progress.set_postfix_str(f"batch {size}")
            try:
                durations = measure(engine, processor, batches(pool, size), seconds)
            except Exception as exc:  # ONNX Runtime raises its own types; the message tells OOM apart
                reason = "oom" if knee.is_out_of_memory(str(exc)) else "error"
                stop = {"reason": reason, "size": size, "detail": " ".join(str(exc).split())[:500]}
                break
            used = memory.used() if memory is not None else None
            row = _row(size, durations, used, slo_ms)
            rows.append(row)
            why = knee.stop_reason(_point(row), slo_ms)
            if why:
                stop = {"reason": "slo", "size": size, "detail": why}
                break
    return rows, stop


def measure(engine, processor, source, seconds: float) -> list[float]:
    """Wall times in seconds of timed batches from ``source``, after one untimed warm-up batch (allocation,
    kernel choice): at least :data:`MIN_BATCHES`, and more until ``seconds`` have passed."""
    import gc
    import time

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
    from service.processors import prepare

    items = prepare(processor, items)
    outputs = engine.run(processor.preprocess(items))
    processor.postprocess(outputs, items)


def _row(size: int, durations: list[float], memory_used: int | None, slo_ms: float | None) -> dict:
    import numpy as np

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


def _point(row: dict):
    from service.knee import Point

    return Point(
        row["size"], row["items_per_s"], row["p50_ms"], row["p99_ms"], row["device_memory_used_bytes"]
    )


# -- device memory ----------------------------------------------------------------------------------------


class DeviceMemory:
    """Memory of the GPU that ONNX Runtime's CUDA provider uses, read through NVML (nvidia-ml-py).

    ``used()`` is the whole device's usage, other processes included: NVML's per-process figures are not
    available inside most containers, and what neighbours hold is unavailable to the service all the same.
    ONNX Runtime's arena keeps what it grew to, so the figure after a size is the peak up to that size.
    """

    def __init__(self, nvml, handle) -> None:
        self._nvml = nvml
        self._handle = handle
        self.total: int = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
        self.name: str = nvml.nvmlDeviceGetName(handle)
        self.driver: str = nvml.nvmlSystemGetDriverVersion()

    @classmethod
    def open(cls, provider: str) -> DeviceMemory | None:
        """None unless ``provider`` is CUDA and NVML answers. A missing package or driver is only a
        warning: the sweep still runs, without the memory cap."""
        import os

        import structlog

        if provider != "CUDAExecutionProvider":
            return None
        log = structlog.get_logger("microbatch.sweep")
        try:
            import pynvml
        except ImportError:
            log.warning("device_memory_unmeasured", why="nvidia-ml-py is not installed (the bench extra)")
            return None
        try:
            pynvml.nvmlInit()
            device = nvml_device(os.environ.get("CUDA_VISIBLE_DEVICES"))
            by_uuid = isinstance(device, str)
            get = pynvml.nvmlDeviceGetHandleByUUID if by_uuid else pynvml.nvmlDeviceGetHandleByIndex
            return cls(pynvml, get(device))
        except pynvml.NVMLError as exc:
            log.warning("device_memory_unmeasured", why=str(exc))
            return None

    def used(self) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def describe(self) -> dict:
        return {"name": self.name, "memory_total_bytes": self.total, "driver": self.driver}

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def nvml_device(visible: str | None) -> int | str:
    """The NVML index or UUID of the device the CUDA provider uses (its device 0: the first visible one).

    NVML ignores CUDA_VISIBLE_DEVICES, so its first entry is mapped here. An index there counts in CUDA's
    order, which matches NVML's (PCI bus order) on the usual single-model machines.
    """
    first = (visible or "").split(",")[0].strip()
    if first.isdigit():
        return int(first)
    if first.startswith(("GPU-", "MIG-")):
        return first
    return 0


# -- report -----------------------------------------------------------------------------------------------


def build_report(*, model, engine, memory, rows: list[dict], stop: dict, settings: dict) -> dict:
    """Everything the sweep found, as the JSON document it writes (the plot and the table read it too)."""
    import time

    from service import knee

    rec = service = None
    if rows:
        service = _service_points(rows)
        rec = knee.recommend(
            [_point(r) for r in rows],
            gain=settings["knee_gain"],
            slo_ms=settings["slo_ms"],
            memory_total_bytes=memory.total if memory is not None else None,
            throughput=service,
        )
    engine_knee = knee.find_knee([_point(r) for r in rows], settings["knee_gain"]) if rows else None
    return {
        "command": "microbatch sweep",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": {"name": model.name, "version": model.version, "file": engine.path.name},
        "machine": machine_info(engine.provider, memory),
        "settings": {**settings, "memory_fraction": knee.DEFAULT_MEMORY_FRACTION},
        "rows": rows,
        "stop": stop,
        "knee": None if engine_knee is None else {"size": engine_knee.size, "found": engine_knee.found},
        "pipeline_knee": None if not service else {"size": rec.knee.size, "found": rec.knee.found},
        "recommendation": {
            "max_size": None if rec is None else rec.size,
            "reason": "nothing was measured" if rec is None else rec.reason,
            "slo_cap": None if rec is None else rec.slo_cap,
            "memory_cap": None if rec is None else rec.memory_cap,
            "setting": "MICROBATCH_BATCH__MAX_SIZE",
        },
    }


def _service_points(rows: list[dict]) -> list | None:
    """The whole service's throughput per size, over the sizes whose ``--pipeline`` drain finished; None
    without such figures (the recommendation then reads the engine's curve)."""
    from service.knee import Point

    points = [
        Point(r["size"], r["pipeline"]["events_per_s"], r["p50_ms"], r["p99_ms"])
        for r in rows
        if (r.get("pipeline") or {}).get("events_per_s")
    ]
    return points or None


def machine_info(provider: str, memory: DeviceMemory | None) -> dict:
    import os
    import platform

    import numpy
    import onnxruntime

    from service.benchmark.machine import cpu_model

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "python": platform.python_version(),
        "onnxruntime": onnxruntime.__version__,
        "numpy": numpy.__version__,
        "provider": provider,
        "gpu": memory.describe() if memory is not None else None,
    }


def format_report(report: dict) -> str:
    """The table and the verdict, for the terminal."""
    machine, settings, rows = report["machine"], report["settings"], report["rows"]
    knee, rec = report["knee"], report["recommendation"]
    gpu = machine["gpu"]
    pipeline = any(row.get("pipeline") for row in rows)
    lines = [
        f"{report['model']['name']} v{report['model']['version']} on {machine['provider']}"
        + (f" ({gpu['name']})" if gpu else f" ({machine['cpu']}, {machine['cpus_usable']} CPUs)")
        + f", intra-op threads {settings['intra_op_threads'] or 'auto'}, ~{settings['seconds']:g} s per size",
        f"{'size':>6} {'items/s':>11} {'p50 ms':>9} {'p99 ms':>9} {'batches':>8}"
        + (f" {'GPU MiB':>8}" if gpu else "")
        + (f" {'service/s':>10}" if pipeline else ""),
    ]
    for row in rows:
        marks = []
        if knee and row["size"] == knee["size"]:
            marks.append("knee")
        if row["size"] == rec["max_size"]:
            marks.append("recommended")
        if row["meets_slo"] is False:
            marks.append("over SLO")
        memory = row["device_memory_used_bytes"]
        service = (row.get("pipeline") or {}).get("events_per_s")
        service_knee = report.get("pipeline_knee") or {}
        if service_knee.get("found") and row["size"] == service_knee["size"]:
            marks.append("service knee")
        lines.append(
            f"{row['size']:>6} {row['items_per_s']:>11,.0f} {row['p50_ms']:>9.3f} {row['p99_ms']:>9.3f}"
            f" {row['batches']:>8}"
            + (f" {memory / 2**20:>8,.0f}" if gpu and memory is not None else "")
            + ((f" {service:>10,.0f}" if service else f" {'n/a':>10}") if pipeline else "")
            + (f"  <- {', '.join(marks)}" if marks else "")
        )
    stop = report["stop"]
    if stop["reason"] != "completed":
        lines.append(f"stopped at size {stop['size']} ({stop['reason']}): {stop['detail']}")
    if knee:
        gain = f"{settings['knee_gain']:.0%}"
        lines.append(
            f"knee: {knee['size']} (beyond it, doubling the batch gains less than {gain} throughput)"
            if knee["found"]
            else f"knee: not reached up to {knee['size']} (doubling still gained >= {gain}); try larger sizes"
        )
    service_knee = report.get("pipeline_knee")
    if service_knee:
        lines.append(
            f"whole service (service/s, backlog drains): knee {service_knee['size']}"
            if service_knee["found"]
            else f"whole service: no knee up to {service_knee['size']}"
        )
    if settings["slo_ms"] is not None and rec["slo_cap"] is not None:
        lines.append(f"SLO p99 <= {settings['slo_ms']:g} ms: met up to size {rec['slo_cap']}")
    if rec["memory_cap"] is not None:
        share, total = f"{settings['memory_fraction']:.0%}", gpu["memory_total_bytes"] / 2**30
        lines.append(f"device memory under {share} of {total:.0f} GiB: up to size {rec['memory_cap']}")
    if rec["max_size"] is None:
        lines.append(f"no recommendation: {rec['reason']}")
    else:
        lines.append(f"recommended: {rec['setting']}={rec['max_size']} ({rec['reason']})")
        if rec["max_size"] < settings["batch_min_size"]:
            lines.append(f"  (below MICROBATCH_BATCH__MIN_SIZE={settings['batch_min_size']}: lower that too)")
    return "\n".join(lines)


def _write_json(report: dict, path):
    import json

    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def _file_safe(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "model"
