"""service/tools/poison.py: every catalogued malformed message gets exactly the reason the catalogue promises,
through the real processors."""

from __future__ import annotations

import random
from pathlib import Path

import msgspec
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from service.errors import Reason
from service.flow.decode import Decoder, decode
from service.flow.records import Decoded, Rejection
from service.formats.plain import TextFormat
from service.processors import Capabilities
from service.processors.base import ModelInfo
from service.processors.features import FeaturesProcessor
from service.processors.text import TextProcessor
from service.tools.poison import POISON_KINDS, make_poison

MAX_VALUE_BYTES = 256
TOO_LARGE = MAX_VALUE_BYTES + 100
METRICS_EVENT = {"host": "web-1", "cpu": 0.75, "mem": 41, "disk": 12.5}
LOG_EVENT = {"host": "web-1", "level": "error", "message": "disk full on /var"}

# Kinds whose reason does not depend on the value being JSON: they apply to plain-line text too.
GENERIC_KINDS = {"empty", "null", "too_large", "bad_utf8", "truncated_utf8"}
# Kinds that pick one of several values at random; tested for every variant below.
RANDOM_KINDS = {"wrong_type"}


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory) -> Path:
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        ["disk full on host", "user login ok"], trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]"])
    )
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


def features_processor(features_info) -> FeaturesProcessor:
    return FeaturesProcessor(features_info(["cpu", "mem", "disk"]))


def text_processor(tokenizer_path: Path, text_field: str | None) -> TextProcessor:
    """Reading ``text_field`` of JSON events; None: the ``text`` format's line."""
    info = ModelInfo(
        name="text",
        model_dir=tokenizer_path.parent,
        input_names=("input_ids", "attention_mask"),
        output_names=("logits",),
        settings={"tokenizer": tokenizer_path, "text_field": text_field},
        defaults={"text_field": TextFormat.text_field},
    )
    return TextProcessor(info)


def outcome_of(make_record, parse, value: bytes | None) -> Decoded | Rejection:
    return decode(make_record(value), parse, MAX_VALUE_BYTES)


def plain_outcome(make_record, processor: TextProcessor, value: bytes | None) -> Decoded | Rejection:
    """The outcome of one value of the ``text`` format."""
    accepted, rejected, _counts = Decoder(
        TextFormat(), processor, Capabilities.of(processor), MAX_VALUE_BYTES
    ).decode([make_record(value)])
    [outcome] = accepted + rejected
    return outcome


def wrong_type_variants(event, field) -> set[bytes]:
    """All the values the random ``wrong_type`` kind can produce (seeded, so deterministic)."""
    state = random.getstate()
    try:
        variants = set()
        for seed in range(200):
            random.seed(seed)
            variants.add(make_poison("wrong_type", event, field, TOO_LARGE))
        return variants
    finally:
        random.setstate(state)


def test_catalogue_covers_every_decode_time_reason():
    # These come from the model, the broker or unreadable headers (which this client cannot even write),
    # never from a message's value.
    not_from_values = {
        Reason.INFERENCE_ERROR,
        Reason.INVALID_OUTPUT,
        Reason.OUTPUT_REJECTED,
        Reason.INVALID_HEADERS,
        Reason.INVALID_PROTOBUF,  # only the otlp-proto format reads protobuf (tests/unit/formats)
        Reason.DELIVERY_LIMIT,  # a share group's delivery count (tests/unit/flow/test_redelivery.py)
    }
    assert set(POISON_KINDS.values()) == set(Reason) - not_from_values


def test_the_good_events_decode(make_record, features_info, tokenizer_path):
    good_metrics = msgspec.json.encode(METRICS_EVENT)
    assert isinstance(outcome_of(make_record, features_processor(features_info).parse, good_metrics), Decoded)
    good_log = msgspec.json.encode(LOG_EVENT)
    assert isinstance(
        outcome_of(make_record, text_processor(tokenizer_path, "message").parse, good_log), Decoded
    )
    plain = LOG_EVENT["message"].encode()
    assert isinstance(plain_outcome(make_record, text_processor(tokenizer_path, None), plain), Decoded)


