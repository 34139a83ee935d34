"""Seeing before serving: ``microbatch check --sample`` and ``MICROBATCH_MODEL__SAMPLE`` run sample values
through format, processor, model and result encoding with no Kafka; ``models inspect`` describes a file."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from service.cli import main
from service.config import load_settings
from service.engine import load_model
from service.engine.samples import check_at_start, read_samples, run_samples
from service.errors import ConfigError
from service.models.reference import MODELS_DIR
from service.tools.generate import EventGenerator


def _events(n: int) -> list[bytes]:
    return [msgspec.json.encode(e) for e in EventGenerator(7).metrics(n, 0.0)]


def _settings(sample=None, **model):
    return load_settings(model={"name": "metrics-anomaly", "providers": ["cpu"], "sample": sample} | model)


def test_samples_give_the_results_the_service_would_write_and_dead_letters_with_their_reason():
    settings = _settings()
    model = load_model(settings)
    values = [*_events(3), b"not json", msgspec.json.encode({"cpu_pct": "high"})]
    report = run_samples(settings, model, list(enumerate(values, 1)))
    assert [o.line for o in report.outcomes] == [1, 2, 3, 4, 5]
    assert all(isinstance(o.result["score"], float) for o in report.outcomes[:3])
    assert [o.reason for o in report.failed] == ["invalid_json", "invalid_event"]
    assert report.hints == []  # every configured field was in some sample


def test_a_misspelt_feature_gives_a_hint_naming_the_closest_field_and_the_setting():
    features = [f if f != "cpu_pct" else "cpu_pcent" for f in _listed_features()]
    settings = _settings(features=features)
    report = run_samples(settings, load_model(settings), list(enumerate(_events(4), 1)))
    assert len(report.failed) == 4
    assert report.hints == [
        "no sample carries field 'cpu_pcent'; closest names seen: cpu_pct (check MICROBATCH_MODEL__FEATURES)"
    ]


def test_a_sample_file_that_fails_stops_start_up_naming_the_setting_and_the_line(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_bytes(b"\n".join([*_events(2), b"", b'{"cpu_pct": 1}']) + b"\n\n")
    assert [line for line, _value in read_samples(path)] == [1, 2, 4]  # lines of the file
    settings = _settings(sample=str(path))
    with pytest.raises(ConfigError) as err:
        check_at_start(settings, load_model(settings))
    assert err.value.setting == "MICROBATCH_MODEL__SAMPLE"
    assert "1 of 3 samples give no result; line 4: invalid_event" in str(err.value)
    path.write_bytes(b"\n".join(_events(2)))
    check_at_start(settings, load_model(settings))  # all good: no error


def test_check_prints_one_json_line_per_item_and_exits_2_when_one_gives_no_result(
    tmp_path, monkeypatch, capsys
):
    path = tmp_path / "samples.jsonl"
    path.write_bytes(b"\n".join([*_events(2), b"[1, 2]"]))
    monkeypatch.setenv("MICROBATCH_MODEL__NAME", "metrics-anomaly")
    monkeypatch.setenv("MICROBATCH_MODEL__PROVIDERS", "cpu")
    assert main(["check", "--sample", str(path)]) == 2
    out, err = capsys.readouterr()
    lines = [msgspec.json.decode(line) for line in out.splitlines()]
    assert [set(line) for line in lines] == [{"line", "result"}, {"line", "result"}, {"line", "dead_letter"}]
    assert lines[2]["dead_letter"]["reason"] == "invalid_event"
    assert "2 of 3 items give a result" in err
    path.write_bytes(b"\n".join(_events(2)))
    assert main(["check", "--sample", str(path)]) == 0


def test_inspect_shows_ports_classes_metadata_and_settings_to_start_from(tmp_path, capsys):
    skl2onnx = pytest.importorskip("skl2onnx", reason="needs the dev extra (skl2onnx)")
    from sklearn.ensemble import GradientBoostingClassifier

    x = np.random.default_rng(0).normal(size=(80, 3)).astype(np.float32)
    model = GradientBoostingClassifier(n_estimators=3).fit(x, (x[:, 0] > 0).astype(int))
    path = tmp_path / "gbc.onnx"
    path.write_bytes(skl2onnx.to_onnx(model, x[:1]).SerializeToString())
    assert main(["models", "inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "output_probability       seq(map(int64,tensor(float)))" in out
    assert "{class: probability} (ZipMap)" in out
    assert "classes   [0, 1] (from the graph's classifier)" in out
    assert "# the 3 numeric fields (paths), in training order\nMICROBATCH_MODEL__FEATURES=...\n" in out
    assert f"MICROBATCH_MODEL__PATH={path.resolve()}\n" in out
    assert main(["models", "inspect", str(MODELS_DIR / "log-classifier.onnx")]) == 0
    out = capsys.readouterr().out
    assert "input_ids                tensor(int64)                        [batch, seq]" in out
    assert "microbatch.processor = text" in out
    assert main(["models", "inspect", str(tmp_path / "missing.onnx")]) == 2


def _listed_features() -> list[str]:
    return list(load_model(_settings()).processor.features)
