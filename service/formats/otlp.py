"""``otlp-proto`` and ``otlp-json``: an OTLP ``ExportLogsServiceRequest`` per message, as the
OpenTelemetry Collector's Kafka exporter writes it (``encoding: otlp_proto``, its default, or
``otlp_json``), one item per log record. Pure.

Each log record becomes these fields, named as in ``logs.proto``; a field the record leaves unset is
absent::

    body                      the log text (or a structured value: lists and maps become JSON's)
    severity_text             "ERROR"
    severity_number           17
    time_unix_nano            1733047200000000000 (an int)
    observed_time_unix_nano
    trace_id, span_id         lowercase hex, as OTLP/JSON writes them
    flags, event_name
    attributes                {"http.method": "GET", ...}: the record's attributes
    resource                  {"service.name": "checkout", ...}: its resource's attributes
    scope                     {"name": ..., "version": ...}: its instrumentation scope

Keys with dots stay whole (``resource.service.name`` finds ``service.name``; see ``paths``). Bytes
values are base64, as in OTLP/JSON, so both encodings give the same fields.

The readers of values and of OTLP/JSON nodes (``any_value``, ``key_values``, ``json_*``, ``typed``) are
shared with the metrics requests (``otlp_metrics``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import SeverityNumber

from service.errors import InvalidMessage, Reason
from service.formats.base import Entry
from service.formats.plain import parse_json


class OtlpProtoFormat:
    """OTLP logs in protobuf, decoded with the official ``opentelemetry-proto`` package."""

    name: ClassVar[str] = "otlp-proto"
    text_field: ClassVar[str | None] = "body"
    fans_out: ClassVar[bool] = True
    metrics: ClassVar[bool] = False

    def split(self, value: bytes) -> list[Entry]:
        request = ExportLogsServiceRequest()
        try:
            request.ParseFromString(value)
        except DecodeError as exc:
            raise InvalidMessage(
                Reason.INVALID_PROTOBUF, f"not an OTLP ExportLogsServiceRequest: {exc}"
            ) from None
        if not request.resource_logs:  # protobuf decodes any stray bytes as unknown fields, or as nothing
            raise InvalidMessage(Reason.INVALID_PROTOBUF, "no resource_logs: not an OTLP logs request")
        entries: list[Entry] = []
        append = entries.append
        for resource_logs in request.resource_logs:
            resource = key_values(resource_logs.resource.attributes)
            for scope_logs in resource_logs.scope_logs:
                raw = scope_logs.scope
                scope = _scope(raw.name, raw.version, key_values(raw.attributes))
                for record in scope_logs.log_records:  # per record: every attribute read builds an object
                    fields: dict[str, Any] = {}
                    for name in _SCALARS:
                        if scalar := getattr(record, name):
                            fields[name] = scalar
                    if record.HasField("body"):
                        fields["body"] = any_value(record.body)
                    if trace_id := record.trace_id:
                        fields["trace_id"] = trace_id.hex()
                    if span_id := record.span_id:
                        fields["span_id"] = span_id.hex()
                    if attributes := record.attributes:
                        fields["attributes"] = key_values(attributes)
                    fields["resource"] = resource
                    fields["scope"] = scope
                    append(fields)
        return entries


_SCALARS = (
    "time_unix_nano",
    "observed_time_unix_nano",
    "severity_number",
    "severity_text",
    "flags",
    "event_name",
)


def any_value(value: AnyValue) -> Any:
    """An attribute's value as Python's: str, int, float, bool, None, a list or a dict; bytes as base64."""
    kind = value.WhichOneof("value")
    if kind == "string_value":  # nearly always: the common case first
        return value.string_value
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return key_values(value.kvlist_value.values)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return getattr(value, kind)


def key_values(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    """Attributes as a dict, values as :func:`any_value` gives them."""
    return {kv.key: any_value(kv.value) for kv in pairs}


def _scope(name: str, version: str, attributes: dict[str, Any]) -> dict[str, Any]:
    scope: dict[str, Any] = {}
    if name:
        scope["name"] = name
    if version:
        scope["version"] = version
    if attributes:
        scope["attributes"] = attributes
    return scope


class OtlpJsonFormat:
    """OTLP logs in OTLP/JSON: lowerCamelCase names (snake_case accepted too, as the Collector does),
    hex trace and span ids, 64-bit integers as decimal strings, enums as numbers."""

    name: ClassVar[str] = "otlp-json"
    text_field: ClassVar[str | None] = "body"
    fans_out: ClassVar[bool] = True
    metrics: ClassVar[bool] = False

    def split(self, value: bytes) -> list[Entry]:
        document = parse_json(value)
        try:
            resource_logs = json_list(json_mapping(document), "resourceLogs")
            if not resource_logs:
                raise ValueError("no resourceLogs")
            scopes = []
            for rl in resource_logs:
                resource = json_key_values(json_get(json_get(rl, "resource") or {}, "attributes"))
                for sl in json_list(rl, "scopeLogs"):
                    scopes.append(
                        (resource, _json_scope(json_get(sl, "scope") or {}), json_list(sl, "logRecords"))
                    )
        except BAD_SHAPE as exc:
            raise InvalidMessage(Reason.INVALID_EVENT, f"not an OTLP/JSON logs request: {exc}") from None
        entries: list[Entry] = []
        for resource, scope, records in scopes:
            for record in records:
                try:
                    entries.append(_json_record(json_mapping(record), resource, scope))
                except BAD_SHAPE as exc:
                    entries.append(InvalidMessage(Reason.INVALID_EVENT, f"bad OTLP/JSON log record: {exc}"))
        return entries


# What a malformed document raises on its way through the helpers below.
BAD_SHAPE = (TypeError, ValueError, AttributeError, LookupError, binascii.Error)


def _severity(raw: Any) -> int:
    """A SeverityNumber, as a number or by its name (``SEVERITY_NUMBER_INFO``, protobuf's own JSON)."""
    if isinstance(raw, str) and raw.startswith("SEVERITY_NUMBER_"):
        return int(SeverityNumber.Value(raw))
    return int(typed(raw, str | int))


# OTLP/JSON name -> (field name, conversion). Integers may be strings (64-bit) or numbers.
_JSON_FIELDS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "timeUnixNano": ("time_unix_nano", int),
    "observedTimeUnixNano": ("observed_time_unix_nano", int),
    "severityNumber": ("severity_number", _severity),
    "severityText": ("severity_text", str),
    "flags": ("flags", int),
    "eventName": ("event_name", str),
    "traceId": ("trace_id", lambda v: bytes.fromhex(v).hex()),
    "spanId": ("span_id", lambda v: bytes.fromhex(v).hex()),
}


