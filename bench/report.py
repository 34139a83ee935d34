"""Markdown tables from a benchmark results file, so the figures in docs/BENCHMARKS.md are generated.

    python -m bench.report bench/results/bench-<id>.json            # print the tables
    python -m bench.report bench/results/bench-<id>.json --doc docs/BENCHMARKS.md

With ``--doc`` the text between the ``<!-- bench-results:begin -->`` and ``<!-- bench-results:end -->``
markers of that file is replaced, and nothing else in it is touched. Pure apart from that ``main``.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

BEGIN = "<!-- bench-results:begin -->"
END = "<!-- bench-results:end -->"
NA = "n/a"
WIDTH = 110
"""Prose lines are wrapped at this width, as the docs' own are; tables and headings are left whole."""
_AUTOGROUP = {
    True: "scheduler autogroup on (CPU shared per session: broker apart from the clients)",
    False: "scheduler autogroup off",
}


def render(result: Mapping[str, Any]) -> str:
    """The whole report: a line on the run and the machine, then per scenario the systems and the
    ratios with their targets."""
    parts = [_run_line(result)]
    for key, scenario in result.get("scenarios", {}).items():
        parts += [_scenario_heading(key, scenario), _systems_table(scenario)]
        parts += [line for line in [_repeats_line(scenario), _light_table(scenario)] if line]
        parts.append(_targets_table(scenario))
    return "\n\n".join(_wrapped(part) for part in parts) + "\n"


def _wrapped(part: str) -> str:
    """``part`` with each line of prose longer than WIDTH wrapped; table rows and headings as they are."""
    lines: list[str] = []
    for line in part.split("\n"):
        if len(line) <= WIDTH or line.startswith(("|", "#")):
            lines.append(line)
        else:
            lines += textwrap.wrap(line, WIDTH, break_long_words=False, break_on_hyphens=False)
    return "\n".join(lines)


def _run_line(result: Mapping[str, Any]) -> str:
    run, m, s = result.get("run", {}), result.get("machine", {}), result.get("settings", {})
    batch = s.get("batch", {})
    quick = " (quick: small backlogs, short runs; not for comparison)" if run.get("quick") else ""
    return (
        f"Run {run.get('date', NA)}{quick}, {_num(run.get('duration_s'), '{:.0f}')} s in all. "
        f"Machine: {m.get('cpu_model', NA)}, {m.get('cores', NA)} cores, {m.get('memory_gib', NA)} GiB, "
        f"{m.get('os', NA)}; load average at start {m.get('load_average_at_start', NA)}; "
        f"{_AUTOGROUP.get(m.get('sched_autogroup'), 'scheduler autogroup not known')}. "
        f"Python {m.get('python', NA)}, confluent-kafka {m.get('confluent_kafka', NA)} "
        f"(librdkafka {m.get('librdkafka', NA)}), onnxruntime {m.get('onnxruntime', NA)}, "
        f"Apache Kafka {m.get('kafka_broker', NA)} (single local broker). "
        f"Settings: batch {batch.get('min_size', NA)}-{batch.get('max_size', NA)}, "
        f"window {batch.get('max_wait_ms', NA)} ms, {s.get('partitions', NA)} input partitions, "
        f"intra-op threads {s.get('intra_op_threads', NA)} (0: one per core), "
        f"~{s.get('drain_seconds', NA)} s backlogs; latency runs at {_num(s.get('latency_load'), '{:.0%}')} "
        f"of each system's own drain rate (the service's: of its stream regime's, the `service-stream` row, "
        f"where a scenario has one), {s.get('settle_seconds', NA)} s unmeasured, then "
        f"{s.get('latency_seconds', NA)} s measured; light-load runs at "
        f"{_num(s.get('light_rate'), '{:,.0f}')} events/s."
    )


def _scenario_heading(key: str, scenario: Mapping[str, Any]) -> str:
    knee = scenario.get("measured_knee")
    pinned = (
        "; the row pinned at it ran batches of that size"
        if "service-knee" in scenario.get("systems", {})
        else ""
    )
    measured = (
        f" The defaults row measured a knee (drain ceiling) of {knee} at warm-up{pinned}." if knee else ""
    )
    backfill = scenario.get("backfill_batch_size")
    if backfill:
        measured += (
            f" The backfill, with the default settings, cut its batches at {backfill} (the knee it measured "
            f"at warm-up); the raw ONNX Runtime row at the backfill's batch size ran batches of that size."
        )
    return (
        f"#### {key}. {scenario.get('title', '')}: `{scenario.get('model', '')}`\n\n"
        f"Batches of up to {scenario.get('batch_size', NA)} (`BATCH__MAX_SIZE`) for the baselines and the "
        f"rows pinned at a size; batch inference time at that size (raw ONNX Runtime, median): "
        f"{_num(scenario.get('batch_inference_ms'), '{:.2f}')} ms.{measured}"
    )


