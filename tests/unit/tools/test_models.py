"""``microbatch models list|inspect``: a table with headers, and a reference model inspected by the name
the list shows, with its fields whole and settings that load as they are printed."""

from __future__ import annotations

import json

import pytest
from structlog.testing import capture_logs

from service.cli import main
from service.config import load_settings
from service.engine import Engine, load_model
from service.models import reference
from service.tools.inspect import describe
from service.tools.models import LIST_COLUMNS

NAMES = reference.reference_names()


def _settings_block(out: str) -> list[str]:
    """The lines of the settings block: from the first ``MICROBATCH_`` line to the blank line after it."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("MICROBATCH_"))
    end = lines.index("", start)
    return lines[start:end]


def test_list_has_a_header_and_one_row_per_reference_model(capsys):
    assert main(["models", "list"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split("  ")[0] == LIST_COLUMNS[0]
    assert all(column in header for column in LIST_COLUMNS)
    assert [row.split()[0] for row in rows] == NAMES
    file_column = header.index("FILE")
    assert all(row[file_column:].startswith(f"{row.split()[0]}.onnx") for row in rows), "columns aligned"


@pytest.mark.parametrize("name", NAMES)
def test_inspect_takes_the_names_list_shows_and_prints_every_field_whole(name, capsys):
    assert main(["models", "inspect", name]) == 0
    out = capsys.readouterr().out
    path = reference.reference_file(name)
    assert path is not None and f"file      {path.resolve()}" in out
    metadata = Engine(path, ["CPUExecutionProvider"]).metadata
    for key, value in metadata.items():
        assert f"  {key} = {value}\n" in out, f"{key} cut short"
    features = json.loads(metadata.get("microbatch.features", "[]"))
    for i, feature in enumerate(features, 1):
        assert any(line.split()[:2] == [str(i), feature] for line in out.splitlines()), feature
    assert "..." not in "\n".join(_settings_block(out)), "a reference model needs nothing filled in"


@pytest.mark.parametrize("name", NAMES)
def test_the_printed_settings_load_as_they_are(name, monkeypatch):
    path = reference.reference_file(name)
    assert path is not None
    block = _settings_block(describe(path, name))
    assert block[0] == f"MICROBATCH_MODEL__NAME={name}"
    for line in block:
        if not line.startswith("#"):
            key, _, value = line.partition("=")
            monkeypatch.setenv(key, value)
    settings = load_settings()  # an unknown or misspelt name is an error here
    assert settings.model.name == name
    assert reference.choose_model(settings.model).path == reference.reference_file(name)
    assert settings.input.topics
    with capture_logs():
        load_model(settings)  # the input format fits the model: assembled rows need an agent's format


def test_inspect_by_path_prints_the_absolute_path_to_serve(capsys, monkeypatch, tmp_path):
    path = reference.reference_file("metrics-anomaly")
    assert path is not None
    monkeypatch.chdir(path.parent)
    assert main(["models", "inspect", path.name]) == 0
    out = capsys.readouterr().out
    assert _settings_block(out)[0] == f"MICROBATCH_MODEL__PATH={path.resolve()}"
    monkeypatch.chdir(tmp_path)  # a name is looked up in the manifest, wherever the command runs
    assert main(["models", "inspect", "metrics-anomaly"]) == 0


def test_neither_a_name_nor_a_file_lists_the_names(capsys):
    assert main(["models", "inspect", "metrics-anomally"]) == 2
    err = capsys.readouterr().err
    assert "'metrics-anomally' is neither a reference model" in err
    assert all(name in err for name in NAMES)
