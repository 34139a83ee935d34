"""What a sweep found: the JSON document it writes (the plot reads it too) and the table it prints."""

from __future__ import annotations

import json
import os
import platform
import re
import time
from pathlib import Path
from typing import Any

import numpy
import onnxruntime

from service.config import BatchSettings
from service.engine import knee
from service.engine.knee import Point
from service.engine.memory import DeviceMemory
from service.tools.harness.machine import cpu_model
from service.tools.sweep.measure import point


def build_report(*, model, engine, memory, rows: list[dict], stop: dict, settings: dict) -> dict:
    """Everything the sweep found, as the JSON document it writes (the plot and the table read it too)."""
    rec = service = None
    if rows:
        service = _service_points(rows)
        rec = knee.recommend(
            [point(r) for r in rows],
            gain=settings["knee_gain"],
            slo_ms=settings["slo_ms"],
            memory_total_bytes=memory.total if memory is not None else None,
            throughput=service,
        )
    engine_knee = knee.find_knee([point(r) for r in rows], settings["knee_gain"]) if rows else None
    return {
        "command": "microbatch sweep",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": {"name": model.name, "version": model.version, "file": engine.path.name},
        "machine": machine_info(engine.provider, memory),
        "settings": {**settings, "memory_fraction": knee.DEFAULT_MEMORY_FRACTION},
        "rows": rows,
        "stop": stop,
        "knee": None if engine_knee is None else {"size": engine_knee.size, "found": engine_knee.found},
        "pipeline_knee": None
        if not service or rec is None
        else {"size": rec.knee.size, "found": rec.knee.found},
        "recommendation": {
            "max_size": None if rec is None else rec.size,
            "reason": "nothing was measured" if rec is None else rec.reason,
            "slo_cap": None if rec is None else rec.slo_cap,
            "memory_cap": None if rec is None else rec.memory_cap,
            "setting": BatchSettings.env("max_size"),
        },
    }


def _service_points(rows: list[dict]) -> list | None:
    """The whole service's throughput per size, over the sizes whose ``--pipeline`` drain finished; None
    without such figures (the recommendation then reads the engine's curve)."""
    points = [
        Point(r["size"], r["pipeline"]["events_per_s"], r["p50_ms"], r["p99_ms"])
        for r in rows
        if (r.get("pipeline") or {}).get("events_per_s")
    ]
    return points or None


def machine_info(provider: str, memory: DeviceMemory | None) -> dict:
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
            lines.append(
                f"  (below {BatchSettings.env('min_size')}={settings['batch_min_size']}: lower that too)"
            )
    return "\n".join(lines)


def write_json(report: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "model"
