"""bench/gpucheck.py: the GPU check's tables and verdict, from sweep reports."""

from __future__ import annotations

import json

from bench import gpucheck


def report(
    provider: str = "CUDAExecutionProvider", stop: str = "completed", name: str = "metrics-anomaly"
) -> dict:
    return {
        "model": {"name": name},
        "machine": {"provider": provider, "gpu": {"name": "NVIDIA H200"}},
        "stop": {"reason": stop, "detail": "out of memory at 512"},
        "rows": [
            {"size": 64, "items_per_s": 1_000_000.0, "p50_ms": 0.05, "p99_ms": 0.08,
             "device_memory_used_bytes": 600 * 2**20, "pipeline": {"events_per_s": 950_000.0}},
            {"size": 512, "items_per_s": 4_000_000.0, "p50_ms": 0.1, "p99_ms": 0.2,
             "device_memory_used_bytes": None, "pipeline": None},
        ],
    }  # fmt: skip


def test_each_size_sets_the_service_against_the_model_alone():
    rows = gpucheck.table(report())
    assert rows[2] == "| 64 | 1,000,000 | 0.050 | 0.080 | 600 | 950,000 | 0.95 |"
    assert rows[3] == "| 512 | 4,000,000 | 0.100 | 0.200 | n/a | n/a | n/a |"


def test_another_provider_or_a_sweep_cut_short_fails_the_check():
    assert gpucheck.verdict(report(), "CUDAExecutionProvider") is None
    assert gpucheck.verdict(report("CPUExecutionProvider"), "CUDAExecutionProvider") == (
        "CUDAExecutionProvider was not used: CPUExecutionProvider served"
    )
    assert "out of memory at 512" in gpucheck.verdict(report(stop="memory"), "CUDAExecutionProvider")


def test_the_exit_code_says_whether_every_model_served_on_the_required_provider(tmp_path, capsys):
    assert gpucheck.main([str(tmp_path)]) == 2  # nothing swept
    (tmp_path / "sweep-metrics-anomaly.json").write_text(json.dumps(report()))
    assert gpucheck.main([str(tmp_path)]) == 0
    assert "metrics-anomaly on CUDAExecutionProvider (NVIDIA H200)" in capsys.readouterr().out
    cpu = report("CPUExecutionProvider", name="log-classifier")
    (tmp_path / "sweep-log-classifier.json").write_text(json.dumps(cpu))
    assert gpucheck.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert out.rstrip().endswith(
        "gpu-check FAILED: log-classifier: CUDAExecutionProvider was not used: CPUExecutionProvider served"
    )