def _json_record(
    record: Mapping[str, Any], resource: dict[str, Any], scope: dict[str, Any]
) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for camel, (name, convert) in _JSON_FIELDS.items():
        raw = json_get(record, camel)
        # Zero and "" mean unset, as in protobuf.
        if raw is not None and raw != "" and (converted := convert(raw)):
            fields[name] = converted
    body = json_get(record, "body")
    if body is not None:
        fields["body"] = json_any_value(body)
    attributes = json_get(record, "attributes")
    if attributes:
        fields["attributes"] = json_key_values(attributes)
    fields["resource"] = resource
    fields["scope"] = scope
    return fields


def json_any_value(value: Mapping[str, Any]) -> Any:
    """An OTLP/JSON AnyValue as :func:`any_value` gives the protobuf one; raises one of BAD_SHAPE."""
    for camel, raw in json_mapping(value).items():
        kind = _SNAKE_TO_CAMEL.get(camel, camel)
        if raw is None:  # JSON null: the field's default, i.e. unset
            continue
        if kind == "stringValue":
            return typed(raw, str)
        if kind == "intValue":
            return int(typed(raw, str | int))
        if kind == "doubleValue":
            return float(typed(raw, str | int | float))
        if kind == "boolValue":
            return typed(raw, bool)
        if kind == "bytesValue":  # protobuf's JSON allows the URL-safe alphabet too
            decoded = base64.b64decode(typed(raw, str).replace("-", "+").replace("_", "/"), validate=True)
            return base64.b64encode(decoded).decode()
        if kind == "arrayValue":
            return [json_any_value(v) for v in json_list(raw, "values")]
        if kind == "kvlistValue":
            return json_key_values(json_list(raw, "values"))
    return None


def json_key_values(pairs: Any) -> dict[str, Any]:
    """OTLP/JSON attributes (a list of ``{"key", "value"}``, or null) as :func:`key_values` gives them."""
    if not pairs:
        return {}
    return {typed(json_mapping(kv)["key"], str): json_any_value(json_get(kv, "value") or {}) for kv in pairs}


def typed(raw: Any, kind: Any) -> Any:
    """``raw`` if it is a ``kind`` (a JSON string is not a bool, nor a bool an int), else TypeError."""
    if not isinstance(raw, kind) or (isinstance(raw, bool) and kind is not bool):
        raise TypeError(f"expected {getattr(kind, '__name__', kind)}, got {type(raw).__name__}")
    return raw


def _json_scope(raw: Mapping[str, Any]) -> dict[str, Any]:
    name, version = json_get(raw, "name") or "", json_get(raw, "version") or ""
    return _scope(str(name), str(version), json_key_values(json_get(raw, "attributes")))


_CAMEL_TO_SNAKE = {
    "resourceLogs": "resource_logs",
    "scopeLogs": "scope_logs",
    "logRecords": "log_records",
    "timeUnixNano": "time_unix_nano",
    "observedTimeUnixNano": "observed_time_unix_nano",
    "severityNumber": "severity_number",
    "severityText": "severity_text",
    "eventName": "event_name",
    "traceId": "trace_id",
    "spanId": "span_id",
    "stringValue": "string_value",
    "intValue": "int_value",
    "doubleValue": "double_value",
    "boolValue": "bool_value",
    "bytesValue": "bytes_value",
    "arrayValue": "array_value",
    "kvlistValue": "kvlist_value",
    # ExportMetricsServiceRequest (otlp_metrics)
    "resourceMetrics": "resource_metrics",
    "scopeMetrics": "scope_metrics",
    "dataPoints": "data_points",
    "startTimeUnixNano": "start_time_unix_nano",
    "asDouble": "as_double",
    "asInt": "as_int",
    "aggregationTemporality": "aggregation_temporality",
    "isMonotonic": "is_monotonic",
    "exponentialHistogram": "exponential_histogram",
    "quantileValues": "quantile_values",
}
_SNAKE_TO_CAMEL = {snake: camel for camel, snake in _CAMEL_TO_SNAKE.items()}


def json_get(node: Any, camel: str) -> Any:
    """``node[camel]``, or its snake_case spelling, or None."""
    node = json_mapping(node)
    value = node.get(camel)
    return node.get(_CAMEL_TO_SNAKE.get(camel, camel)) if value is None else value


def json_mapping(node: Any) -> Mapping[str, Any]:
    """``node`` if it is an object, else TypeError."""
    if not isinstance(node, Mapping):
        raise TypeError(f"expected an object, got {type(node).__name__}")
    return node


def json_list(node: Any, camel: str) -> list[Any]:
    """The list at ``camel`` (see :func:`json_get`), ``[]`` when absent or null, else TypeError."""
    value = json_get(node, camel)
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"{camel} is not a list")
    return value
