"""bench/report.py: Markdown from a results dict, and the marked block of a document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.report import BEGIN, END, main, render, replace_block, verdict

RESULT = {
    "run": {"date": "2026-01-02T03:04:05+00:00", "quick": False, "duration_s": 321.0},
    "machine": {
        "cpu_model": "Some CPU",
        "cores": 2,
        "memory_gib": 8.0,
        "kafka_broker": "4.4.0",
        "sched_autogroup": False,
    },
    "settings": {"batch": {"min_size": 4, "max_size": 16, "max_wait_ms": 50.0}, "partitions": 4},
    "scenarios": {
        "A": {
            "title": "transport-bound",
            "model": "metrics-anomaly",
            "batch_size": 16,
            "batch_inference_ms": 0.025,
            "systems": {
                "service": {
                    "label": "service (micro-batched)",
                    "throughput": {
                        "complete": True,
                        "events_per_s": 12345.6,
                        "mean_batch_size": 15.9,
                        "padding_efficiency": None,
                        "cpu_percent": 104.2,
                        "peak_rss_mib": 120.4,
                    },
                    "latency": {"rate_per_s": 6172.8, "p50_ms": 5.0, "p95_ms": 9.5, "p99_ms": 14.25},
                    "latency_p99_runs_ms": [31.0, 14.25, 9.0],
                    "light": {"sent_rate_per_s": 1998.0, "p50_ms": 4.0, "p95_ms": 6.0, "p99_ms": 9.0,
                              "cpu_percent": 20.4, "cpu_us_per_event": 102.1, "mean_batch_size": 6.5},
                    "light_p99_runs_ms": [9.0, 12.0, 8.0],
                },
                "naive": {
                    "label": "naive per-message loop",
                    "throughput": {"complete": False, "events_per_s": None},
                    "latency": None,
                },
                "raw-ort": {
                    "label": "raw ONNX Runtime",
                    "throughput": {"complete": True, "events_per_s": 500000.0, "batch_size": 16},
                    "latency": None,
                },
            },
            "targets": [
                {"name": "service / passthrough throughput", "value": 0.4, "op": ">=", "threshold": 0.5,
                 "passed": False},
                {"name": "service / naive throughput", "value": None, "op": ">=", "threshold": 5.0,
                 "passed": None},
                {"name": "service / other throughput", "value": 2.0, "op": ">=", "threshold": None,
                 "passed": None},
                {"name": "service p99 latency at 50% of its drain rate (ms)", "value": 14.25, "op": "<=",
                 "threshold": 60.05, "passed": True},
            ],
        }
    },
}  # fmt: skip


def table_rows(text: str, first_cell: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].startswith(first_cell):
            rows.append(cells)
    return rows


def test_systems_table_has_one_row_per_system_with_formatted_figures():
    text = render(RESULT)
    (service,) = table_rows(text, "service: ")
    assert service[1:] == ["12,346", "6,173", "5.0", "9.5", "14.2", "15.9", "n/a", "104", "120"]


def test_missing_figures_are_n_a_and_an_unfinished_system_is_marked():
    text = render(RESULT)
    (naive,) = table_rows(text, "naive: ")
    assert naive[1] == "n/a (incomplete)"
    (raw,) = table_rows(text, "raw-ort: ")
    assert raw[6] == "16.0"  # the in-process baseline's fixed batch size stands in for the mean


def test_targets_table_shows_value_threshold_and_verdict():
    rows = {r[0]: r[1:] for r in table_rows(render(RESULT), "service ")}
    assert rows["service / passthrough throughput"] == ["0.40", ">= 0.5", "FAIL"]
    assert rows["service / naive throughput"] == ["n/a", ">= 5", "n/a"]
    assert rows["service / other throughput"] == ["2.00", "n/a", "-"]
    assert rows["service p99 latency at 50% of its drain rate (ms)"] == ["14.25", "<= 60.05", "pass"]


def test_the_run_line_names_the_date_machine_and_settings():
    first = render(RESULT).split("\n\n")[0].replace("\n", " ")
    for expected in ("2026-01-02T03:04:05+00:00", "Some CPU", "2 cores", "Apache Kafka 4.4.0", "batch 4-16"):
        assert expected in first
    assert "quick" not in first
    assert "scheduler autogroup off" in first
    autogroup = render(RESULT | {"machine": RESULT["machine"] | {"sched_autogroup": True}}).split("\n\n")[0]
    assert "scheduler autogroup on" in autogroup
    quick = render(RESULT | {"run": RESULT["run"] | {"quick": True}}).splitlines()[0]
    assert "not for comparison" in quick


def test_repeated_latency_runs_are_all_shown_and_a_single_run_adds_no_line():
    assert "p99 in its 3 latency runs: 31.0, 14.2, 9.0 ms; the table shows the median run" in render(RESULT)
    single = json.loads(json.dumps(RESULT))
    single["scenarios"]["A"]["systems"]["service"]["latency_p99_runs_ms"] = [14.25]
    assert "the table shows the median run" not in render(single)


def test_render_copes_with_an_empty_result():
    assert "n/a" in render({})


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ({"threshold": 1, "passed": True}, "pass"),
        ({"threshold": 1, "passed": False}, "FAIL"),
        ({"threshold": 1, "passed": None}, "n/a"),
        ({"threshold": None, "passed": None}, "-"),
    ],
)
def test_verdict(target, expected):
    assert verdict(target) == expected


def test_replace_block_touches_only_the_marked_text():
    doc = f"# Title\n\nintro\n\n{BEGIN}\nold table\n{END}\n\n## Batch-size sweep\n\nkept\n"
    new = replace_block(doc, "| new | table |")
    assert new == f"# Title\n\nintro\n\n{BEGIN}\n\n| new | table |\n\n{END}\n\n## Batch-size sweep\n\nkept\n"
    assert replace_block(new, "| new | table |") == new


def test_replace_block_refuses_a_document_without_markers():
    with pytest.raises(ValueError, match="bench-results"):
        replace_block("# no markers\n", "x")


def test_main_prints_or_updates_a_document(tmp_path, capsys):
    result = tmp_path / "bench.json"
    result.write_text(json.dumps(RESULT))
    assert main([str(result)]) == 0
    assert "| service: service (micro-batched) |" in capsys.readouterr().out
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text(f"before\n{BEGIN}\n{END}\nafter\n")
    assert main([str(result), "--doc", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("before\n") and text.endswith("after\n")
    assert "12,346" in text


def test_light_load_runs_get_a_table_of_their_own():
    text = render(RESULT)
    rows = table_rows(text, "service")
    light = [row for row in rows if row[1] == "1,998"]
    assert light == [["service", "1,998", "4.0", "6.0", "9.0", "6.5", "20", "102", "9, 12, 8"]]
    header = next(line for line in text.splitlines() if line.startswith("| system, light load |"))
    assert header.count("|") == len(light[0]) + 1  # one heading per cell


def test_no_light_load_runs_no_light_table():
    result = json.loads(json.dumps(RESULT))
    del result["scenarios"]["A"]["systems"]["service"]["light"]
    assert "light load |" not in render(result)


def test_the_heading_names_the_backfill_batch_size_and_its_rows_are_tabled():
    result = json.loads(json.dumps(RESULT))
    scenario = result["scenarios"]["A"]
    assert "backfill" not in render(result)
    scenario["backfill_batch_size"] = 128
    scenario["systems"]["backfill"] = {
        "label": "microbatch backfill",
        "throughput": {"complete": True, "events_per_s": 20000.0, "mean_batch_size": 127.9},
        "latency": None,
    }
    ratio = {"name": "backfill / service throughput", "value": 1.62, "op": ">=", "threshold": 1.3}
    scenario["targets"].insert(0, ratio | {"passed": True})
    text = render(result)
    assert "The backfill, with the default settings, cut its batches at 128" in " ".join(text.split())
    (row,) = table_rows(text, "backfill: ")
    assert row[1:3] == ["20,000", "n/a"] and row[6] == "127.9"
    (verdict_row,) = table_rows(text, "backfill / service")
    assert verdict_row[1:] == ["1.62", ">= 1.3", "pass"]


RESULTS = sorted((Path(__file__).resolve().parents[3] / "bench" / "results").glob("bench-2026*.json"))


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_every_stored_results_file_still_renders(path):
    """Results files from before the plain loop (the passthrough as the ceiling) render as they were."""
    text = render(json.loads(path.read_text()))
    assert "| ratio or target |" in text


def test_the_plain_loop_and_the_service_transport_are_rows_and_their_ratio_is_reported_only():
    result = json.loads(json.dumps(RESULT))
    scenario = result["scenarios"]["A"]
    for name, label, rate in (
        ("plain", "plain consume-produce loop (transport ceiling)", 110000.0),
        ("passthrough", "service transport, no model", 99000.0),
    ):
        scenario["systems"][name] = {
            "label": label,
            "throughput": {"complete": True, "events_per_s": rate},
            "latency": None,
            "light": {"sent_rate_per_s": 2000.0, "p99_ms": 7.0, "cpu_us_per_event": 60.0},
        }
    scenario["targets"] += [
        {"name": "passthrough / plain throughput", "value": 0.9, "op": ">=", "threshold": None,
         "passed": None},
        {"name": "service / plain CPU per event at 2,000/s", "value": 1.7, "op": "<=", "threshold": 2.0,
         "passed": True},
    ]  # fmt: skip
    text = render(result)
    (plain,) = table_rows(text, "plain: ")
    assert plain[1] == "110,000"
    (transport,) = table_rows(text, "passthrough: service transport")
    assert transport[1] == "99,000"
    rows = {r[0]: r[1:] for r in table_rows(text, "")}
    assert rows["passthrough / plain throughput"] == ["0.90", "n/a", "-"]
    assert rows["service / plain CPU per event at 2,000/s"] == ["1.70", "<= 2", "pass"]
    assert rows["plain"][:1] == ["2,000"]  # its light-load row
