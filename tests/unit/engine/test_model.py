"""service/engine/model.py: the processor is built for the configured input format."""

from __future__ import annotations

import pytest

from service.config import load_settings
from service.engine import load_model
from service.errors import ConfigError
from service.processors.features import FeaturesProcessor


class RawOnly:
    """A processor of one's own that reads only raw JSON values: no ``parse_fields``."""

    def __init__(self, info) -> None:
        self._inner = FeaturesProcessor(info)
        self.parse, self.preprocess = self._inner.parse, self._inner.preprocess
        self.postprocess, self.sample = self._inner.postprocess, self._inner.sample


def settings(**input_settings):
    return load_settings(
        model={"name": "metrics-anomaly", "providers": ["cpu"], "processor": f"{__name__}:RawOnly"},
        input=input_settings,
    )


def test_a_processor_without_parse_fields_serves_json():
    assert isinstance(load_model(settings()).processor, RawOnly)


@pytest.mark.parametrize("fmt", ["syslog", "otlp-proto", "otlp-json"])
def test_a_processor_without_parse_fields_stops_start_up_for_other_formats_naming_the_format(fmt):
    with pytest.raises(ConfigError) as err:
        load_model(settings(format=fmt))
    assert err.value.setting == "MICROBATCH_INPUT__FORMAT"
    assert "parse_fields" in str(err.value)


def test_the_formats_text_field_reaches_the_text_processor():
    model = load_model(
        load_settings(model={"name": "log-classifier", "providers": ["cpu"]}, input={"format": "otlp-json"})
    )
    assert model.processor.parse_fields({"body": "disk full", "message": "not this"}) == "disk full"  # type: ignore[attr-defined]


# -- rows assembled (plan_rows), on metrics-anomaly's 11 features -------------------------------------------

FEATURES = ["cpu_pct", "mem_pct", "load_1m", "disk_util_pct"]


class Named:
    """A processor with named features, like ``features``."""

    features = tuple(FEATURES)

    def parse_fields(self, fields):
        return tuple(fields[f] for f in self.features)


def plan(metadata=None, **assemble):
    from service.config import AssembleSettings
    from service.engine.model import plan_rows

    return plan_rows(AssembleSettings(**assemble), Named(), metadata or {})  # type: ignore[arg-type]


def test_rows_require_the_models_required_features_and_fill_the_rest():
    rows = plan({"microbatch.required": '["cpu_pct"]', "microbatch.typical": '{"mem_pct": 40}'})
    assert rows.features == tuple(FEATURES) and rows.required == ("cpu_pct",)
    assert rows.typical == {"mem_pct": 40.0}
    assert plan().required == tuple(FEATURES)  # nothing said: every feature is required


def test_settings_choose_required_and_optional_features():
    rows = plan(required=["cpu_pct", "load_1m"], optional=["mem_pct", "disk_util_pct"])
    assert rows.required == ("cpu_pct", "load_1m")


@pytest.mark.parametrize(
    ("assemble", "setting", "words"),
    [
        ({"required": ["cpu"]}, "MICROBATCH_ASSEMBLE__REQUIRED", "not features of the model: ['cpu']"),
        ({"required": ["cpu_pct"], "optional": ["mem_pct"]}, "MICROBATCH_ASSEMBLE__OPTIONAL", "neither"),
        ({"required": ["cpu_pct"], "fill": "typical"}, "MICROBATCH_ASSEMBLE__FILL", "no microbatch.typical"),
    ],
)
def test_a_bad_row_setting_stops_start_up_naming_it(assemble, setting, words):
    with pytest.raises(ConfigError) as err:
        plan(**assemble)
    assert err.value.setting == setting
    assert words in str(err.value)


def test_rows_need_a_metrics_format_and_a_processor_of_named_features():
    with pytest.raises(ConfigError) as err:
        load_model(
            load_settings(model={"name": "metrics-anomaly", "providers": ["cpu"]}, assemble={"enabled": True})
        )
    assert err.value.setting == "MICROBATCH_INPUT__FORMAT"
    assert "collectd-json" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_model(
            load_settings(
                model={"name": "log-classifier", "providers": ["cpu"]},
                input={"format": "influx"},
                assemble={"enabled": True},
            )
        )
    assert err.value.setting == "MICROBATCH_MODEL__PROCESSOR"


def test_metrics_anomaly_on_collectd_assembles_rows_of_its_own_feature_names():
    model = load_model(
        load_settings(
            model={"name": "metrics-anomaly", "providers": ["cpu"]},
            input={"format": "collectd-json"},
            assemble={"enabled": True},
        )
    )
    assert model.rows is not None and len(model.rows.features) == 11
