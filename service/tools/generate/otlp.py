"""OTLP logs requests as the OpenTelemetry Collector's Kafka exporter writes them, built with the official
``opentelemetry-proto`` classes: protobuf (``otlp_proto``, its default) or OTLP/JSON (``otlp_json``:
lowerCamelCase names, 64-bit integers as decimal strings, enums as numbers, trace and span ids in hex).
For the tests and the benchmarks."""

from __future__ import annotations

import base64
import random
from collections.abc import Sequence
from typing import Any, Literal

import msgspec
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

Encoding = Literal["proto", "json"]

# OpenTelemetry's SeverityNumber for the generator's levels (logs data model, "Field: SeverityNumber").
SEVERITY_NUMBER = {"DEBUG": 5, "INFO": 9, "WARN": 13, "ERROR": 17, "FATAL": 21}


def logs_request(events: Sequence[dict[str, Any]], seed: int = 0) -> ExportLogsServiceRequest:
    """One request holding ``events`` (the generator's log events) as log records, in order, under one
    resource per run of events with the same ``service`` and ``host``, as the Collector batches them.
    The record's body is the event's ``message``."""
    rng = random.Random(seed)
    request = ExportLogsServiceRequest()
    resource_key: tuple[str, str] | None = None
    scope = None
    for event in events:
        key = (event.get("service", "unknown"), event.get("host", "unknown"))
        if key != resource_key:
            resource_key = key
            resource_logs = request.resource_logs.add()
            resource_logs.resource.attributes.extend([_kv("service.name", key[0]), _kv("host.name", key[1])])
            scope = resource_logs.scope_logs.add()
            scope.scope.name = "microbatch.generator"
        assert scope is not None
        record = scope.log_records.add()
        ts_ns = int(event.get("ts", 0)) * 1_000_000
        record.time_unix_nano = ts_ns
        record.observed_time_unix_nano = ts_ns
        level = str(event.get("level", "INFO"))
        record.severity_text = level
        record.severity_number = SEVERITY_NUMBER.get(level, 0)  # type: ignore[assignment]
        record.body.string_value = event["message"]
        record.trace_id = rng.randbytes(16)
        record.span_id = rng.randbytes(8)
        record.attributes.append(_kv("log.iostream", "stdout"))
    return request


def encode(request: ExportLogsServiceRequest, encoding: Encoding) -> bytes:
    """The Kafka message value of ``request`` in the exporter's ``otlp_proto`` or ``otlp_json``."""
    if encoding == "proto":
        return request.SerializeToString()
    document = MessageToDict(request, use_integers_for_enums=True)
    # protobuf's JSON mapping writes bytes as base64; OTLP/JSON writes trace and span ids in hex.
    for resource_logs in document.get("resourceLogs", []):
        for scope_logs in resource_logs.get("scopeLogs", []):
            for record in scope_logs.get("logRecords", []):
                for name in ("traceId", "spanId"):
                    if name in record:
                        record[name] = base64.b64decode(record[name]).hex()
    return msgspec.json.encode(document)


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))
