"""service/cli.py and service/errors.py: one command module loaded per command, exit codes from the error
types, a usage error for bad flags."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from service import cli
from service.errors import (
    BrokerUnavailableError,
    ConfigError,
    CouldNotCheckError,
    EngineFailedError,
    EnvironmentNotReadyError,
    FatalKafkaError,
    MicrobatchError,
    NotAuthorizedError,
    UnknownTopicError,
    UsageError,
)

TOOLING = ("matplotlib", "torch", "tqdm", "psutil", "pynvml", "bench", "modelbuild")
SERVICE_DIR = Path(cli.__file__).parent


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("MICROBATCH_")}
    return subprocess.run(
        [sys.executable, "-c", code],
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_microbatch_run_loads_no_tooling():
    # `run` up to its first start-up check (no input topic: exit 2), then what it imported.
    code = (
        "import sys, json\n"
        "from service.cli import main\n"
        "code = main(['run'])\n"
        "print(json.dumps([code, sorted(sys.modules)]))\n"
    )
    proc = run_python(code, MICROBATCH_METRICS__ENABLED="false")
    code_seen, modules = json.loads(proc.stdout.strip().splitlines()[-1])
    assert code_seen == 2, proc.stderr
    assert "service.app" in modules  # it got as far as the run command
    assert [m for m in modules if m.startswith("service.tools")] == []
    assert [m for m in modules if m.split(".")[0] in TOOLING] == []


def test_the_run_path_loads_no_tooling_even_once_everything_is_built():
    code = (
        "import sys, json\n"
        "import service.app, service.engine, service.kafka, service.flow.pipeline, service.observability\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    modules = json.loads(run_python(code).stdout)
    assert [m for m in modules if m.startswith("service.tools") or m.split(".")[0] in TOOLING] == []


def test_the_package_imports_none_of_the_source_checkouts_tooling():
    """The bench and model building are packages of a source checkout (bench/, modelbuild/), not shipped:
    nothing in the package may import them, nor torch."""
    found = []
    for path in SERVICE_DIR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [f"{path}: {n}" for n in names if n.split(".")[0] in {"bench", "modelbuild", "torch"}]
    assert found == []


def test_the_pure_flow_imports_no_client():
    code = (
        "import sys, json, pkgutil, importlib, service.flow, service.processors, service.config\n"
        "for m in pkgutil.iter_modules(service.flow.__path__):\n"
        "    importlib.import_module('service.flow.' + m.name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    modules = set(json.loads(run_python(code).stdout))
    assert {"service.flow.batcher", "service.flow.offsets", "service.flow.decode"} <= modules
    assert not modules & {"confluent_kafka", "onnxruntime"}


def test_the_parser_loads_only_the_chosen_commands_module(monkeypatch):
    loaded: list[str] = []
    original = cli.Command.load

    def spy(self: cli.Command):
        loaded.append(self.module)
        return original(self)

    monkeypatch.setattr(cli.Command, "load", spy)
    cli.parser("verify").parse_args(["verify", "--input", "t"])
    assert loaded == ["service.tools.verify"]


def test_every_command_is_listed_in_the_help(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert name in out


@pytest.mark.parametrize(
    ("argv", "command", "instead"),
    [(["bench", "--quick"], "bench", "make bench"), (["models", "build"], "models build", "make models")],
)
def test_the_developer_tooling_is_no_command_and_says_where_it_went(capsys, argv, command, instead):
    assert "bench" not in cli.COMMANDS
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"'microbatch {command}' is not a command of the installed service: run {instead} (" in err
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert f"'microbatch {command}' is now {instead}" in " ".join(capsys.readouterr().out.split())


def test_the_models_command_has_no_build_action(capsys):
    with pytest.raises(SystemExit) as info:
        cli.parser("models").parse_args(["models", "build"])
    assert info.value.code == 2
    assert "invalid choice: 'build'" in capsys.readouterr().err


def test_a_bad_flag_is_a_usage_error_exiting_2_and_naming_the_flag(capsys):
    code = cli.main(["produce", "--kind", "logs", "--topic", "t", "--poison-ratio", "2"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err == "microbatch: --poison-ratio: must be between 0 and 1"


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ConfigError("MICROBATCH_X__Y", "bad"), 2),
        (UsageError("--flag", "bad"), 2),
        (EnvironmentNotReadyError("no"), 3),
        (UnknownTopicError("no"), 3),
        (BrokerUnavailableError("no"), 3),
        (NotAuthorizedError("no"), 3),
        (CouldNotCheckError("no"), 4),
        (FatalKafkaError("producer", -144, "_FENCED", "fenced"), 1),
        (EngineFailedError("broken"), 1),
        (MicrobatchError("failed"), 1),
    ],
)
def test_each_error_carries_its_exit_code(error, code):
    assert error.exit_code == code


def test_a_fatal_kafka_error_keeps_librdkafkas_code():
    error = FatalKafkaError("producer", -144, "_FENCED", "the producer was fenced")
    assert (error.client, error.code, error.name) == ("producer", -144, "_FENCED")
    assert str(error) == "producer: the producer was fenced (_FENCED)"
