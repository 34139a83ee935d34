"""scripts/gpu-check.sh on this machine, against the real broker: where CUDA cannot serve it fails at once
and says why; told to run on CPU, the same script goes through both models end to end (the sweep, the
drains through the service, the report) and holds the provider it required to what served."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bench import gpucheck
from service.engine.providers import cuda_problem

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-check.sh"
QUICK = {"GPU_CHECK_SIZES": "1,8", "GPU_CHECK_SECONDS": "0.2", "GPU_CHECK_DRAIN_SECONDS": "1"}


def check(out: Path, bootstrap: str, **env: str) -> subprocess.CompletedProcess[str]:
    variables = {k: v for k, v in os.environ.items() if not k.startswith(("MICROBATCH_", "GPU_CHECK_"))}
    variables |= {"OUT": str(out), "MICROBATCH_KAFKA__BOOTSTRAP_SERVERS": bootstrap, **QUICK, **env}
    return subprocess.run(
        ["bash", str(SCRIPT)],
        cwd=ROOT,
        env=variables,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )


@pytest.mark.skipif(cuda_problem() is None, reason="a GPU can serve here: the check runs for real instead")
def test_where_cuda_cannot_serve_the_check_fails_and_says_why(kafka_bootstrap, tmp_path):
    done = check(tmp_path / "out", kafka_bootstrap)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "gpu-check FAILED: the sweep of metrics-anomaly exited 2" in done.stderr
    assert cuda_problem().split(" (")[0] in done.stderr  # the engine's reason, e.g. "no NVIDIA driver"


def test_told_to_run_on_cpu_the_check_goes_through_both_models(kafka_bootstrap, tmp_path):
    out = tmp_path / "out"
    done = check(out, kafka_bootstrap, GPU_CHECK_PROVIDERS="cpu", GPU_CHECK_REQUIRE="CPUExecutionProvider")
    assert done.returncode == 0, done.stdout + done.stderr
    for model in ("metrics-anomaly", "log-classifier"):
        assert f"{model} on CPUExecutionProvider (no GPU)" in done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith(("| 1 |", "| 8 |"))]
    assert len(rows) == 4 and not any("n/a |" in row.split("|")[6] for row in rows), rows  # service figures
    assert done.stdout.rstrip().endswith("gpu-check passed: every model served on CPUExecutionProvider "
                                         f"(target: service / model >= {gpucheck.TARGET})")  # fmt: skip
    # The same sweeps do not pass for CUDA: that is the check a GPU machine makes.
    assert gpucheck.main([str(out), "--require", "CUDAExecutionProvider"]) == 1
