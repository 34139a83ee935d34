"""``microbatch sweep`` run in-process on the reference models, plus its parts that need no model.

Timings are never asserted (machines are noisy): only the report's structure and invariants.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import structlog

from service.cli import main
from service.engine import memory
from service.models.reference import MODELS_DIR
from service.observability import logs
from service.tools.sweep import measure
from service.tools.sweep import report as sweep_report
from service.tools.sweep.plot import plot_sweep

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def uncached_loggers(monkeypatch):
    """``main`` configures structlog to cache every logger on first use, bound to the stderr of that moment:
    here capsys's, closed after the test, and module-level loggers outlive tests. So loggers stay uncached
    during these tests, and the configuration is restored after each."""
    saved = structlog.get_config()
    configure = logs.configure

    def configure_uncached(settings) -> None:
        configure(settings)
        structlog.configure(cache_logger_on_first_use=False)

    monkeypatch.setattr(logs, "configure", configure_uncached)
    yield
    structlog.configure(**saved)


def run_sweep(out: Path, *flags: str) -> int:
    return main(["sweep", *flags, "--out", str(out)])


def load_report(out: Path, model: str) -> dict:
    return json.loads((out / f"sweep-{model}.json").read_text())


def check_report_invariants(report: dict, sizes: list[int]) -> None:
    rows = report["rows"]
    measured = [r["size"] for r in rows]
    assert measured == sizes[: len(measured)], "sizes run in increasing order, as a prefix of those asked"
    assert measured == sorted(set(measured))
    for row in rows:
        assert row["items_per_s"] > 0
        assert 0 < row["p50_ms"] <= row["p99_ms"]
        assert row["batches"] >= measure.MIN_BATCHES
    assert report["knee"]["size"] in measured
    rec = report["recommendation"]
    assert rec["setting"] == "MICROBATCH_BATCH__MAX_SIZE"
    assert rec["max_size"] in measured
    assert rec["max_size"] <= report["knee"]["size"]
    machine = report["machine"]
    for key in ("cpu_count", "platform", "python", "onnxruntime", "provider"):
        assert machine[key], key
    assert report["settings"]["sizes"] == sizes


def test_sweep_of_the_metrics_model_writes_json_and_png(tmp_path, capsys):
    rc = run_sweep(tmp_path, "--model", "metrics-anomaly", "--sizes", "1,2,4,8", "--seconds", "0.2")
    assert rc == 0
    report = load_report(tmp_path, "metrics-anomaly")
    check_report_invariants(report, [1, 2, 4, 8])
    assert report["stop"]["reason"] == "completed"
    assert [r["size"] for r in report["rows"]] == [1, 2, 4, 8]
    assert "metrics events" in report["settings"]["inputs"]
    assert report["model"] == {"name": "metrics-anomaly", "version": "1", "file": "metrics-anomaly.onnx"}
    assert (tmp_path / "sweep-metrics-anomaly.png").read_bytes()[:8] == PNG_MAGIC
    printed = capsys.readouterr().out
    assert f"MICROBATCH_BATCH__MAX_SIZE={report['recommendation']['max_size']}" in printed


def test_sweep_of_the_log_model_uses_generated_log_lines(tmp_path):
    rc = run_sweep(
        tmp_path, "--model", "log-classifier", "--sizes", "4,1,2", "--seconds", "0.1", "--providers", "cpu"
    )
    assert rc == 0
    report = load_report(tmp_path, "log-classifier")
    check_report_invariants(report, [1, 2, 4])
    assert "log events" in report["settings"]["inputs"]
    assert report["machine"]["provider"] == "CPUExecutionProvider"
    assert report["machine"]["gpu"] is None
    assert (tmp_path / "sweep-log-classifier.png").read_bytes()[:8] == PNG_MAGIC


def test_a_model_path_runs_on_its_processor_sample_without_a_plot(tmp_path):
    path = MODELS_DIR / "metrics-anomaly.onnx"
    rc = run_sweep(tmp_path, "--model", str(path), "--sizes", "1,2", "--seconds", "0.05", "--no-plot")
    assert rc == 0
    report = load_report(tmp_path, "metrics-anomaly")  # the name comes from the model's metadata
    assert "sample()" in report["settings"]["inputs"]
    assert not list(tmp_path.glob("*.png"))


def test_an_slo_no_size_meets_stops_at_once_with_no_recommendation(tmp_path, capsys):
    rc = run_sweep(
        tmp_path, "--model", "metrics-anomaly", "--sizes", "1,2,4", "--seconds", "0.05", "--slo-ms", "1e-9"
    )
    assert rc == 1
    report = load_report(tmp_path, "metrics-anomaly")
    assert [r["size"] for r in report["rows"]] == [1]  # measured, over the SLO, and the last one tried
    assert report["rows"][0]["meets_slo"] is False
    assert (report["stop"]["reason"], report["stop"]["size"]) == ("slo", 1)
    assert report["recommendation"]["max_size"] is None
    assert report["recommendation"]["slo_cap"] == 0
    assert "no recommendation" in capsys.readouterr().out


@pytest.mark.parametrize("sizes", ["1,two,4", "0,2", "", " , ", "1,70000", "-4"])
def test_a_bad_sizes_value_exits_2_naming_the_flag(tmp_path, capsys, sizes):
    rc = run_sweep(tmp_path, "--model", "metrics-anomaly", f"--sizes={sizes}")
    assert rc == 2
    assert "--sizes" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("flag", "value"), [("--seconds", "0"), ("--slo-ms", "-1"), ("--knee-gain", "0"), ("--knee-gain", "2")]
)
def test_bad_numbers_exit_2_naming_the_flag(tmp_path, capsys, flag, value):
    rc = run_sweep(tmp_path, "--model", "metrics-anomaly", flag, value)
    assert rc == 2
    assert flag in capsys.readouterr().err


def test_an_out_folder_that_is_a_file_exits_2_naming_the_flag(tmp_path, capsys):
    (tmp_path / "taken").write_text("")
    rc = run_sweep(tmp_path / "taken", "--model", "metrics-anomaly")
    assert rc == 2
    assert "--out" in capsys.readouterr().err


def test_an_unknown_model_exits_2_naming_the_flag(tmp_path, capsys):
    rc = run_sweep(tmp_path, "--model", "no-such-model")
    assert rc == 2
    err = capsys.readouterr().err
    assert "--model" in err
    assert "metrics-anomaly" in err  # the choices are listed


def test_an_unknown_provider_exits_2_naming_the_flag(tmp_path, capsys):
    rc = run_sweep(tmp_path, "--model", "metrics-anomaly", "--providers", "QuantumExecutionProvider")
    assert rc == 2
    assert "--providers" in capsys.readouterr().err


# -- the measuring loop, with fakes ---------------------------------------------------------------------


class ListProcessor:
    """Items are ints; the 'tensor' is the list itself."""

    def preprocess(self, items):
        return {"x": list(items)}

    def postprocess(self, outputs, items):
        return [{} for _ in items]

    def sample(self):
        return 0


class FailingEngine:
    """Runs batches below ``fail_at`` items; raises ``message`` from there on."""

    def __init__(self, fail_at: int, message: str) -> None:
        self.fail_at, self.message = fail_at, message

    def run(self, feeds):
        if len(feeds["x"]) >= self.fail_at:
            raise RuntimeError(self.message)
        return {"y": feeds["x"]}


def test_out_of_memory_stops_the_sweep_and_keeps_the_sizes_before_it():
    engine = FailingEngine(8, "Failed to allocate memory for requested buffer of size 123456")
    rows, stop = measure.sweep_sizes(engine, ListProcessor(), [0], [1, 2, 4, 8, 16], 0.001, None, None)
    assert [r["size"] for r in rows] == [1, 2, 4]
    assert (stop["reason"], stop["size"]) == ("oom", 8)
    assert "Failed to allocate" in stop["detail"]


def test_another_error_stops_the_sweep_as_an_error():
    engine = FailingEngine(2, "Got invalid dimensions for input: x")
    rows, stop = measure.sweep_sizes(engine, ListProcessor(), [0], [1, 2, 4], 0.001, None, None)
    assert [r["size"] for r in rows] == [1]
    assert (stop["reason"], stop["size"]) == ("error", 2)


def test_prepare_runs_before_preprocess_when_the_processor_has_it():
    class Preparing(ListProcessor):
        def prepare(self, items):
            return [item + 100 for item in items]

        def preprocess(self, items):
            assert all(item >= 100 for item in items)
            return super().preprocess(items)

    measure.run_batch(FailingEngine(10**6, ""), Preparing(), [1, 2, 3])


def test_batches_cycle_through_the_pool_in_order():
    source = measure.batches([1, 2, 3], 2)
    assert [next(source) for _ in range(4)] == [[1, 2], [3, 1], [2, 3], [1, 2]]
    assert next(measure.batches([7], 3)) == [7, 7, 7]


# -- device memory (no GPU needed) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("visible", "device"),
    [
        (None, 0),
        ("", 0),
        ("2", 2),
        ("3,1", 3),
        ("GPU-8f6e1c2a-aaaa", "GPU-8f6e1c2a-aaaa"),
        ("MIG-1", "MIG-1"),
    ],
)
def test_the_nvml_device_follows_cuda_visible_devices(visible, device):
    assert memory.nvml_device(visible) == device


@pytest.mark.parametrize(
    ("visible", "device_id", "device"),
    [(None, 2, 2), ("3,1", 1, 1), ("GPU-a,GPU-b", 1, "GPU-b"), ("0", 1, 1)],
)
def test_the_nvml_device_is_the_device_id_th_visible_one(visible, device_id, device):
    """MICROBATCH_GPU__DEVICE_ID counts among the visible devices, as CUDA does; past them, it is NVML's
    own index."""
    assert memory.nvml_device(visible, device_id) == device


def fake_nvml(*, fail: bool = False) -> SimpleNamespace:
    class NVMLError(Exception):
        pass

    def init():
        if fail:
            raise NVMLError("NVML Shared Library Not Found")

    calls = []
    memory = SimpleNamespace(total=100 * 2**30, used=30 * 2**30)
    return SimpleNamespace(
        NVMLError=NVMLError,
        nvmlInit=init,
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByIndex=lambda i: ("index", i),
        nvmlDeviceGetHandleByUUID=lambda u: ("uuid", u),
        nvmlDeviceGetMemoryInfo=lambda handle: memory,
        nvmlDeviceGetName=lambda handle: "Test GPU",
        nvmlSystemGetDriverVersion=lambda: "999.1",
        nvmlDeviceGetUtilizationRates=lambda handle: SimpleNamespace(gpu=37, memory=12),
        calls=calls,
    )


def test_device_memory_is_read_only_for_cuda(monkeypatch):
    nvml = fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert memory.DeviceMemory.open("CPUExecutionProvider") is None
    device = memory.DeviceMemory.open("CUDAExecutionProvider")
    assert device is not None
    assert device._handle == ("index", 1)
    assert (device.total, device.used()) == (100 * 2**30, 30 * 2**30)
    assert device.utilization() == 0.37
    assert device.describe() == {"name": "Test GPU", "memory_total_bytes": 100 * 2**30, "driver": "999.1"}
    device.close()
    assert nvml.calls == ["shutdown"]


def test_device_memory_without_nvml_is_only_a_warning(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(fail=True))
    assert memory.DeviceMemory.open("CUDAExecutionProvider") is None
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: import raises ImportError
    assert memory.DeviceMemory.open("CUDAExecutionProvider") is None


def test_the_plot_has_a_memory_panel_when_memory_was_measured(tmp_path):
    rows = [
        {"size": s, "items_per_s": 1000.0 * s**0.5, "p50_ms": 0.1 * s, "p99_ms": 0.2 * s, "batches": 9,
         "mean_ms": 0.1 * s, "meets_slo": s <= 8, "device_memory_used_bytes": (20 + s) * 2**30}
        for s in (1, 2, 4, 8, 16)
    ]  # fmt: skip
    report = {
        "model": {"name": "m", "version": "1", "file": "m.onnx"},
        "machine": {
            "provider": "CUDAExecutionProvider",
            "onnxruntime": "1.0",
            "cpu": "cpu",
            "cpus_usable": 2,
            "gpu": {"name": "Test GPU", "memory_total_bytes": 40 * 2**30, "driver": "1"},
        },
        "settings": {"slo_ms": 2.0, "memory_fraction": 0.7, "seconds": 1.0, "intra_op_threads": 0},
        "rows": rows,
        "knee": {"size": 16, "found": False},
        "recommendation": {"max_size": 8, "slo_cap": 8, "memory_cap": 8},
    }
    plot_sweep(report, tmp_path / "gpu.png")
    assert (tmp_path / "gpu.png").read_bytes()[:8] == PNG_MAGIC


# -- --pipeline: the pure parts and the flags (the drains themselves: tests/integration) ---------------


def test_pipeline_needs_a_reference_model(tmp_path, capsys):
    path = MODELS_DIR / "metrics-anomaly.onnx"
    rc = run_sweep(tmp_path, "--model", str(path), "--sizes", "1", "--seconds", "0.05", "--pipeline")
    assert rc == 2
    assert "--pipeline" in capsys.readouterr().err


def test_each_reference_model_drains_the_events_of_its_bench_scenario():
    from service.models.reference import reference_names
    from service.tools.sweep.pipeline import scenario_for

    scenarios = {name: scenario_for(name) for name in reference_names()}
    assert {name: s.kind for name, s in scenarios.items() if s is not None} == {
        "metrics-anomaly": "metrics",
        "log-classifier": "logs",
    }
    # host-anomaly's items are rows assembled from agents' points: no JSON events to drain.
    assert scenarios["host-anomaly"] is None
    assert scenario_for("my-model") is None


def test_a_bad_drain_time_exits_2_naming_the_flag(tmp_path, capsys):
    rc = run_sweep(tmp_path, "--model", "metrics-anomaly", "--pipeline", "--drain-seconds", "0")
    assert rc == 2
    assert "--drain-seconds" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("rate", "size", "events"),
    [(60_000.0, 1, 15_000), (60_000.0, 8, 120_000), (60_000.0, 16, 240_000), (60_000.0, 256, 240_000),
     (4_000.0, 1, 2_000)],
)  # fmt: skip
def test_pipeline_backlogs_shrink_with_small_batches_and_never_below_the_minimum(rate, size, events):
    from service.tools.sweep.pipeline import backlog_events

    assert backlog_events(rate, size, 4.0) == events


def _rows_with_service(service_rates: dict[int, float | None]) -> list[dict]:
    """Engine throughput that never flattens (no engine knee), and the given whole-service rates."""
    return [
        {"size": s, "items_per_s": 1000.0 * s, "p50_ms": 0.1, "p99_ms": 0.2, "batches": 9, "mean_ms": 0.1,
         "meets_slo": None, "device_memory_used_bytes": None,
         "pipeline": {"events_per_s": rate, "complete": rate is not None, "cpu_percent": 90.0,
                      "mean_batch_size": float(s)}}
        for s, rate in service_rates.items()
    ]  # fmt: skip


def _report(rows: list[dict]) -> dict:
    engine = SimpleNamespace(path=Path("m.onnx"), provider="CPUExecutionProvider")
    settings = {"knee_gain": 0.10, "slo_ms": None, "seconds": 1.0, "intra_op_threads": 0, "batch_min_size": 4}
    model = SimpleNamespace(name="m", version="1")
    stop = {"reason": "completed"}
    return sweep_report.build_report(
        model=model, engine=engine, memory=None, rows=rows, stop=stop, settings=settings
    )


def test_the_whole_services_knee_caps_the_recommendation():
    report = _report(_rows_with_service({4: 20_000.0, 8: 40_000.0, 16: 60_000.0, 32: 63_000.0, 64: 64_000.0}))
    assert report["knee"] == {"size": 64, "found": False}  # the engine alone keeps gaining
    assert report["pipeline_knee"] == {"size": 16, "found": True}  # 16 -> 32 gained only 5%
    assert report["recommendation"]["max_size"] == 16
    assert report["recommendation"]["reason"] == "the whole service's knee"
    table = sweep_report.format_report(report)
    assert "service/s" in table and "60,000" in table
    assert "<- recommended, service knee" in table


def test_the_service_knee_wins_even_above_the_engine_knee_but_the_slo_still_caps_it():
    # Bucketing makes the service gain from sizes where the engine alone, fed in arrival order, has
    # levelled off (log-classifier: engine knee 4, service knee 32).
    rows = _rows_with_service({4: 4_000.0, 8: 6_000.0, 16: 7_000.0, 32: 8_000.0, 64: 8_200.0})
    for row, engine in zip(rows, (4_000.0, 4_100.0, 4_150.0, 4_200.0, 4_250.0), strict=True):
        row["items_per_s"] = engine
    report = _report(rows)
    assert report["knee"] == {"size": 4, "found": True}
    assert report["pipeline_knee"] == {"size": 32, "found": True}
    assert report["recommendation"]["max_size"] == 32
    rows[3]["p99_ms"] = rows[4]["p99_ms"] = 99.0  # sizes 32 and 64 now break a 1 ms SLO
    capped = sweep_report.build_report(
        model=SimpleNamespace(name="m", version="1"),
        engine=SimpleNamespace(path=Path("m.onnx"), provider="CPUExecutionProvider"),
        memory=None,
        rows=rows,
        stop={"reason": "completed"},
        settings={
            "knee_gain": 0.10,
            "slo_ms": 1.0,
            "seconds": 1.0,
            "intra_op_threads": 0,
            "batch_min_size": 4,
        },
    )
    assert capped["recommendation"]["max_size"] == 16


def test_a_drain_that_did_not_finish_is_left_out_of_the_service_knee():
    report = _report(_rows_with_service({4: 20_000.0, 8: None, 16: 60_000.0}))
    assert report["pipeline_knee"] == {"size": 16, "found": False}
    assert " n/a" in sweep_report.format_report(report)


def test_without_pipeline_figures_there_is_no_service_knee():
    rows = _rows_with_service({4: 1.0})
    del rows[0]["pipeline"]
    report = _report(rows)
    assert report["pipeline_knee"] is None
    assert "service/s" not in sweep_report.format_report(report)


def test_scenario_settings_win_over_every_other_setting_of_a_bench_child(monkeypatch):
    from service.config import Settings
    from service.tools.harness.runner import Harness, Options
    from service.tools.harness.systems import SERVICE, Scenario, System

    monkeypatch.setenv("MICROBATCH_BATCH__ADAPTIVE", "true")
    options = Options("A", False, "127.0.0.1:1", 4, 1.0, 1.0, 0.0, 0.5, 1, 0.0, 1, Path("x.json"), Path("."))
    bench = Harness(options, Settings())
    service = System(SERVICE, "s", ("service", "run"), True, 1.0)
    pinned = (("BATCH__MIN_SIZE", "8"), ("BATCH__MAX_SIZE", "8"), ("BATCH__ADAPTIVE", "false"))
    scenario = Scenario("k", "t", "metrics-anomaly", "metrics", (service,), (), max_batch_size=8, env=pinned)
    env = bench.env(scenario, service, {"KAFKA__GROUP_ID": "g"})
    assert env["MICROBATCH_BATCH__ADAPTIVE"] == "false"
    assert (env["MICROBATCH_BATCH__MIN_SIZE"], env["MICROBATCH_BATCH__MAX_SIZE"]) == ("8", "8")
    assert env["MICROBATCH_KAFKA__GROUP_ID"] == "g"
