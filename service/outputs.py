"""The two record formats the service writes: results and dead letters. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from service.errors import Reason
from service.records import Headers, InputRecord, OutRecord, Rejection

_ENCODER = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class ModelRef:
    """How results name the model that produced them."""

    name: str
    version: str
    provider: str


def result_record(
    record: InputRecord,
    topic: str,
    model: ModelRef,
    result: dict[str, Any],
    batch_size: int,
    consumed_ms: int,
    produced_ms: int,
) -> OutRecord:
    """One result for one input: same key, input headers passed through, value as in the README."""
    value = {
        "source": {"topic": record.topic, "partition": record.partition, "offset": record.offset},
        "model": {"name": model.name, "version": model.version, "provider": model.provider},
        "result": result,
        "batch_size": batch_size,
        "timestamps": {
            "event_ms": record.timestamp_ms,
            "consumed_ms": consumed_ms,
            "produced_ms": produced_ms,
        },
    }
    return OutRecord(topic, record.key, _ENCODER.encode(value), record.headers, record)


def dead_letter(rejection: Rejection, topic: str) -> OutRecord:
    """The original key and bytes, unchanged (a null value stays null); why and where from in the
    ``error.*`` and ``source.*`` headers, after the input's own headers."""
    record = rejection.record
    headers: Headers = list(record.headers or [])
    headers += [
        ("error.reason", rejection.reason.value.encode()),
        ("error.message", rejection.detail.encode("utf-8", "replace")[:1000]),
        ("source.topic", record.topic.encode()),
        ("source.partition", str(record.partition).encode()),
        ("source.offset", str(record.offset).encode()),
    ]
    return OutRecord(topic, record.key, record.value, headers, record)


def replace_refused(out: OutRecord, why: str, dlq_topic: str) -> OutRecord | None:
    """What to send instead of a record the broker refused for good (too large, invalid).

    A result becomes a dead letter of its input (``output_rejected``). A dead letter is sent again without
    its value, its original size in ``error.value_dropped``, so its partition is not stuck behind it.
    None when there is nothing smaller left to try (the caller keeps the offset uncommitted).
    """
    if out.topic != dlq_topic:
        return dead_letter(Rejection(out.source, Reason.OUTPUT_REJECTED, why), dlq_topic)
    if out.value is None:
        return None
    headers: Headers = [*(out.headers or []), ("error.value_dropped", str(len(out.value)).encode())]
    return OutRecord(out.topic, out.key, None, headers, out.source)
