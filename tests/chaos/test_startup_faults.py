"""Start-up faults (scenario 8): what is wrong before the loop starts must stop the service with one clear
line on stderr naming what to fix, the documented exit code (service/errors.py: 2 invalid configuration,
3 environment not ready) and no traceback; waiting forever for the brokers must stay stoppable.

Every service here is a real ``python -m service run`` child, started and stopped by PID; the broker is the
session broker (or, for "unreachable", a port where nothing listens).
"""

from __future__ import annotations

import json
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from service.engine import cuda_device_count
from service.models.reference import MODELS_DIR
from service.tools.processes import settings_env
from tests.support.harness import ROOT, wait_for

EXIT_CONFIG, EXIT_ENVIRONMENT = 2, 3
STARTUP_TIMEOUT_S = 3  # MICROBATCH_KAFKA__STARTUP_TIMEOUT_S for the unreachable broker
EXIT_BOUND_S = 60  # any failing start-up must be over within this (imports and model load included)
STILL_WAITING_S = 30  # bound on seeing the wait-forever service report that it is still waiting
STOP_BOUND_S = 30


@dataclass
class Run:
    code: int
    stderr: str
    seconds: float

    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]

    def message(self) -> str:
        """The one line for people: the service's own, not one of its JSON log lines."""
        plain = [line for line in self.lines() if not _is_json(line)]
        assert len(plain) == 1, f"expected exactly one non-log line on stderr, got:\n{self.stderr}"
        assert self.lines()[-1] == plain[0], f"the message must be the last line:\n{self.stderr}"
        assert plain[0].startswith("microbatch: "), plain[0]
        return plain[0]


