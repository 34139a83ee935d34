"""Charts of benchmark reports, drawn from the JSON documents the commands write (so they can be redrawn).

Needs matplotlib (the ``bench`` extra). It draws on an Agg canvas directly: no GUI, no display, and no
pyplot global state to leak between calls.
"""

from __future__ import annotations

from pathlib import Path


def plot_sweep(report: dict, path: Path) -> None:
    """Write a PNG of a ``microbatch sweep`` report (see :func:`service.tools.sweep.report.build_report`).

    Panels share a log2 batch-size axis: throughput with the knee and the recommendation marked; p50/p99
    batch latency with the SLO; device memory with its cap, when it was measured. ``report["rows"]`` must
    not be empty.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullLocator

    rows = report["rows"]
    sizes = [r["size"] for r in rows]
    memory = [r["device_memory_used_bytes"] for r in rows]
    gpu = report["machine"]["gpu"]
    panels = 3 if gpu and None not in memory else 2

    fig = Figure(figsize=(7.5, 2.6 * panels + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(panels, 1, sharex=True)
    _throughput(axes[0], report, sizes)
    _latency(axes[1], report, sizes)
    if panels == 3:
        _memory(axes[2], report, sizes, memory)
    bottom = axes[-1]
    bottom.set_xscale("log", base=2)
    bottom.set_xticks(sizes, labels=[str(s) for s in sizes])
    bottom.xaxis.set_minor_locator(NullLocator())
    bottom.set_xlabel("batch size (items)")
    axes[0].yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    fig.suptitle(_title(report), fontsize=10)
    fig.savefig(path, dpi=120)


def _throughput(ax, report: dict, sizes: list[int]) -> None:
    rows, knee, rec = report["rows"], report["knee"], report["recommendation"]
    ax.plot(sizes, [r["items_per_s"] for r in rows], marker="o", color="tab:blue", label="engine")
    service = [
        (r["size"], r["pipeline"]["events_per_s"])
        for r in rows
        if (r.get("pipeline") or {}).get("events_per_s")
    ]
    if service:
        ax.plot(*zip(*service, strict=True), marker="^", color="tab:cyan", label="whole service (drain)")
    ax.set_ylabel("items/s")
    top = max([r["items_per_s"] for r in rows] + [rate for _, rate in service])
    ax.set_ylim(0, 1.12 * top)  # headroom: the star must not be clipped
    if knee is not None:
        label = f"engine knee: {knee['size']}" if knee["found"] else f"no engine knee up to {knee['size']}"
        ax.axvline(knee["size"], color="gray", linestyle="--", linewidth=1, label=label)
    service_knee = report.get("pipeline_knee")
    if service_knee is not None and service_knee["found"]:
        label = f"service knee: {service_knee['size']}"
        ax.axvline(service_knee["size"], color="tab:cyan", linestyle=":", linewidth=1, label=label)
    if rec["max_size"] is not None:
        # On the curve the recommendation was read from: the whole service's when it was measured.
        best = dict(service).get(rec["max_size"]) or next(
            r["items_per_s"] for r in rows if r["size"] == rec["max_size"]
        )
        ax.plot(
            [rec["max_size"]], [best], marker="*", markersize=14, color="tab:green", linestyle="",
            label=f"recommended MAX_SIZE: {rec['max_size']}",
        )  # fmt: skip
    ax.legend(loc="upper left", fontsize=8)  # curves rise to the right: small sizes leave room up there
    ax.grid(True, alpha=0.3)


def _latency(ax, report: dict, sizes: list[int]) -> None:
    from matplotlib.ticker import FuncFormatter

    rows, slo = report["rows"], report["settings"]["slo_ms"]
    ax.plot(sizes, [r["p50_ms"] for r in rows], marker="o", color="tab:orange", label="p50")
    ax.plot(sizes, [r["p99_ms"] for r in rows], marker="s", color="tab:red", label="p99")
    if slo is not None:
        ax.axhline(slo, color="black", linestyle=":", linewidth=1, label=f"SLO {slo:g} ms")
    if report["knee"] is not None:
        ax.axvline(report["knee"]["size"], color="gray", linestyle="--", linewidth=1)
    ax.set_yscale("log")  # latency spans orders of magnitude from 1 item to hundreds
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel("batch latency (ms)")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(True, alpha=0.3, which="both")


def _memory(ax, report: dict, sizes: list[int], memory: list[int]) -> None:
    gib = 2**30
    total = report["machine"]["gpu"]["memory_total_bytes"]
    fraction = report["settings"]["memory_fraction"]
    ax.plot(sizes, [m / gib for m in memory], marker="o", color="tab:purple", label="device memory used")
    ax.axhline(fraction * total / gib, color="black", linestyle=":", linewidth=1, label=f"{fraction:.0%} cap")
    ax.set_ylabel("GiB")
    ax.set_ylim(0, total / gib)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(True, alpha=0.3)


def _title(report: dict) -> str:
    model, machine, settings = report["model"], report["machine"], report["settings"]
    where = machine["gpu"]["name"] if machine["gpu"] else f"{machine['cpu']}, {machine['cpus_usable']} CPUs"
    threads = settings["intra_op_threads"] or "auto"
    return (
        f"{model['name']} v{model['version']}: {machine['provider']} ({where})\n"
        f"onnxruntime {machine['onnxruntime']}, intra-op threads {threads}, "
        f"~{settings['seconds']:g} s per size"
    )
