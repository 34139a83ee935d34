"""The README's configuration reference names every setting the service reads, and only real ones."""

from __future__ import annotations

import re
from pathlib import Path

from service.config import Settings, env_name

README = Path(__file__).resolve().parents[2] / "README.md"


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
    misspelt_on_purpose = {"MICROBATCH_BATCH__MAX_SIZ"}  # the README's example of an unknown setting
    assert named - settings_env_names() == misspelt_on_purpose