def _is_json(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _env(**settings: str) -> dict[str, str]:
    # As tests.support.harness.start_service sets them, but stdout and stderr are read apart here.
    defaults = {"log__format": "json", "model__intra_op_threads": "1", "metrics__port": "0"}
    return settings_env(defaults | settings)


def _spawn(tmp_path: Path, **settings: str) -> tuple[subprocess.Popen, Path]:
    stderr_path = tmp_path / f"stderr-{uuid.uuid4().hex[:6]}.log"
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service", "run"],
            env=_env(**settings),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    return proc, stderr_path


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()  # by PID: only the child this test started
        proc.wait(timeout=30)


def _run(tmp_path: Path, **settings: str) -> Run:
    """Run the service to its exit (bounded by EXIT_BOUND_S)."""
    start = time.monotonic()
    proc, stderr_path = _spawn(tmp_path, **settings)
    try:
        code = proc.wait(timeout=EXIT_BOUND_S)
    except subprocess.TimeoutExpired:
        _kill(proc)
        pytest.fail(f"still running after {EXIT_BOUND_S}s:\n{stderr_path.read_text(errors='replace')}")
    run = Run(code, stderr_path.read_text(errors="replace"), time.monotonic() - start)
    print(f"exit {run.code} after {run.seconds:.1f}s: {run.lines()[-1] if run.lines() else ''}")
    assert "Traceback" not in run.stderr, run.stderr
    return run


def _closed_port() -> int:
    """A local port where nothing listens (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def input_topic(topic_factory) -> str:
    return topic_factory(partitions=1, prefix="in")


def _base(kafka_bootstrap: str, input_topic: str, group_id: str) -> dict[str, str]:
    return {
        "kafka__bootstrap_servers": kafka_bootstrap,
        "kafka__group_id": group_id,
        "input__topics": input_topic,
        "output__topic": f"out-{uuid.uuid4().hex[:12]}",
        "dlq__topic": f"dlq-{uuid.uuid4().hex[:12]}",
    }


def _identity_model(path: Path, input_name: str, width: int) -> Path:
    """A valid ONNX model: ``input_name`` float[batch, width] -> ``y``, the same tensor."""
    graph = helper.make_graph(
        [helper.make_node("Identity", [input_name], ["y"])],
        "identity",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


# -- environment not ready: exit 3 ------------------------------------------------------------------------


def test_unreachable_broker_exits_3_after_the_startup_timeout(tmp_path, group_id):
    port = _closed_port()
    run = _run(
        tmp_path,
        kafka__bootstrap_servers=f"127.0.0.1:{port}",
        kafka__startup_timeout_s=str(STARTUP_TIMEOUT_S),
        kafka__group_id=group_id,
        input__topics="in-unreachable",
        model__name="metrics-anomaly",
    )
    assert run.code == EXIT_ENVIRONMENT, run.stderr
    assert run.seconds >= STARTUP_TIMEOUT_S, "it gave up before the configured timeout"
    assert "MICROBATCH_KAFKA__STARTUP_TIMEOUT_S" in run.message()


def test_waiting_forever_for_brokers_stays_up_and_stops_cleanly_on_sigterm(tmp_path, group_id):
    port = _closed_port()
    proc, stderr_path = _spawn(
        tmp_path,
        kafka__bootstrap_servers=f"127.0.0.1:{port}",
        kafka__startup_timeout_s="0",  # wait forever
        kafka__group_id=group_id,
        input__topics="in-unreachable",
        model__name="metrics-anomaly",
    )
    try:
        # It got past loading the model and is retrying the brokers, well beyond any default timeout.
        wait_for(
            lambda: (
                proc.poll() is not None or "waiting_for_brokers" in stderr_path.read_text(errors="replace")
            ),
            STILL_WAITING_S,
            "the service to report it is waiting for brokers",
        )
        assert proc.poll() is None, f"exited {proc.returncode}:\n{stderr_path.read_text(errors='replace')}"
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=STOP_BOUND_S)
    finally:
        _kill(proc)
    stderr = stderr_path.read_text(errors="replace")
    print(f"exit {code} on SIGTERM while waiting for brokers")
    assert "Traceback" not in stderr, stderr
    assert code == 0, f"SIGTERM while waiting for brokers must exit 0, got {code}:\n{stderr}"


def test_missing_input_topic_exits_3_naming_it(tmp_path, kafka_bootstrap, group_id):
    missing = f"missing-{uuid.uuid4().hex[:12]}"
    run = _run(tmp_path, **_base(kafka_bootstrap, missing, group_id), model__name="metrics-anomaly")
    assert run.code == EXIT_ENVIRONMENT, run.stderr
    message = run.message()
    assert missing in message
    assert "MICROBATCH_INPUT__TOPICS" in message


# -- invalid configuration: exit 2 ------------------------------------------------------------------------


def test_corrupt_model_file_exits_2_naming_the_path_setting(tmp_path, kafka_bootstrap, input_topic, group_id):
    model = tmp_path / "corrupt.onnx"
    model.write_bytes(random.Random(8).randbytes(64 * 1024))
    run = _run(tmp_path, **_base(kafka_bootstrap, input_topic, group_id), model__path=str(model))
    assert run.code == EXIT_CONFIG, run.stderr
    assert "invalid setting MICROBATCH_MODEL__PATH" in run.message()


def test_reference_model_fed_the_wrong_feature_count_exits_2(
    tmp_path, kafka_bootstrap, input_topic, group_id
):
    run = _run(
        tmp_path,
        **_base(kafka_bootstrap, input_topic, group_id),
        model__name="metrics-anomaly",  # 11 features
        model__features="cpu_pct,mem_pct",
    )
    assert run.code == EXIT_CONFIG, run.stderr
    message = run.message()
    assert "invalid setting MICROBATCH_MODEL__FEATURES" in message
    assert "rejects what its processor feeds it" in message


@pytest.mark.parametrize(
    ("processor", "extra", "setting"),
    [
        # 'text' needs an input_ids input; the model's only input is "x".
        ("text", {"model__tokenizer": str(MODELS_DIR / "log-classifier.tokenizer.json")}, "PROCESSOR"),
        # 'features' of 3 fields, the model takes 4 per row: found by the warm-up run, and the
        # explicitly set feature list is what to fix.
        ("features", {"model__features": "a,b,c"}, "FEATURES"),
    ],
)
def test_valid_model_with_the_wrong_inputs_for_its_processor_exits_2(
    tmp_path, kafka_bootstrap, input_topic, group_id, processor, extra, setting
):
    model = _identity_model(tmp_path / "identity.onnx", "x", 4)
    run = _run(
        tmp_path,
        **_base(kafka_bootstrap, input_topic, group_id),
        model__path=str(model),
        model__processor=processor,
        **extra,
    )
    assert run.code == EXIT_CONFIG, run.stderr
    assert f"invalid setting MICROBATCH_MODEL__{setting}" in run.message()


def test_gpu_only_provider_without_a_gpu_exits_2(tmp_path, kafka_bootstrap, input_topic, group_id):
    provider = "CUDAExecutionProvider"
    if "CUDAExecutionProvider" in ort.get_available_providers() and cuda_device_count() > 0:
        # A machine with a usable GPU: ask instead for a provider this ONNX Runtime knows but cannot run.
        provider = next(p for p in ort.get_all_providers() if p not in ort.get_available_providers())
    run = _run(
        tmp_path,
        **_base(kafka_bootstrap, input_topic, group_id),
        model__name="metrics-anomaly",
        model__providers=provider,
    )
    assert run.code == EXIT_CONFIG, run.stderr
    message = run.message()
    assert "invalid setting MICROBATCH_MODEL__PROVIDERS" in message
    assert provider in message