def _light_table(scenario: Mapping[str, Any]) -> str:
    """The light-load runs (one fixed rate for every system with one); empty when there were none."""
    columns = (
        "system, light load",
        "sent /s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "mean batch",
        "CPU %",
        "CPU us/event",
        "p99 runs",
    )
    rows = [_row(columns), _row(["---"] * len(columns))]
    for name, system in (scenario.get("systems") or {}).items():
        light = system.get("light")
        if not light:
            continue
        runs = ", ".join(_num(p99, "{:.0f}") for p99 in system.get("light_p99_runs_ms") or [])
        rows.append(
            _row(
                [
                    name,
                    _num(light.get("sent_rate_per_s"), "{:,.0f}"),
                    _num(light.get("p50_ms"), "{:.1f}"),
                    _num(light.get("p95_ms"), "{:.1f}"),
                    _num(light.get("p99_ms"), "{:.1f}"),
                    _num(light.get("mean_batch_size"), "{:.1f}"),
                    _num(light.get("cpu_percent"), "{:.0f}"),
                    _num(light.get("cpu_us_per_event"), "{:.0f}"),
                    runs,
                ]
            )
        )
    return "\n".join(rows) if len(rows) > 2 else ""


def _repeats_line(scenario: Mapping[str, Any]) -> str:
    """Which of several latency runs of the service the table shows; empty for a single run."""
    runs = ((scenario.get("systems") or {}).get("service") or {}).get("latency_p99_runs_ms") or []
    if len(runs) < 2:
        return ""
    shown = ", ".join(_num(p99, "{:.1f}") for p99 in runs)
    return f"The service's p99 in its {len(runs)} latency runs: {shown} ms; the table shows the median run."


_SYSTEM_COLUMNS = (
    "system",
    "events/s",
    "latency run at /s",
    "p50 ms",
    "p95 ms",
    "p99 ms",
    "mean batch",
    "padding eff.",
    "CPU %",
    "peak RSS MiB",
)


def _systems_table(scenario: Mapping[str, Any]) -> str:
    rows = [_row(_SYSTEM_COLUMNS), _row(["---"] * len(_SYSTEM_COLUMNS))]
    for name, system in scenario.get("systems", {}).items():
        tp = system.get("throughput") or {}
        lat = system.get("latency") or {}
        batch = tp.get("mean_batch_size", tp.get("batch_size"))
        events = _num(tp.get("events_per_s"), "{:,.0f}")
        if not tp.get("complete", True):
            events += " (incomplete)"
        rows.append(
            _row(
                [
                    f"{name}: {system.get('label', '')}",
                    events,
                    _num(lat.get("rate_per_s"), "{:,.0f}"),
                    _num(lat.get("p50_ms"), "{:.1f}"),
                    _num(lat.get("p95_ms"), "{:.1f}"),
                    _num(lat.get("p99_ms"), "{:.1f}"),
                    _num(batch, "{:.1f}"),
                    _num(tp.get("padding_efficiency"), "{:.2f}"),
                    _num(tp.get("cpu_percent"), "{:.0f}"),
                    _num(tp.get("peak_rss_mib"), "{:.0f}"),
                ]
            )
        )
    return "\n".join(rows)


def _targets_table(scenario: Mapping[str, Any]) -> str:
    rows = [_row(["ratio or target", "value", "target", "verdict"]), _row(["---"] * 4)]
    for target in scenario.get("targets", []):
        threshold = target.get("threshold")
        wanted = NA if threshold is None else f"{target.get('op')} {threshold:g}"
        rows.append(
            _row([target.get("name", ""), _num(target.get("value"), "{:.2f}"), wanted, verdict(target)])
        )
    return "\n".join(rows)


def verdict(target: Mapping[str, Any]) -> str:
    """``pass``, ``FAIL``, ``-`` (a ratio with no target) or ``n/a`` (a figure it needs is missing)."""
    if target.get("threshold") is None:
        return "-"
    passed = target.get("passed")
    return NA if passed is None else ("pass" if passed else "FAIL")


def _num(value: Any, fmt: str) -> str:
    return NA if value is None else fmt.format(value)


def _row(cells: Any) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def replace_block(document: str, block: str) -> str:
    """``document`` with the text between the markers replaced by ``block``. Raises ValueError when the
    markers are missing or out of order."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the document has no {BEGIN} ... {END} block")
    return document[: start + len(BEGIN)] + "\n\n" + block.strip() + "\n\n" + document[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__)
    parser.add_argument("result", type=Path, help="a bench/results/bench-*.json file")
    parser.add_argument("--doc", type=Path, default=None, help="replace the marked block of this file")
    args = parser.parse_args(argv)
    text = render(json.loads(args.result.read_text()))
    if args.doc is None:
        sys.stdout.write(text)
    else:
        args.doc.write_text(replace_block(args.doc.read_text(), text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
