"""``otlp-proto`` and ``otlp-json`` for metrics: an OTLP ``ExportMetricsServiceRequest`` per message, as the
OpenTelemetry Collector's Kafka exporter writes it (``encoding: otlp_proto`` or ``otlp_json``, topic
``otlp_metrics``), one point per data point (``points``). Pure.

Every point carries ``resource``, its resource's attributes, and the host named by ``host.name`` there.
Data point attributes become strings (``200``, ``true``; lists and maps as JSON). By the metric's type:

    gauge                        its points, gauges
    sum, cumulative, monotonic   counters, with ``start`` (its start time, seconds; absent when the point
                                 has none): the hostmetrics receiver's ``system.cpu.time``, ...
    sum, delta, monotonic        rates: value / (time - start); a point without a start time is left out
    sum, not monotonic           gauges (``system.memory.usage``, ``system.filesystem.usage``)
    histogram, exponential       ``<name>.count`` and ``<name>.sum`` (counters when cumulative, rates when
    histogram                    delta), ``<name>.min`` and ``<name>.max`` gauges when the point has them
    summary                      ``<name>.count``, ``<name>.sum`` (counters) and ``<name>`` {quantile="0.99"},
                                 gauges

A point flagged NO_RECORDED_VALUE, or holding NaN or an infinity, has the value None. A temporality left
unspecified is read as cumulative.

The hostmetrics receiver names its attributes as semantic conventions 1.9 did; for metrics named
``system.*`` they are renamed to the current names (``state`` -> ``cpu.mode``, ``system.memory.state``,
``system.filesystem.state``; ``device`` -> ``network.interface.name`` or ``system.device``;
``direction`` -> ``network.io.direction`` or ``disk.io.direction``; ``mountpoint``, ``type``, ``mode`` ->
``system.filesystem.*``), with the values ``wait`` -> ``iowait``, ``buffered`` -> ``buffers`` and
``cpu0`` -> ``0``, and ``system.network.packets`` / ``.dropped`` become ``system.network.packet.count`` /
``.packet.dropped``. Both encodings give identical points.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final

import msgspec
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, Metric

from service.errors import InvalidMessage, Reason
from service.formats.base import Entry
from service.formats.otlp import (
    BAD_SHAPE,
    json_get,
    json_key_values,
    json_list,
    json_mapping,
    key_values,
    typed,
)
from service.formats.plain import parse_json
from service.formats.points import COUNTER, CPU_MODES, GAUGE, MEMORY_STATES, RATE, finite, point

_DELTA: Final = "delta"  # a mode, not a kind: delta sums and histograms become rates
_NO_RECORDED_VALUE: Final = 1  # DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK
_DELTA_TEMPORALITY: Final = int(AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA)


class OtlpMetricsProtoFormat:
    """OTLP metrics in protobuf, decoded with the official ``opentelemetry-proto`` package."""

    name: ClassVar[str] = "otlp-proto"
    text_field: ClassVar[str | None] = None
    fans_out: ClassVar[bool] = True
    metrics: ClassVar[bool] = True

    def split(self, value: bytes) -> list[Entry]:
        request = ExportMetricsServiceRequest()
        try:
            request.ParseFromString(value)
        except DecodeError as exc:
            raise InvalidMessage(
                Reason.INVALID_PROTOBUF, f"not an OTLP ExportMetricsServiceRequest: {exc}"
            ) from None
        if not request.resource_metrics:  # protobuf decodes any stray bytes as unknown fields, or as nothing
            raise InvalidMessage(Reason.INVALID_PROTOBUF, "no resource_metrics: not an OTLP metrics request")
        entries: list[Entry] = []
        for resource_metrics in request.resource_metrics:
            sink = _Sink(entries, _texts(key_values(resource_metrics.resource.attributes)))
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    _proto_metric(sink, metric)
        return entries


def _proto_metric(sink: _Sink, metric: Metric) -> None:
    data_kind = metric.WhichOneof("data")
    if data_kind is None:  # no data: nothing to read
        return
    name, keys = _semconv(metric.name)
    if data_kind in ("gauge", "sum"):
        if data_kind == "gauge":
            mode, data_points = GAUGE, metric.gauge.data_points
        else:
            mode = _sum_mode(metric.sum.aggregation_temporality, metric.sum.is_monotonic)
            data_points = metric.sum.data_points
        for dp in data_points:
            which = dp.WhichOneof("value")
            if dp.flags & _NO_RECORDED_VALUE or which is None:
                value = None
            else:
                value = finite(dp.as_double) if which == "as_double" else float(dp.as_int)
            attributes = _attributes(key_values(dp.attributes), keys)
            sink.point(name, attributes, dp.start_time_unix_nano, dp.time_unix_nano, value, mode)
    elif data_kind in ("histogram", "exponential_histogram"):
        data = metric.histogram if data_kind == "histogram" else metric.exponential_histogram
        mode = _DELTA if data.aggregation_temporality == _DELTA_TEMPORALITY else COUNTER
        for hp in data.data_points:
            sink.histogram(
                name,
                _attributes(key_values(hp.attributes), keys),
                (hp.start_time_unix_nano, hp.time_unix_nano, mode),
                bool(hp.flags & _NO_RECORDED_VALUE),
                hp.count,
                hp.sum if hp.HasField("sum") else None,
                hp.min if hp.HasField("min") else None,
                hp.max if hp.HasField("max") else None,
            )
    elif data_kind == "summary":
        for sp in metric.summary.data_points:
            sink.summary(
                name,
                _attributes(key_values(sp.attributes), keys),
                (sp.start_time_unix_nano, sp.time_unix_nano),
                bool(sp.flags & _NO_RECORDED_VALUE),
                sp.count,
                sp.sum,
                [(q.quantile, q.value) for q in sp.quantile_values],
            )


class OtlpMetricsJsonFormat:
    """OTLP metrics in OTLP/JSON: lowerCamelCase names (snake_case accepted too), 64-bit integers as decimal
    strings or numbers, enums as numbers (or their names), doubles as numbers or strings (``"NaN"``)."""

    name: ClassVar[str] = "otlp-json"
    text_field: ClassVar[str | None] = None
    fans_out: ClassVar[bool] = True
    metrics: ClassVar[bool] = True

    def split(self, value: bytes) -> list[Entry]:
        document = parse_json(value)
        try:
            resource_metrics = json_list(json_mapping(document), "resourceMetrics")
            if not resource_metrics:
                raise ValueError("no resourceMetrics")
            metrics: list[tuple[dict[str, str], Any]] = []
            for rm in resource_metrics:
                resource = _texts(json_key_values(json_get(json_get(rm, "resource") or {}, "attributes")))
                for sm in json_list(rm, "scopeMetrics"):
                    metrics.extend((resource, m) for m in json_list(sm, "metrics"))
        except BAD_SHAPE as exc:
            raise InvalidMessage(Reason.INVALID_EVENT, f"not an OTLP/JSON metrics request: {exc}") from None
        entries: list[Entry] = []
        sink = None
        for resource, metric in metrics:
            if sink is None or sink.resource is not resource:
                sink = _Sink(entries, resource)
            try:
                _json_metric(sink, json_mapping(metric))
            except BAD_SHAPE as exc:
                entries.append(InvalidMessage(Reason.INVALID_EVENT, f"bad OTLP/JSON metric: {exc}"))
        return entries


_JSON_DATA = ("gauge", "sum", "histogram", "exponentialHistogram", "summary")


def _json_metric(sink: _Sink, metric: Mapping[str, Any]) -> None:
    """The points of one metric: BAD_SHAPE for a metric of the wrong shape, an entry for a bad data point."""
    for data_kind in _JSON_DATA:
        data = json_get(metric, data_kind)
        if data is not None:
            break
    else:
        return  # no data: nothing to read
    name, keys = _semconv(typed(json_get(metric, "name") or "", str))
    temporality = _temporality(json_get(data, "aggregationTemporality"))
    if data_kind == "gauge":
        mode = GAUGE
    elif data_kind == "sum":
        mode = _sum_mode(temporality, typed(json_get(data, "isMonotonic") or False, bool))
    else:
        mode = _DELTA if temporality == _DELTA_TEMPORALITY else COUNTER
    for dp in json_list(data, "dataPoints"):
        try:
            _json_point(sink, name, keys, data_kind, mode, json_mapping(dp))
        except BAD_SHAPE as exc:
            sink.out.append(
                InvalidMessage(Reason.INVALID_EVENT, f"bad OTLP/JSON data point of {name!r}: {exc}")
            )


def _json_point(
    sink: _Sink, name: str, keys: Mapping[str, str] | None, data_kind: str, mode: str, dp: Mapping[str, Any]
) -> None:
    # Everything is read before any point is made: a bad data point leaves no part of itself behind.
    attributes = _attributes(json_key_values(json_get(dp, "attributes")), keys)
    start, time = _json_int(json_get(dp, "startTimeUnixNano")), _json_int(json_get(dp, "timeUnixNano"))
    missing = bool(_json_int(json_get(dp, "flags")) & _NO_RECORDED_VALUE)
    if data_kind in ("gauge", "sum"):
        as_double, as_int = json_get(dp, "asDouble"), json_get(dp, "asInt")
        if missing or (as_double is None and as_int is None):
            value = None
        else:
            value = finite(_json_double(as_double)) if as_double is not None else float(_json_int(as_int))
        sink.point(name, attributes, start, time, value, mode)
    elif data_kind == "summary":
        quantiles = [
            (_json_double(json_get(q, "quantile") or 0), _json_double(json_get(q, "value") or 0))
            for q in json_list(dp, "quantileValues")
        ]
        count, total = _json_int(json_get(dp, "count")), _json_double(json_get(dp, "sum") or 0)
        sink.summary(name, attributes, (start, time), missing, count, total, quantiles)
    else:
        count = _json_int(json_get(dp, "count"))
        total, low, high = (json_get(dp, key) for key in ("sum", "min", "max"))
        sink.histogram(
            name,
            attributes,
            (start, time, mode),
            missing,
            count,
            None if total is None else _json_double(total),
            None if low is None else _json_double(low),
            None if high is None else _json_double(high),
        )


def _json_int(raw: Any) -> int:
    """A 64-bit integer: a decimal string or a number; absent is 0, as in protobuf."""
    return 0 if raw is None else int(typed(raw, str | int))


def _json_double(raw: Any) -> float:
    """A double: a number, or a string (``"NaN"``, ``"Infinity"``, ``"1.5"``)."""
    return float(typed(raw, str | int | float))


def _temporality(raw: Any) -> int:
    if raw is None:
        return 0
    if isinstance(raw, str) and raw.startswith("AGGREGATION_TEMPORALITY_"):
        return int(AggregationTemporality.Value(raw))
    return int(typed(raw, str | int))


# --- shared by both encodings -----------------------------------------------------------------------


def _sum_mode(temporality: int, monotonic: bool) -> str:
    """A sum's points: gauges unless monotonic; then counters, or rates when delta. An unspecified
    temporality is read as cumulative."""
    if not monotonic:
        return GAUGE
    return _DELTA if temporality == _DELTA_TEMPORALITY else COUNTER


class _Sink:
    """Makes the points of one resource's metrics (one per resource, not per point)."""

    __slots__ = ("host", "out", "resource")

    def __init__(self, out: list[Entry], resource: dict[str, str]) -> None:
        self.out = out
        self.resource = resource
        self.host = resource.get("host.name")

    def point(
        self,
        metric: str,
        attributes: dict[str, str],
        start_ns: int,
        time_ns: int,
        value: float | None,
        mode: str,
    ) -> None:
        """One point; ``mode`` is a kind, or _DELTA: a rate over the point's own interval."""
        if mode == _DELTA:
            if start_ns <= 0 or time_ns <= start_ns:  # no interval to divide by
                return
            rate = None if value is None else value / ((time_ns - start_ns) / 1_000_000_000)
            made = point(self.host, metric, attributes, time_ns / 1_000_000_000, rate, RATE)
        else:
            made = point(self.host, metric, attributes, time_ns / 1_000_000_000, value, mode)
            if mode == COUNTER and start_ns:
                made["start"] = start_ns / 1_000_000_000
        made["resource"] = self.resource
        self.out.append(made)

    def histogram(
        self,
        name: str,
        attributes: dict[str, str],
        times: tuple[int, int, str],
        missing: bool,
        count: int,
        total: float | None,
        low: float | None,
        high: float | None,
    ) -> None:
        """``.count``, ``.sum``, ``.min``, ``.max``; ``total``, ``low``, ``high`` None when the point has
        none. ``times`` is (start, time, mode)."""
        start, time, mode = times
        self.point(f"{name}.count", attributes, start, time, None if missing else float(count), mode)
        if total is not None:
            self.point(f"{name}.sum", attributes, start, time, None if missing else finite(total), mode)
        if missing:  # no recorded value: no min or max either
            return
        if low is not None:
            self.point(f"{name}.min", attributes, start, time, finite(low), GAUGE)
        if high is not None:
            self.point(f"{name}.max", attributes, start, time, finite(high), GAUGE)

    def summary(
        self,
        name: str,
        attributes: dict[str, str],
        times: tuple[int, int],
        missing: bool,
        count: int,
        total: float,
        quantiles: list[tuple[float, float]],
    ) -> None:
        """``.count`` and ``.sum`` (a summary is always cumulative), and one gauge per quantile."""
        start, time = times
        self.point(f"{name}.count", attributes, start, time, None if missing else float(count), COUNTER)
        self.point(f"{name}.sum", attributes, start, time, None if missing else finite(total), COUNTER)
        for quantile, value in quantiles:
            labelled = {**attributes, "quantile": str(quantile)}
            self.point(name, labelled, start, time, None if missing else finite(value), GAUGE)


