"""The docs name only settings that exist, and every metric the service has."""

from __future__ import annotations

import re
from pathlib import Path

from service.config import Settings, env_name, misnamed
from service.observability.metrics import Metrics

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
DEPLOY = DOCS / "DEPLOY.md"

# Names the docs use as examples of mistakes: an unknown field, an unknown section, a single underscore.
MISSPELT_ON_PURPOSE = {"MICROBATCH_BATCH__MAX_SIZ", "MICROBATCH_BACTH__MAX_SIZE", "MICROBATCH_INPUT_TOPICS"}


def settings_env_names() -> set[str]:
    return {
        env_name((section, field))
        for section, info in Settings.model_fields.items()
        for field in info.annotation.model_fields
    }


def named_in(path: Path) -> set[str]:
    return set(re.findall(r"\bMICROBATCH_[A-Z0-9_]*[A-Z0-9]", path.read_text(encoding="utf-8")))


def test_the_docs_name_no_setting_that_does_not_exist():
    """Every setting is in docs/CONFIG.md, generated (tests/unit/config/test_reference.py); the pages
    written by hand may name only real ones: a name with the ``__`` must be a setting, and one without must
    not look like one (``misnamed``), except the examples of mistakes."""
    sections = {f"MICROBATCH_{name.upper()}" for name in Settings.model_fields}
    wrong = {}
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        named = named_in(page) - MISSPELT_ON_PURPOSE
        unknown = {n for n in named if "__" in n and n not in settings_env_names()}
        unknown |= {m.variable for m in misnamed(dict.fromkeys(named - sections, ""))}
        if unknown:
            wrong[page.name] = sorted(unknown)
    assert wrong == {}


def test_the_examples_of_mistakes_are_still_mistakes():
    assert not MISSPELT_ON_PURPOSE & settings_env_names()
    assert [m.variable for m in misnamed(dict.fromkeys(MISSPELT_ON_PURPOSE, ""))] == [
        "MICROBATCH_INPUT_TOPICS"
    ]


def exported_metrics() -> dict[str, str]:
    """The service's own metric families (not the ``process_*`` ones), by the name a scrape shows (a
    counter with its ``_total``), with their type."""
    names = {}
    for family in Metrics().registry.collect():
        if family.name.startswith("microbatch_"):
            names[family.name + ("_total" if family.type == "counter" else "")] = family.type
    return names


def test_the_metrics_table_in_deploy_md_matches_the_registry():
    text = DEPLOY.read_text()
    table = text[text.index("<!-- metrics-table:begin -->") : text.index("<!-- metrics-table:end -->")]
    rows = dict(re.findall(r"^\| `(microbatch_[a-z_]+)` \| (\w+) \|", table, re.MULTILINE))
    assert rows == exported_metrics()
