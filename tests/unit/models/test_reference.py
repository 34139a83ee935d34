"""service/models/reference.py: which file a setting serves, and the committed files against the manifest."""

from __future__ import annotations

import pytest

from service.config import ModelSettings
from service.errors import ConfigError
from service.models import reference


def test_every_committed_file_matches_its_manifest_digest():
    checks = reference.verify()
    assert checks and all(checks.values()), checks


def test_a_reference_name_serves_its_committed_file_and_version():
    choice = reference.choose_model(ModelSettings(name="metrics-anomaly"))
    entry = reference.manifest()["models"]["metrics-anomaly"]
    assert choice.path == reference.MODELS_DIR / entry["file"]
    assert (choice.name, choice.version) == ("metrics-anomaly", entry["version"])


def test_a_path_wins_over_the_name_which_then_only_labels_results(tmp_path):
    own = tmp_path / "own.onnx"
    own.write_bytes(b"not read here")
    choice = reference.choose_model(ModelSettings(name="label", path=own, version="7"))
    assert (choice.path, choice.name, choice.version) == (own, "label", "7")


@pytest.mark.parametrize("name", [None, "no-such-model"])
def test_no_model_or_an_unknown_name_is_a_config_error_naming_the_setting(name):
    with pytest.raises(ConfigError) as info:
        reference.choose_model(ModelSettings(name=name))
    assert info.value.setting == "MICROBATCH_MODEL__NAME"
    assert "metrics-anomaly" in str(info.value)  # it lists what there is
    assert "MICROBATCH_MODEL__PATH" in str(info.value)
