"""service/formats/otlp_metrics.py: OTLP metrics requests in both encodings, from one hostmetrics scrape
(tests/fixtures/agents/otlp, see SOURCES.md there) and from requests built with the official classes."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as pb

from service.errors import InvalidMessage, Reason
from service.formats import load_format
from service.formats.otlp import OtlpJsonFormat, OtlpProtoFormat
from service.formats.otlp_metrics import OtlpMetricsJsonFormat, OtlpMetricsProtoFormat

OTLP = Path(__file__).resolve().parents[2] / "fixtures" / "agents" / "otlp"
BOOT, T2 = 1717740000.0, 1718000010
CUMULATIVE = pb.AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
DELTA = pb.AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
NO_VALUE = pb.DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK


def same(a: object, b: object) -> bool:
    """Equal, NaN included (NaN != NaN)."""
    return msgspec.json.encode(a, order="sorted") == msgspec.json.encode(b, order="sorted")


@pytest.fixture(scope="module")
def scrape() -> list:
    points = OtlpMetricsProtoFormat().split((OTLP / "hostmetrics.binpb").read_bytes())
    assert all(not isinstance(p, InvalidMessage) for p in points)
    return points


def find(points: list, metric: str, **attributes: str) -> list:
    return [p for p in points if p["metric"] == metric and attributes.items() <= p["attributes"].items()]


def test_both_encodings_of_the_scrape_give_identical_points(scrape):
    from_json = OtlpMetricsJsonFormat().split((OTLP / "hostmetrics.json").read_bytes())
    assert len(scrape) == len(from_json) == 113
    assert scrape == from_json
    assert same(scrape, from_json)


def test_cpu_time_is_a_counter_per_cpu_and_mode_with_its_start(scrape):
    [user] = find(scrape, "system.cpu.time", cpu="0", **{"cpu.mode": "user"})
    assert user == {
        "host": "web-01",
        "metric": "system.cpu.time",
        "attributes": {"cpu": "0", "cpu.mode": "user"},
        "time": 1718000010.004918273,
        "value": 21873.52,
        "kind": "counter",
        "start": BOOT,
        "resource": {"host.name": "web-01", "os.type": "linux"},
    }
    modes = {p["attributes"]["cpu.mode"] for p in find(scrape, "system.cpu.time")}
    assert modes == {
        "user",
        "system",
        "idle",
        "interrupt",
        "nice",
        "softirq",
        "steal",
        "iowait",
    }  # not "wait"
    assert {p["attributes"]["cpu"] for p in find(scrape, "system.cpu.utilization")} == {"0", "1"}
    [utilization] = find(scrape, "system.cpu.utilization", cpu="0", **{"cpu.mode": "user"})
    assert (utilization["kind"], utilization["value"]) == ("gauge", 0.08500000000046566)
    assert "start" not in utilization  # gauges have no start


def test_memory_states_are_renamed_and_sums_that_go_down_are_gauges(scrape):
    states = {p["attributes"]["system.memory.state"]: p for p in find(scrape, "system.memory.usage")}
    assert set(states) == {"used", "free", "buffers", "cached", "slab_reclaimable", "slab_unreclaimable"}
    assert (states["used"]["value"], states["used"]["kind"]) == (2525634560.0, "gauge")
    assert "start" not in states["used"]
    [used] = find(scrape, "system.memory.utilization", **{"system.memory.state": "used"})
    assert used["value"] == 0.3026918817449222


def test_filesystem_attributes_take_the_current_names(scrape):
    root_used = {"system.filesystem.mountpoint": "/", "system.filesystem.state": "used"}
    [used] = find(scrape, "system.filesystem.usage", **root_used)
    assert used["attributes"] == {
        "system.device": "/dev/sda1",
        "system.filesystem.mode": "rw",
        "system.filesystem.mountpoint": "/",
        "system.filesystem.type": "ext4",
        "system.filesystem.state": "used",
    }
    [root] = find(scrape, "system.filesystem.utilization", **{"system.filesystem.mountpoint": "/"})
    assert root["value"] == 0.41083183023990594
    assert "system.filesystem.state" not in root["attributes"]


def test_network_and_disk_attributes_and_metric_names_are_current(scrape):
    names = {p["metric"] for p in scrape}
    assert {"system.network.packet.count", "system.network.packet.dropped"} <= names
    assert not names & {"system.network.packets", "system.network.dropped"}
    eth0_receive = {"network.interface.name": "eth0", "network.io.direction": "receive"}
    [received] = find(scrape, "system.network.io", **eth0_receive)
    assert received["attributes"] == {"network.interface.name": "eth0", "network.io.direction": "receive"}
    assert (received["kind"], received["start"]) == ("counter", BOOT)
    [written] = find(scrape, "system.disk.io", **{"system.device": "sda", "disk.io.direction": "write"})
    assert written["value"] == 45678901248.0
    # Attributes the list does not rename stay: TCP connection states.
    assert {tuple(sorted(p["attributes"])) for p in find(scrape, "system.network.connections")} == {
        ("protocol", "state")
    }
    assert {p["attributes"]["state"] for p in find(scrape, "system.network.connections")} >= {"ESTABLISHED"}


def test_load_averages_have_no_attributes(scrape):
    loads = {p["metric"]: p["value"] for p in scrape if p["metric"].startswith("system.cpu.load_average.")}
    assert loads == {
        "system.cpu.load_average.1m": 0.51,
        "system.cpu.load_average.5m": 0.39,
        "system.cpu.load_average.15m": 0.32,
    }
    assert all(p["attributes"] == {} for p in find(scrape, "system.cpu.load_average.1m"))


def test_a_cumulative_histogram_is_counters_of_count_and_sum_and_gauges_of_min_and_max(scrape):
    points = [p for p in scrape if p["metric"].startswith("http.server.request.duration")]
    assert [(p["metric"], p["kind"], p["value"]) for p in points] == [
        ("http.server.request.duration.count", "counter", 3690.0),
        ("http.server.request.duration.sum", "counter", 82.339517),
        ("http.server.request.duration.min", "gauge", 0.001203),
        ("http.server.request.duration.max", "gauge", 1.874512),
    ]
    count = points[0]
    assert count["attributes"] == {
        "http.request.method": "GET",
        "http.response.status_code": "200",  # an int attribute, as a string
        "http.route": "/api/orders/{id}",
        "network.protocol.version": "1.1",
        "url.scheme": "http",
    }
    assert count["start"] == pytest.approx(1717999000.731402118)
    assert count["resource"]["service.name"] == "checkout"
    assert count["host"] == "web-01"


# -- requests built with the official classes, checked in both encodings ------------------------------


def request(*metrics: pb.Metric, resource: dict[str, str] | None = None) -> ExportMetricsServiceRequest:
    attributes = [KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in (resource or {}).items()]
    return ExportMetricsServiceRequest(
        resource_metrics=[
            pb.ResourceMetrics(
                resource={"attributes": attributes}, scope_metrics=[pb.ScopeMetrics(metrics=list(metrics))]
            )
        ]
    )


def both(built: ExportMetricsServiceRequest) -> list:
    """The points of ``built``, the same from protobuf and from protobuf's own JSON (enum names, 64-bit
    integers as strings, "NaN")."""
    proto = OtlpMetricsProtoFormat().split(built.SerializeToString())
    json = OtlpMetricsJsonFormat().split(json_format.MessageToJson(built).encode())
    assert same(proto, json)
    return proto


def number(value: float | int, start: int = 0, time: int = T2 * 10**9, flags: int = 0, **attributes: str):
    point = pb.NumberDataPoint(start_time_unix_nano=start, time_unix_nano=time, flags=flags)
    point.attributes.extend(KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attributes.items())
    if isinstance(value, int):
        point.as_int = value
    else:
        point.as_double = value
    return point


def test_a_delta_sum_is_a_rate_over_its_interval():
    start, end = (T2 - 10) * 10**9, T2 * 10**9
    delta = pb.Metric(
        name="http.requests",
        sum=pb.Sum(
            aggregation_temporality=DELTA,
            is_monotonic=True,
            data_points=[number(50, start, end), number(7.0, 0, end), number(3, end, end)],
        ),
    )
    [rate] = both(request(delta))  # no start, or no interval: left out
    assert (rate["kind"], rate["value"], rate["time"]) == ("rate", 5.0, float(T2))
    assert "start" not in rate


def test_sum_kinds_and_missing_values():
    metrics = [
        pb.Metric(
            name="queue.depth",
            sum=pb.Sum(aggregation_temporality=CUMULATIVE, is_monotonic=False, data_points=[number(-3)]),
        ),
        pb.Metric(
            name="requests",
            sum=pb.Sum(
                aggregation_temporality=CUMULATIVE,
                is_monotonic=True,
                data_points=[number(10, 5 * 10**9), number(11, 0), number(12, 5 * 10**9, flags=NO_VALUE)],
            ),
        ),
        pb.Metric(
            name="temperature", gauge=pb.Gauge(data_points=[number(float("nan")), number(float("inf"))])
        ),
        pb.Metric(name="empty"),  # no data at all
    ]
    depth, counted, no_start, unrecorded, nan, inf = both(request(*metrics, resource={"service.name": "q"}))
    assert (depth["kind"], depth["value"]) == ("gauge", -3.0)
    assert (counted["kind"], counted["value"], counted["start"]) == ("counter", 10.0, 5.0)
    assert "start" not in no_start  # unknown start time
    assert unrecorded["value"] is None
    assert nan["value"] is None and inf["value"] is None
    assert "host" not in depth  # no host.name in the resource
    assert depth["resource"] == {"service.name": "q"}


def test_histograms_summaries_and_delta_histograms():
    start, end = (T2 - 60) * 10**9, T2 * 10**9
    histogram = pb.Metric(
        name="latency",
        histogram=pb.Histogram(
            aggregation_temporality=DELTA,
            data_points=[
                pb.HistogramDataPoint(
                    start_time_unix_nano=start, time_unix_nano=end, count=120, sum=6.0, bucket_counts=[120]
                ),
                pb.HistogramDataPoint(
                    start_time_unix_nano=start, time_unix_nano=end, flags=NO_VALUE, sum=1.0
                ),
            ],
        ),
    )
    exponential = pb.Metric(
        name="size",
        exponential_histogram=pb.ExponentialHistogram(
            aggregation_temporality=CUMULATIVE,
            data_points=[
                pb.ExponentialHistogramDataPoint(
                    start_time_unix_nano=start, time_unix_nano=end, count=4, min=1.0, max=float("inf")
                )
            ],
        ),
    )
    summary = pb.Metric(
        name="gc.pause",
        summary=pb.Summary(
            data_points=[
                pb.SummaryDataPoint(
                    start_time_unix_nano=start,
                    time_unix_nano=end,
                    count=9,
                    sum=0.9,
                    quantile_values=[
                        pb.SummaryDataPoint.ValueAtQuantile(quantile=0.5, value=0.1),
                        pb.SummaryDataPoint.ValueAtQuantile(quantile=1, value=0.3),
                    ],
                )
            ]
        ),
    )
    points = both(request(histogram, exponential, summary, resource={"host.name": "h"}))
    assert [(p["metric"], p["kind"], p["value"], p["attributes"]) for p in points] == [
        ("latency.count", "rate", 2.0, {}),  # 120 in 60 s
        ("latency.sum", "rate", 0.1, {}),
        ("latency.count", "rate", None, {}),  # no recorded value: no min, no max
        ("latency.sum", "rate", None, {}),
        ("size.count", "counter", 4.0, {}),  # no sum: no .sum
        ("size.min", "gauge", 1.0, {}),
        ("size.max", "gauge", None, {}),
        ("gc.pause.count", "counter", 9.0, {}),
        ("gc.pause.sum", "counter", 0.9, {}),
        ("gc.pause", "gauge", 0.1, {"quantile": "0.5"}),
        ("gc.pause", "gauge", 0.3, {"quantile": "1.0"}),
    ]
    assert points[4]["start"] == float(T2 - 60)
    assert {p["host"] for p in points} == {"h"}


def test_attribute_values_become_strings():
    point = number(1.0)
    point.attributes.extend(
        [
            KeyValue(key="int", value=AnyValue(int_value=-7)),
            KeyValue(key="double", value=AnyValue(double_value=2.0)),
            KeyValue(key="half", value=AnyValue(double_value=0.5)),
            KeyValue(key="bool", value=AnyValue(bool_value=True)),
            KeyValue(key="list", value=AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="a")]))),
            KeyValue(key="bytes", value=AnyValue(bytes_value=b"\x00\x01")),
        ]
    )
    [only] = both(request(pb.Metric(name="m", gauge=pb.Gauge(data_points=[point]))))
    assert only["attributes"] == {
        "int": "-7",
        "double": "2",
        "half": "0.5",
        "bool": "true",
        "list": '["a"]',
        "bytes": "AAE=",
    }


def test_only_system_metrics_are_translated():
    metrics = [
        pb.Metric(name="app.cpu.time", gauge=pb.Gauge(data_points=[number(1.0, state="wait", cpu="cpu0")])),
        pb.Metric(
            name="system.cpu.time", gauge=pb.Gauge(data_points=[number(1.0, state="wait", cpu="cpu12")])
        ),
        pb.Metric(name="system.paging.usage", gauge=pb.Gauge(data_points=[number(1.0, state="used")])),
    ]
    app, system, paging = both(request(*metrics))
    assert app["attributes"] == {"state": "wait", "cpu": "cpu0"}
    assert system["attributes"] == {"cpu.mode": "iowait", "cpu": "12"}
    assert paging["attributes"] == {"state": "used"}


def test_snake_case_names_and_numbers_for_64_bit_integers_are_accepted():
    value = (
        b'{"resource_metrics":[{"resource":{"attributes":[{"key":"host.name","value":{"string_value":"h"}}]},'
        b'"scope_metrics":[{"metrics":[{"name":"system.network.io","sum":{"aggregation_temporality":2,'
        b'"is_monotonic":true,"data_points":[{"attributes":[{"key":"device","value":{"string_value":"eth0"}},'
        b'{"key":"direction","value":{"string_value":"receive"}}],"start_time_unix_nano":1000000000,'
        b'"time_unix_nano":2000000000,"as_int":42}]}}]}]}]}'
    )
    [only] = OtlpMetricsJsonFormat().split(value)
    assert only == {
        "host": "h",
        "metric": "system.network.io",
        "attributes": {"network.interface.name": "eth0", "network.io.direction": "receive"},
        "time": 2.0,
        "value": 42.0,
        "kind": "counter",
        "start": 1.0,
        "resource": {"host.name": "h"},
    }


def test_a_bad_data_point_or_metric_is_an_entry_of_its_own():
    good = {"name": "g", "gauge": {"dataPoints": [{"timeUnixNano": "1000000000", "asDouble": 1.5}]}}
    metrics = [
        good,
        {
            "name": "g",
            "gauge": {"dataPoints": [{"timeUnixNano": "yesterday", "asDouble": 1}, {"asInt": "3"}]},
        },
        {"name": "h", "histogram": {"dataPoints": [{"count": "x", "sum": 1}]}},
        {"name": "s", "sum": {"isMonotonic": "yes", "dataPoints": []}},
        {"name": "s", "sum": {"dataPoints": 5}},
        {"name": 5, "gauge": {"dataPoints": []}},
        "not a metric",
        good,
    ]
    value = msgspec.json.encode({"resourceMetrics": [{"scopeMetrics": [{"metrics": metrics}]}]})
    entries = OtlpMetricsJsonFormat().split(value)
    shapes = "".join("x" if isinstance(e, InvalidMessage) else "p" for e in entries)
    assert shapes == "pxpxxxxxp"
    assert entries[2]["value"] == 3.0  # the bad point's sibling
    assert all(e.reason is Reason.INVALID_EVENT for e in entries if isinstance(e, InvalidMessage))


def test_a_resource_without_metrics_holds_no_points():
    assert OtlpMetricsProtoFormat().split(b"\n\x00") == []  # one empty ResourceMetrics
    assert OtlpMetricsJsonFormat().split(b'{"resourceMetrics":[{"scopeMetrics":[]}]}') == []


@pytest.mark.parametrize("value", [b"", b"\x08\x01", b"\x10\x05\x18\x07"])
def test_bytes_that_decode_as_no_resource_metrics_are_not_a_request(value):
    with pytest.raises(InvalidMessage) as info:
        OtlpMetricsProtoFormat().split(value)
    assert info.value.reason is Reason.INVALID_PROTOBUF


def test_bytes_that_are_not_protobuf_are_invalid_protobuf():
    with pytest.raises(InvalidMessage) as info:
        OtlpMetricsProtoFormat().split(b"cpu,host=a usage_user=1 1718000000000000000\n\xff")
    assert info.value.reason is Reason.INVALID_PROTOBUF


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"not json", Reason.INVALID_JSON),
        (b"{}", Reason.INVALID_EVENT),
        (b'{"resourceMetrics":[]}', Reason.INVALID_EVENT),
        (b"[1, 2]", Reason.INVALID_EVENT),
        (b'{"resourceMetrics": 3}', Reason.INVALID_EVENT),
        (b'{"resourceMetrics": [{"scopeMetrics": [{"metrics": "x"}]}]}', Reason.INVALID_EVENT),
        (b'{"resourceMetrics": [{"resource": {"attributes": [{"value": {}}]}}]}', Reason.INVALID_EVENT),
        (b'{"resourceLogs": [{"scopeLogs": []}]}', Reason.INVALID_EVENT),  # a logs request
    ],
)
def test_json_that_is_not_a_metrics_request_rejects_the_message(value, reason):
    with pytest.raises(InvalidMessage) as info:
        OtlpMetricsJsonFormat().split(value)
    assert info.value.reason is reason


def test_load_format_gives_the_metrics_readers_only_when_asked():
    assert isinstance(load_format("otlp-proto"), OtlpProtoFormat)
    assert isinstance(load_format("otlp-json"), OtlpJsonFormat)
    assert isinstance(load_format("otlp-proto", metrics=True), OtlpMetricsProtoFormat)
    assert isinstance(load_format("otlp-json", metrics=True), OtlpMetricsJsonFormat)
    for fmt in (OtlpMetricsProtoFormat, OtlpMetricsJsonFormat):
        assert fmt.metrics and fmt.fans_out
        assert fmt.text_field is None
    for fmt in (OtlpProtoFormat, OtlpJsonFormat):
        assert not fmt.metrics
    for name in ("json", "text", "syslog"):
        assert not load_format(name).metrics
