"""Documents as Fluent Bit, Vector and Filebeat write them to Kafka (tests/fixtures/shippers, sources in
SOURCES.md there), read the way docs/FORMATS.md tells users to: the json format, the text field the
shipper uses, and dotted paths into its metadata."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from service.flow.decode import Decoder
from service.flow.records import InputRecord
from service.formats import Picker
from service.formats.plain import JsonFormat
from service.processors import Capabilities
from service.processors.base import ModelInfo
from service.processors.text import TextProcessor

SHIPPERS = Path(__file__).resolve().parents[2] / "fixtures" / "shippers"


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory) -> Path:
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["error logging"], trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]"]))
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.mark.parametrize(
    ("fixture", "text_field", "include", "text", "fields"),
    [
        (
            "fluent-bit-kubernetes.json",
            "log",
            ["kubernetes.namespace_name", "kubernetes.labels.app.kubernetes.io/name", "stream"],
            "Fluent Bit is logging",
            {"kubernetes.namespace_name": "core", "kubernetes.labels.app.kubernetes.io/name": "fluent-bit"},
        ),
        (
            "fluent-bit-kubernetes-grep-doc.json",
            "log",
            ["kubernetes.labels.app", "kubernetes.host"],
            "something",
            {"kubernetes.labels.app": "myapp"},
        ),
        (
            "vector-kubernetes-logs.json",
            "message",
            ["kubernetes.pod_namespace", "kubernetes.pod_labels.app"],
            "F1015 11:01:46.499073",
            {"kubernetes.pod_namespace": "kube-system"},
        ),
        ("vector-file.json", "message", ["host", "file"], "GET /disintermediate", {"host": "my-host.local"}),
        (
            "vector-syslog.json",
            "message",
            ["hostname", "appname", "severity"],
            "Try to override the THX port",
            {"appname": "non", "severity": "notice"},
        ),
        (
            "filebeat-log.json",
            "message",
            ["host.name", "log.file.path", "@timestamp"],
            "card declined order=1234",
            {"@timestamp": "2024-11-20T14:37:56.612Z"},
        ),
    ],
)
def test_shipper_documents_give_their_text_and_routing_fields(
    tokenizer_path, fixture, text_field, include, text, fields
):
    info = ModelInfo(
        "log-classifier",
        tokenizer_path.parent,
        ("input_ids",),
        ("class_index",),
        settings={"tokenizer": tokenizer_path, "text_field": text_field},
    )
    processor = TextProcessor(info)
    value = (SHIPPERS / fixture).read_bytes()
    # The text through the fast path (typed decoding of one field) and through the fields of the document.
    assert text in processor.parse(value)
    [document] = JsonFormat().split(value)
    assert processor.parse_fields(document) == processor.parse(value)
    record = InputRecord("logs", 0, 0, None, value, None, None, 0.0)
    [decoded], rejected, _ = Decoder(
        JsonFormat(), processor, Capabilities.of(processor), 1 << 20, Picker(include)
    ).decode([record])
    assert rejected == []
    assert decoded.fields is not None
    assert decoded.fields.items() >= fields.items()
