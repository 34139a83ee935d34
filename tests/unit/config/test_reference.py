"""service/config/reference.py: docs/CONFIG.md and .env.example are rendered from the settings' docstrings,
and the committed files are what the generator writes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from dotenv import dotenv_values

from service.config import COMMON, Settings, common_help, sections, settings_info
from service.config._describe import RUN_NEEDS, first_sentence
from service.config.reference import CONFIG_MD, ENV_EXAMPLE, GENERATED, REGENERATE, main, stale

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("path", list(GENERATED), ids=str)
def test_the_committed_file_is_what_the_generator_writes(path):
    render = GENERATED[path]
    committed = (ROOT / path).read_text(encoding="utf-8") if (ROOT / path).is_file() else None
    assert committed == render(), f"{path} is stale: run {REGENERATE}"


def test_check_names_each_stale_file_and_exits_1(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    assert main(["--root", str(tmp_path)]) == 0
    assert stale(tmp_path) == []
    assert main(["--root", str(tmp_path), "--check"]) == 0
    capsys.readouterr()

    (tmp_path / ENV_EXAMPLE).write_text("# edited by hand\n")
    assert main(["--root", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert f"{ENV_EXAMPLE} is stale: run make docs" in err
    assert str(CONFIG_MD) not in err


def test_check_runs_as_a_module_from_a_checkout():
    proc = subprocess.run(
        [sys.executable, "-m", "service.config.reference", "--check", "--root", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_every_setting_has_a_description():
    undocumented = [info.variable for info in settings_info() if not info.description]
    assert undocumented == []


def test_every_setting_has_one_row_in_its_section_and_the_common_ones_a_second():
    text = GENERATED[CONFIG_MD]()
    rows = re.findall(r"^\| `(MICROBATCH_\w+)` \|", text, re.MULTILINE)
    every = [info.variable for info in settings_info()]
    assert sorted(rows) == sorted(every + list(COMMON))
    for name in sections():
        assert f"\n## {name} (`MICROBATCH_{name.upper()}__*`)\n" in text


def test_a_row_shows_type_default_and_the_docstring_on_one_line():
    text = GENERATED[CONFIG_MD]()
    row = next(line for line in text.splitlines() if line.startswith("| `MICROBATCH_BATCH__MAX_WAIT_MS` |"))
    assert row.startswith("| `MICROBATCH_BATCH__MAX_WAIT_MS` | float | `50` | A batch is also cut when")
    fmt = next(line for line in text.splitlines() if line.startswith("| `MICROBATCH_INPUT__FORMAT` |"))
    assert "| one of `json`, `text`, `syslog`," in fmt
    topics = next(line for line in text.splitlines() if line.startswith("| `MICROBATCH_INPUT__TOPICS` |"))
    assert "| list[str] | required |" in topics
    secret = next(
        line for line in text.splitlines() if line.startswith("| `MICROBATCH_KAFKA__SASL_PASSWORD` |")
    )
    assert "| secret | unset |" in secret
    assert "``" not in text  # the docstrings' markup is Markdown here


def test_the_common_settings_are_few_real_and_in_order():
    assert 10 <= len(COMMON) <= 15
    assert len(set(COMMON)) == len(COMMON)
    assert set(RUN_NEEDS) <= set(COMMON)
    by_name = {info.variable: info for info in settings_info()}
    assert [name for name in COMMON if by_name[name].common] == list(COMMON)


def test_env_example_sets_only_what_run_needs_and_documents_the_rest():
    text = GENERATED[ENV_EXAMPLE]()
    path = Path(".env")  # the working directory is a fresh tmp_path (tests/unit/conftest.py)
    path.write_text(text)
    assert dotenv_values(path) == {name: needs.example for name, needs in RUN_NEEDS.items()}
    for name in COMMON:
        assert re.search(rf"^(# )?{name}=", text, re.MULTILINE), name
    assert "# MICROBATCH_BATCH__MAX_SIZE=16\n" in text
    # What it sets is a valid configuration.
    assert Settings().input.topics == [RUN_NEEDS["MICROBATCH_INPUT__TOPICS"].example]


def test_run_help_lists_the_common_settings_with_a_first_sentence_and_no_markup():
    text = common_help()
    assert [line.split()[0] for line in text.splitlines() if line.startswith("  MICROBATCH_")] == list(COMMON)
    assert "  MICROBATCH_INPUT__TOPICS (required)\n" in text
    assert "  MICROBATCH_BATCH__MAX_SIZE (default: 16)\n" in text
    assert "microbatch config" in text and "docs/CONFIG.md" in text
    assert "``" not in text


@pytest.mark.parametrize(
    ("text", "first"),
    [
        ("One. Two.", "One."),
        ("Uses e.g. this. Then.", "Uses e.g. this."),
        ("... or that. Then.", "... or that."),
        ("No full stop", "No full stop"),
    ],
)
def test_first_sentence(text, first):
    assert first_sentence(text) == first
