"""The docs name every setting and metric the service has, and only real ones."""

from __future__ import annotations

import re
from pathlib import Path

from service.config import Settings, env_name
from service.observability.metrics import Metrics

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
DEPLOY = ROOT / "docs" / "DEPLOY.md"


def settings_env_names() -> set[str]:
    return {
        env_name((section, field))
        for section, info in Settings.model_fields.items()
        for field in info.annotation.model_fields
    }


def test_every_setting_is_in_the_readme_configuration_table():
    text = README.read_text()
    # Rows may pair two variables: `MICROBATCH_KAFKA__SASL_USERNAME` / `__SASL_PASSWORD`.
    missing = [
        name
        for name in sorted(settings_env_names())
        if f"`{name}`" not in text and f"`__{name.split('__', 1)[1]}`" not in text
    ]
    assert not missing, f"settings missing from the README: {missing}"


def test_the_readme_names_no_setting_that_does_not_exist():
    named = set(re.findall(r"`(MICROBATCH_[A-Z]+__[A-Z_]+)`", README.read_text()))
    # The README's examples of an unknown field and an unknown section.
    misspelt_on_purpose = {"MICROBATCH_BATCH__MAX_SIZ", "MICROBATCH_BACTH__MAX_SIZE"}
    assert named - settings_env_names() == misspelt_on_purpose


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
