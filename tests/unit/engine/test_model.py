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