def _text(value: Any) -> str:
    """An attribute value as a string: booleans as ``true``/``false``, whole doubles without ``.0``, lists
    and maps as JSON, no value as ``""``."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    if value is None:
        return ""
    return msgspec.json.encode(value).decode()


def _texts(attributes: dict[str, Any]) -> dict[str, str]:
    return {key: _text(value) for key, value in attributes.items()}


# Semantic conventions 1.9 (the hostmetrics receiver's) -> current, for metrics named system.*.
_RENAMED = {
    "system.network.packets": "system.network.packet.count",
    "system.network.dropped": "system.network.packet.dropped",
}
_FILESYSTEM_KEYS = {
    "state": "system.filesystem.state",
    "device": "system.device",
    "mountpoint": "system.filesystem.mountpoint",
    "type": "system.filesystem.type",
    "mode": "system.filesystem.mode",
}
_SYSTEM_KEYS: tuple[tuple[str, dict[str, str]], ...] = (
    ("system.cpu.", {"state": "cpu.mode"}),
    ("system.memory.", {"state": "system.memory.state"}),
    ("system.filesystem.", _FILESYSTEM_KEYS),
    ("system.network.", {"device": "network.interface.name", "direction": "network.io.direction"}),
    ("system.disk.", {"device": "system.device", "direction": "disk.io.direction"}),
)


def _semconv(name: str) -> tuple[str, Mapping[str, str] | None]:
    """The metric's current name and its attributes' renames (None: none; most metrics)."""
    if not name.startswith("system."):
        return name, None
    name = _RENAMED.get(name, name)
    for prefix, keys in _SYSTEM_KEYS:
        if name.startswith(prefix):
            return name, keys
    return name, None


def _attributes(raw: dict[str, Any], keys: Mapping[str, str] | None) -> dict[str, str]:
    if keys is None:
        return {key: _text(value) for key, value in raw.items()}
    attributes = {}
    for raw_key, value in raw.items():
        key = keys.get(raw_key, raw_key)
        text = _text(value)
        if key == "cpu.mode":
            text = CPU_MODES.get(text, text)
        elif key == "system.memory.state":
            text = MEMORY_STATES.get(text, text)
        elif key == "cpu" and text.startswith("cpu") and text[3:].isdigit():  # "cpu0" -> "0"
            text = text[3:]
        attributes[key] = text
    return attributes