@pytest.mark.parametrize("kind", sorted(set(POISON_KINDS) - RANDOM_KINDS))
def test_features_processor_gives_each_poison_kind_its_promised_reason(make_record, features_info, kind):
    value = make_poison(kind, METRICS_EVENT, "cpu", TOO_LARGE)
    outcome = outcome_of(make_record, features_processor(features_info).parse, value)
    assert isinstance(outcome, Rejection), f"{kind}: {value!r} was accepted"
    assert outcome.reason is POISON_KINDS[kind]


@pytest.mark.parametrize("field", ["cpu", "mem", "disk"])
def test_features_processor_rejects_each_wrong_type_variant(make_record, features_info, field):
    variants = wrong_type_variants(METRICS_EVENT, field)
    assert len(variants) >= 2
    parse = features_processor(features_info).parse
    for value in variants:
        outcome = outcome_of(make_record, parse, value)
        assert isinstance(outcome, Rejection), value
        assert outcome.reason is POISON_KINDS["wrong_type"], value


@pytest.mark.parametrize("kind", sorted(set(POISON_KINDS) - RANDOM_KINDS))
def test_text_processor_json_mode_gives_each_poison_kind_its_promised_reason(
    make_record, tokenizer_path, kind
):
    value = make_poison(kind, LOG_EVENT, "message", TOO_LARGE)
    outcome = outcome_of(make_record, text_processor(tokenizer_path, "message").parse, value)
    assert isinstance(outcome, Rejection), f"{kind}: {value!r} was accepted"
    assert outcome.reason is POISON_KINDS[kind]


def test_text_processor_json_mode_rejects_each_wrong_type_variant(make_record, tokenizer_path):
    parse = text_processor(tokenizer_path, "message").parse
    for value in wrong_type_variants(LOG_EVENT, "message"):
        outcome = outcome_of(make_record, parse, value)
        assert isinstance(outcome, Rejection), value
        assert outcome.reason is Reason.INVALID_EVENT


@pytest.mark.parametrize("kind", sorted(GENERIC_KINDS))
def test_text_processor_plain_mode_gives_the_generic_kinds_their_reason(make_record, tokenizer_path, kind):
    value = make_poison(kind, LOG_EVENT, "message", TOO_LARGE)
    outcome = plain_outcome(make_record, text_processor(tokenizer_path, None), value)
    assert isinstance(outcome, Rejection)
    assert outcome.reason is POISON_KINDS[kind]


@pytest.mark.parametrize("kind", sorted(set(POISON_KINDS) - GENERIC_KINDS - RANDOM_KINDS))
def test_text_processor_plain_mode_takes_json_shaped_poison_as_text(make_record, tokenizer_path, kind):
    # In plain-line mode the value is just a line of text: JSON problems are not problems.
    value = make_poison(kind, LOG_EVENT, "message", TOO_LARGE)
    processor = text_processor(tokenizer_path, None)
    outcome = plain_outcome(make_record, processor, value)
    assert isinstance(outcome, Decoded)
    assert outcome.item == processor.prepare([value.decode().strip()])[0]  # the whole line, tokenized


def test_too_large_is_only_too_large_above_the_limit(make_record, features_info):
    value = make_poison("too_large", METRICS_EVENT, "cpu", TOO_LARGE)
    assert len(value) > MAX_VALUE_BYTES
    # The same bytes are a valid event under a larger limit: the size, nothing else, got it rejected.
    assert isinstance(
        decode(make_record(value), features_processor(features_info).parse, len(value)), Decoded
    )


def test_poison_keeps_the_rest_of_the_event():
    missing = msgspec.json.decode(make_poison("missing_field", METRICS_EVENT, "mem", TOO_LARGE))
    assert missing == {k: v for k, v in METRICS_EVENT.items() if k != "mem"}
    wrong = msgspec.json.decode(make_poison("wrong_field_type", METRICS_EVENT, "mem", TOO_LARGE))
    assert wrong["cpu"] == METRICS_EVENT["cpu"]
    assert not isinstance(wrong["mem"], int | float)


def test_unknown_kind_is_refused_listing_the_known_ones():
    with pytest.raises(ValueError, match="not_json"):
        make_poison("gibberish", METRICS_EVENT, "cpu", TOO_LARGE)
