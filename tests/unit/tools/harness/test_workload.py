"""service/tools/harness/workload.py: the messages each scenario feeds its systems."""

from __future__ import annotations

import msgspec

from service.formats.otlp import OtlpProtoFormat
from service.tools.harness.workload import make_events


def test_otlp_requests_hold_the_same_records_as_the_json_lines():
    requests = make_events("otlp-logs", 4, seed=3, per_message=25)
    lines = make_events("logs", 100, seed=3)
    assert len(requests) == 4
    assert all(key is None for key, _value in requests)  # the Collector's exporter sets no key
    records = [r for _key, value in requests for r in OtlpProtoFormat().split(value)]
    assert [r["body"] for r in records] == [msgspec.json.decode(v)["message"] for _k, v in lines]


def test_an_otlp_request_is_one_agents_batch_under_one_resource():
    for _key, value in make_events("otlp-logs", 3, seed=1, per_message=10):
        resources = {tuple(sorted(r["resource"].items())) for r in OtlpProtoFormat().split(value)}
        assert len(resources) == 1
