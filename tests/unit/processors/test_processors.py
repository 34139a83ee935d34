"""service/processors: the features and text processors, the shared helpers and load_processor."""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from service.errors import BatchMismatchError, ConfigError, InvalidMessage, Reason
from service.formats.plain import TextFormat
from service.processors import Processor, load_processor
from service.processors.base import ModelInfo, Port, setting
from service.processors.features import FeaturesProcessor
from service.processors.text import TextProcessor

CORPUS = [
    "disk full on host web one",
    "user login ok from host web two",
    "error disk failure on volume data",
    "kernel panic not syncing",
]
PAD_ID = 0


def encode(event: dict) -> bytes:
    return msgspec.json.encode(event)


# -- features -------------------------------------------------------------------------------------------


def test_features_follow_the_feature_list_order_not_the_event_order(features_info):
    processor = FeaturesProcessor(features_info(["mem", "cpu", "disk"]))
    row = processor.parse(b'{"cpu": 1.5, "disk": 3.25, "mem": 2.0, "host": "ignored"}')
    assert row == (2.0, 1.5, 3.25)


def test_feature_names_need_not_be_identifiers(features_info):
    processor = FeaturesProcessor(features_info(["cpu.load", "mem-used %"]))
    assert processor.parse(encode({"mem-used %": 4.5, "cpu.load": 0.25})) == (0.25, 4.5)


def test_integers_are_accepted_as_numbers(features_info):
    processor = FeaturesProcessor(features_info(["a", "b"]))
    assert processor.parse(b'{"a": 3, "b": -7}') == (3.0, -7.0)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b'{"a": true, "b": 1}', Reason.INVALID_EVENT),
        (b'{"a": "1.5", "b": 1}', Reason.INVALID_EVENT),
        (b'{"a": null, "b": 1}', Reason.INVALID_EVENT),
        (b'{"a": [1], "b": 1}', Reason.INVALID_EVENT),
        (b'{"a": 1}', Reason.INVALID_EVENT),
        (b'{"a": 1e999, "b": 1}', Reason.INVALID_EVENT),
        (b'{"a": -1e999, "b": 1}', Reason.INVALID_EVENT),
        (b'{"a": NaN, "b": 1}', Reason.INVALID_JSON),
        (b'{"a": Infinity, "b": 1}', Reason.INVALID_JSON),
        (b"[1, 2]", Reason.INVALID_EVENT),
        (b'{"a": 1, "b": ', Reason.INVALID_JSON),
    ],
)
def test_non_numbers_and_non_finite_numbers_are_rejected(features_info, value, reason):
    processor = FeaturesProcessor(features_info(["a", "b"]))
    with pytest.raises(InvalidMessage) as info:
        processor.parse(value)
    assert info.value.reason is reason


def test_preprocess_makes_one_float32_row_per_event(features_info):
    processor = FeaturesProcessor(features_info(["a", "b", "c"]))
    items = [processor.parse(encode({"a": i, "b": i + 0.5, "c": -i})) for i in range(5)]
    tensors = processor.preprocess(items)
    assert list(tensors) == ["features"]
    array = tensors["features"]
    assert array.dtype == np.float32
    assert array.shape == (5, 3)
    np.testing.assert_array_equal(array[2], [2.0, 2.5, -2.0])


def test_preprocess_feeds_the_models_input_name(features_info):
    processor = FeaturesProcessor(features_info(["a"], input_names=("X",)))
    assert list(processor.preprocess([(1.0,)])) == ["X"]


def test_sample_is_a_valid_item(features_info):
    processor = FeaturesProcessor(features_info(["a", "b"]))
    assert processor.preprocess([processor.sample()])["features"].shape == (1, 2)


def test_postprocess_maps_rows_and_rejects_only_non_finite_rows(features_info):
    processor = FeaturesProcessor(features_info(["a"]))
    scores = np.array([0.5, np.nan, 2.0, np.inf], dtype=np.float32)
    flags = np.array([0, 1, 0, 1], dtype=np.int64)
    results = processor.postprocess({"score": scores, "is_anomaly": flags}, [(0.0,)] * 4)
    assert len(results) == 4
    assert results[0] == {"score": 0.5, "is_anomaly": 0}
    assert results[2] == {"score": 2.0, "is_anomaly": 0}
    for bad in (results[1], results[3]):
        assert isinstance(bad, InvalidMessage)
        assert bad.reason is Reason.INVALID_OUTPUT


def test_postprocess_checks_every_value_of_a_multi_column_row(features_info):
    processor = FeaturesProcessor(features_info(["a"]))
    probs = np.array([[0.1, 0.9], [0.2, np.nan]], dtype=np.float32)
    results = processor.postprocess({"probs": probs}, [(0.0,)] * 2)
    assert results[0] == {"probs": pytest.approx([0.1, 0.9])}
    assert isinstance(results[1], InvalidMessage)


@pytest.mark.parametrize("rows", [2, 4])
def test_postprocess_refuses_an_output_with_the_wrong_row_count(features_info, rows):
    processor = FeaturesProcessor(features_info(["a"]))
    with pytest.raises(BatchMismatchError):
        processor.postprocess({"score": np.zeros(rows, dtype=np.float32)}, [(0.0,)] * 3)


def test_features_come_from_metadata_when_not_set(features_info):
    processor = FeaturesProcessor(features_info(metadata={"microbatch.features": '["x", "y"]'}))
    assert processor.features == ("x", "y")


def test_explicit_features_win_over_metadata(features_info):
    processor = FeaturesProcessor(features_info(["a"], metadata={"microbatch.features": '["x", "y"]'}))
    assert processor.features == ("a",)


@pytest.mark.parametrize("bad", [[], [1, 2], "not-a-list"])
def test_features_must_be_a_non_empty_list_of_names(features_info, bad):
    with pytest.raises(ConfigError) as info:
        FeaturesProcessor(features_info(bad))
    assert info.value.setting == "MICROBATCH_MODEL__FEATURES"


def test_features_processor_needs_a_model_with_one_input(features_info):
    with pytest.raises(ConfigError) as info:
        FeaturesProcessor(features_info(["a"], input_names=("x", "y")))
    assert info.value.setting == "MICROBATCH_MODEL__PROCESSOR"


def test_setting_decodes_json_metadata_and_passes_plain_strings():
    info = ModelInfo(
        "m",
        Path("."),
        ("x",),
        ("y",),
        metadata={"microbatch.labels": '["a", "b"]', "microbatch.text_field": "message"},
    )
    assert setting(info, "labels", "ENV") == ["a", "b"]
    assert setting(info, "text_field", "ENV") == "message"
    assert setting(info, "absent", "ENV", required=False) is None
    with pytest.raises(ConfigError) as err:
        setting(info, "absent", "MICROBATCH_MODEL__ABSENT")
    assert err.value.setting == "MICROBATCH_MODEL__ABSENT"


# -- text -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory) -> Path:
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(CORPUS, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]"]))
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def vocab(tokenizer_path) -> dict[str, int]:
    return Tokenizer.from_file(str(tokenizer_path)).get_vocab()


def text_info(
    tokenizer_path: Path, *, inputs=("input_ids", "attention_mask"), metadata=None, defaults=None, **settings
):
    """As the service builds it for the ``text`` format (the line is the field ``message``), unless
    ``defaults`` says otherwise."""
    return ModelInfo(
        name="text",
        model_dir=tokenizer_path.parent,
        input_names=tuple(inputs),
        output_names=("class_index",),
        metadata=metadata or {},
        settings={"tokenizer": tokenizer_path} | settings,
        defaults={"text_field": TextFormat.text_field} if defaults is None else defaults,
    )


def plain(processor: TextProcessor, value: bytes) -> str:
    """What the service does with a value of the ``text`` format."""
    [fields] = TextFormat().split(value)
    assert not isinstance(fields, InvalidMessage)
    return processor.parse_fields(fields)


def test_the_test_tokenizer_has_pad_zero_and_unk(vocab):
    assert vocab["[PAD]"] == PAD_ID
    assert "[UNK]" in vocab


def test_batch_is_padded_to_its_longest_item_not_to_max_length(tokenizer_path, vocab):
    processor = TextProcessor(text_info(tokenizer_path, max_length=64))
    lines = ["disk full", "user login ok from host", "kernel panic"]
    tensors = processor.preprocess(processor.prepare(lines))
    longest = max(len(line.split()) for line in lines)
    assert tensors["input_ids"].shape == (3, longest)
    assert tensors["input_ids"].dtype == np.int64
    assert tensors["input_ids"][1].tolist() == [vocab[w] for w in lines[1].split()]
    assert tensors["input_ids"][0].tolist() == [vocab["disk"], vocab["full"]] + [PAD_ID] * (longest - 2)


def test_attention_mask_is_zero_exactly_on_padding(tokenizer_path):
    processor = TextProcessor(text_info(tokenizer_path))
    lines = ["disk", "disk full on host web", "user login ok"]
    tensors = processor.preprocess(processor.prepare(lines))
    mask = tensors["attention_mask"]
    assert mask.shape == tensors["input_ids"].shape
    assert mask.dtype == np.int64
    for row, line in zip(mask.tolist(), lines, strict=True):
        words = len(line.split())
        assert row == [1] * words + [0] * (mask.shape[1] - words)


def test_long_lines_are_truncated_at_max_length(tokenizer_path, vocab):
    processor = TextProcessor(text_info(tokenizer_path, max_length=4))
    line = "error disk failure on volume data from host web"
    tensors = processor.preprocess(processor.prepare([line, "disk"]))
    assert tensors["input_ids"].shape == (2, 4)
    assert tensors["input_ids"][0].tolist() == [vocab[w] for w in line.split()[:4]]
    assert tensors["attention_mask"][0].tolist() == [1, 1, 1, 1]


def test_max_length_comes_from_metadata(tokenizer_path):
    processor = TextProcessor(text_info(tokenizer_path, metadata={"microbatch.max_length": "3"}))
    assert processor.preprocess(processor.prepare(["disk full on host web one"]))["input_ids"].shape == (1, 3)


def test_unknown_words_become_unk(tokenizer_path, vocab):
    processor = TextProcessor(text_info(tokenizer_path))
    assert processor.preprocess(processor.prepare(["disk zebra"]))["input_ids"][0].tolist() == [
        vocab["disk"],
        vocab["[UNK]"],
    ]


def test_no_attention_mask_unless_the_model_takes_one(tokenizer_path):
    processor = TextProcessor(text_info(tokenizer_path, inputs=("input_ids",)))
    assert set(processor.preprocess(processor.prepare(["disk full"]))) == {"input_ids"}


def test_token_type_ids_are_zeros_when_the_model_takes_them(tokenizer_path):
    processor = TextProcessor(
        text_info(tokenizer_path, inputs=("input_ids", "attention_mask", "token_type_ids"))
    )
    tensors = processor.preprocess(processor.prepare(["disk full", "kernel panic not syncing"]))
    assert tensors["token_type_ids"].shape == tensors["input_ids"].shape
    assert not tensors["token_type_ids"].any()


def test_plain_line_mode_takes_the_whole_value_stripped(tokenizer_path):
    processor = TextProcessor(text_info(tokenizer_path))
    assert plain(processor, "  disk full on café\n".encode()) == "disk full on café"


def test_plain_line_mode_rejects_invalid_utf8():
    with pytest.raises(InvalidMessage) as info:
        TextFormat().split(b"disk \xff\xfe full")
    assert info.value.reason is Reason.INVALID_UTF8


@pytest.mark.parametrize("value", [b"   ", b"\n\t"])
def test_plain_line_mode_rejects_empty_text(tokenizer_path, value):
    processor = TextProcessor(text_info(tokenizer_path))
    with pytest.raises(InvalidMessage) as info:
        plain(processor, value)
    assert info.value.reason is Reason.INVALID_EVENT


def test_json_mode_reads_the_text_field(tokenizer_path):
    processor = TextProcessor(text_info(tokenizer_path, text_field="message"))
    assert processor.parse(encode({"level": "error", "message": " disk full "})) == "disk full"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (encode({"message": ""}), Reason.INVALID_EVENT),
        (encode({"message": "  "}), Reason.INVALID_EVENT),
        (encode({"message": 42}), Reason.INVALID_EVENT),
        (encode({"msg": "disk full"}), Reason.INVALID_EVENT),
        (b"disk full", Reason.INVALID_JSON),
        (b'{"message": "caf\xc3\x28"}', Reason.INVALID_UTF8),
    ],
)
def test_json_mode_rejections(tokenizer_path, value, reason):
    processor = TextProcessor(text_info(tokenizer_path, text_field="message"))
    with pytest.raises(InvalidMessage) as info:
        processor.parse(value)
    assert info.value.reason is reason


def test_text_field_comes_from_metadata(tokenizer_path):
    info = text_info(tokenizer_path, metadata={"microbatch.text_field": "line"}, defaults={})
    assert TextProcessor(info).parse(encode({"line": "kernel panic"})) == "kernel panic"


def test_labels_map_class_index_to_label(tokenizer_path):
    processor = TextProcessor(text_info(tokenizer_path, labels=["ok", "error", "security"]))
    outputs = {
        "class_index": np.array([2, 0, 7, -1], dtype=np.int64),
        "probability": np.array([0.9, 0.8, 0.7, 0.6], dtype=np.float32),
    }
    results = processor.postprocess(outputs, [[1]] * 4)
    assert [r["label"] for r in results] == ["security", "ok", None, None]
    assert [r["class_index"] for r in results] == [2, 0, 7, -1]
    assert results[0]["probability"] == pytest.approx(0.9)


def test_labels_come_from_metadata_json(tokenizer_path):
    processor = TextProcessor(text_info(tokenizer_path, metadata={"microbatch.labels": '["ok", "error"]'}))
    (result,) = processor.postprocess({"class_index": np.array([1])}, [[1]])
    assert result["label"] == "error"


def test_without_labels_no_label_is_added(tokenizer_path):
    processor = TextProcessor(text_info(tokenizer_path))
    (result,) = processor.postprocess({"class_index": np.array([1])}, [[1]])
    assert result == {"class_index": 1}


def test_a_non_finite_text_output_is_invalid_output_and_gets_no_label(tokenizer_path):
    processor = TextProcessor(text_info(tokenizer_path, labels=["ok", "error"]))
    outputs = {"class_index": np.array([1, 0]), "logit": np.array([0.5, np.nan], dtype=np.float32)}
    ok, bad = processor.postprocess(outputs, [[1], [2]])
    assert ok["label"] == "error"
    assert isinstance(bad, InvalidMessage)
    assert bad.reason is Reason.INVALID_OUTPUT


def test_tokenizer_file_name_from_metadata_is_relative_to_the_model(tokenizer_path):
    info = ModelInfo(
        "text",
        tokenizer_path.parent,
        ("input_ids",),
        ("class_index",),
        metadata={"microbatch.tokenizer": tokenizer_path.name, "microbatch.text_field": "message"},
    )
    assert TextProcessor(info).parse(b'{"message": "disk"}') == "disk"


def test_missing_tokenizer_names_the_setting(tmp_path):
    metadata = {"microbatch.tokenizer": "absent.json", "microbatch.text_field": "message"}
    info = ModelInfo("text", tmp_path, ("input_ids",), ("class_index",), metadata=metadata)
    with pytest.raises(ConfigError) as err:
        TextProcessor(info)
    assert err.value.setting == "MICROBATCH_MODEL__TOKENIZER"


def test_no_tokenizer_at_all_names_the_setting(tmp_path):
    with pytest.raises(ConfigError) as err:
        TextProcessor(
            ModelInfo("text", tmp_path, ("input_ids",), ("class_index",), defaults={"text_field": "m"})
        )
    assert err.value.setting == "MICROBATCH_MODEL__TOKENIZER"


def test_text_processor_needs_an_input_ids_input(tokenizer_path):
    with pytest.raises(ConfigError) as err:
        TextProcessor(text_info(tokenizer_path, inputs=("tokens",)))
    assert err.value.setting == "MICROBATCH_MODEL__PROCESSOR"


def test_text_sample_is_a_valid_item(tokenizer_path):
    processor = TextProcessor(text_info(tokenizer_path))
    assert processor.preprocess(processor.prepare([processor.sample()]))["input_ids"].shape[0] == 1


# -- load_processor -------------------------------------------------------------------------------------


class EchoProcessor:
    """A processor of the user's own, loaded by ``module:Class``."""

    def __init__(self, info: ModelInfo) -> None:
        self.info = info

    def parse(self, value: bytes) -> bytes:
        return value

    def preprocess(self, items):
        return {"x": np.array([len(i) for i in items])}

    def postprocess(self, outputs, items):
        return [{"n": int(v)} for v in outputs["x"][: len(items)]]

    def sample(self) -> bytes:
        return b"x"


class NotAProcessor:
    def __init__(self, info: ModelInfo) -> None:
        self.info = info


def spec_of(cls: type) -> str:
    # The module's import name depends on pytest's import mode; ask the class rather than guess.
    return f"{cls.__module__}:{cls.__qualname__}"


def test_load_features_by_name(features_info):
    processor = load_processor("features", features_info(["a"]))
    assert isinstance(processor, FeaturesProcessor)
    assert isinstance(processor, Processor)


def test_load_text_by_name(tokenizer_path):
    assert isinstance(load_processor("text", text_info(tokenizer_path)), TextProcessor)


def test_processor_from_metadata_when_not_set(features_info):
    info = features_info(["a"], metadata={"microbatch.processor": "features"})
    assert isinstance(load_processor(None, info), FeaturesProcessor)


def test_explicit_processor_wins_over_metadata(tokenizer_path):
    info = text_info(tokenizer_path, metadata={"microbatch.processor": "features"})
    assert isinstance(load_processor("text", info), TextProcessor)


def test_load_a_users_own_class(features_info):
    info = features_info(["a"])
    processor = load_processor(spec_of(EchoProcessor), info)
    assert isinstance(processor, EchoProcessor)
    assert processor.info is info
    assert processor.postprocess(processor.preprocess([b"abc"]), [b"abc"]) == [{"n": 3}]


def test_load_a_class_by_a_literal_module_path(features_info):
    spec = "service.processors.features:FeaturesProcessor"
    assert isinstance(load_processor(spec, features_info(["a"])), FeaturesProcessor)


@pytest.mark.parametrize(
    "spec",
    ["nonsense", "Features", "no_such_module_xyz:Thing", "service.processors.features:NoSuchClass"],
)
def test_unknown_spec_names_the_processor_setting(features_info, spec):
    with pytest.raises(ConfigError) as err:
        load_processor(spec, features_info(["a"]))
    assert err.value.setting == "MICROBATCH_MODEL__PROCESSOR"


def test_a_class_without_the_processor_methods_is_refused(features_info):
    with pytest.raises(ConfigError) as err:
        load_processor(spec_of(NotAProcessor), features_info(["a"]))
    assert err.value.setting == "MICROBATCH_MODEL__PROCESSOR"


def test_no_processor_anywhere_names_the_processor_setting(features_info):
    with pytest.raises(ConfigError) as err:
        load_processor(None, features_info(["a"]))
    assert err.value.setting == "MICROBATCH_MODEL__PROCESSOR"


def test_features_without_a_feature_list_names_the_features_setting(features_info):
    info = features_info(metadata={"microbatch.processor": "features"})
    with pytest.raises(ConfigError) as err:
        load_processor(None, info)
    assert err.value.setting == "MICROBATCH_MODEL__FEATURES"


# -- field paths and the input format's defaults ------------------------------------------------------


def test_features_read_dotted_paths_into_nested_objects(features_info):
    processor = FeaturesProcessor(features_info(["system.cpu.load", "mem"]))
    assert processor.parse(encode({"system": {"cpu": {"load": 0.5}}, "mem": 3})) == (0.5, 3.0)
    assert processor.parse_fields({"system.cpu.load": 1, "mem": 2.5}) == (1.0, 2.5)


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ({"a": 1}, "field 'b' is missing"),
        ({"a": 1, "b": "high"}, "field 'b' is not a number"),
        ({"a": 1, "b": True}, "field 'b' is not a number"),
        ({"a": 1, "b": float("nan")}, "a feature is not a finite number"),
    ],
)
def test_features_from_fields_reject_what_is_not_a_finite_number(features_info, fields, detail):
    with pytest.raises(InvalidMessage) as info:
        FeaturesProcessor(features_info(["a", "b"])).parse_fields(fields)
    assert info.value.reason is Reason.INVALID_EVENT
    assert info.value.detail == detail


def test_a_bad_feature_path_names_the_setting(features_info):
    with pytest.raises(ConfigError) as err:
        FeaturesProcessor(features_info(["a", "b..c"]))
    assert err.value.setting == "MICROBATCH_MODEL__FEATURES"
    assert "entry 2" in str(err.value)


def test_the_text_at_a_dotted_path(tokenizer_path):
    processor = TextProcessor(text_info(tokenizer_path, text_field="log.original"))
    assert processor.parse(encode({"log": {"original": "disk full"}})) == "disk full"
    assert processor.parse_fields({"log": {"original": " kernel panic "}}) == "kernel panic"
    with pytest.raises(InvalidMessage, match="not a string"):
        processor.parse_fields({"log": {"original": {"nested": "map"}}})


def test_the_formats_text_field_wins_over_the_models_metadata(tokenizer_path):
    # log-classifier's metadata says "message"; an OTLP input says "body".
    info = text_info(
        tokenizer_path, metadata={"microbatch.text_field": "message"}, defaults={"text_field": "body"}
    )
    assert TextProcessor(info).parse_fields({"body": "disk full", "message": "other"}) == "disk full"


def test_an_explicit_text_field_wins_over_the_format(tokenizer_path):
    info = text_info(tokenizer_path, text_field="attributes.line", defaults={"text_field": "body"})
    assert TextProcessor(info).parse_fields({"body": "no", "attributes": {"line": "yes"}}) == "yes"


def test_json_with_no_text_field_anywhere_stops_start_up_naming_it(tokenizer_path):
    with pytest.raises(ConfigError) as err:
        TextProcessor(text_info(tokenizer_path, defaults={}))
    assert err.value.setting == "MICROBATCH_MODEL__TEXT_FIELD"
    assert "MICROBATCH_INPUT__FORMAT=text" in str(err.value)


# -- text models as Hugging Face exports declare them ---------------------------------------------------


def hf_info(tokenizer_path: Path, ports: dict[str, tuple[str, tuple]], config=None, **settings):
    """A Hugging Face-style export: the tokenizer is ``tokenizer.json`` beside the model (no setting, no
    metadata), the inputs are declared with their types and shapes, ``config`` is its config.json."""
    return ModelInfo(
        name="hf",
        model_dir=tokenizer_path.parent,
        input_names=tuple(ports),
        output_names=("logits",),
        settings=settings,
        defaults={"text_field": TextFormat.text_field},
        inputs=tuple(Port(name, kind, shape) for name, (kind, shape) in ports.items()),
        outputs=(Port("logits", "tensor(float)", ("batch", 3)),),
        config=config or {},
    )


DYNAMIC = ("batch", "sequence")


def test_the_declared_inputs_are_fed_in_their_declared_integer_types(tokenizer_path):
    ports = {
        "input_ids": ("tensor(int32)", DYNAMIC),
        "attention_mask": ("tensor(int32)", DYNAMIC),
        "token_type_ids": ("tensor(int64)", DYNAMIC),
    }
    processor = TextProcessor(hf_info(tokenizer_path, ports))
    tensors = processor.preprocess(processor.prepare(["disk full", "kernel panic on host"]))
    assert {k: v.dtype for k, v in tensors.items()} == {
        "input_ids": np.int32,
        "attention_mask": np.int32,
        "token_type_ids": np.int64,
    }
    assert tensors["attention_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert not tensors["token_type_ids"].any()


def test_a_fixed_sequence_length_pads_and_truncates_every_line_to_it(tokenizer_path):
    processor = TextProcessor(hf_info(tokenizer_path, {"input_ids": ("tensor(int64)", ("batch", 3))}))
    ids = processor.prepare(["disk full", "user login ok from host"])
    assert [len(i) for i in ids] == [2, 3]  # truncated at the model's length
    assert processor.preprocess(ids)["input_ids"].shape == (2, 3)
    assert processor.cost(ids[0]) == 3  # what it takes once padded


def test_max_position_embeddings_caps_the_length_and_padding_can_be_fixed_by_setting(tokenizer_path):
    ports = {"input_ids": ("tensor(int64)", DYNAMIC)}
    processor = TextProcessor(
        hf_info(tokenizer_path, ports, config={"max_position_embeddings": 2}, padding="max_length")
    )
    assert processor.preprocess(processor.prepare(["disk"]))["input_ids"].shape == (1, 2)


def test_a_tokenizers_own_truncation_and_pad_token_are_kept(tmp_path, tokenizer_path, vocab):
    tok = Tokenizer.from_file(str(tokenizer_path))
    tok.enable_truncation(2)
    tok.enable_padding(pad_id=vocab["[UNK]"], pad_token="[UNK]")
    tok.save(str(tmp_path / "tokenizer.json"))
    processor = TextProcessor(hf_info(tmp_path / "tokenizer.json", {"input_ids": ("tensor(int64)", DYNAMIC)}))
    ids = processor.preprocess(processor.prepare(["disk", "user login ok"]))["input_ids"]
    assert ids.tolist() == [[vocab["disk"], vocab["[UNK]"]], [vocab["user"], vocab["login"]]]


def test_no_tokenizer_anywhere_names_the_setting(tmp_path):
    info = hf_info(tmp_path / "absent.json", {"input_ids": ("tensor(int64)", DYNAMIC)})
    with pytest.raises(ConfigError) as err:
        TextProcessor(info)
    assert err.value.setting == "MICROBATCH_MODEL__TOKENIZER"
    assert "no tokenizer.json beside it" in str(err.value)


def test_the_processor_follows_the_models_inputs_when_nothing_names_it(tokenizer_path):
    text = hf_info(tokenizer_path, {"input_ids": ("tensor(int64)", DYNAMIC)})
    assert isinstance(load_processor(None, text), TextProcessor)
    features = ModelInfo(
        "f", Path("."), ("X",), ("y",), settings={"features": ["a"]}, inputs=(Port("X", "tensor(float)"),)
    )
    assert isinstance(load_processor(None, features), FeaturesProcessor)
    images = ModelInfo("i", Path("."), ("pixels", "mask"), ("y",), inputs=(Port("pixels", "tensor(uint8)"),))
    with pytest.raises(ConfigError, match="fit neither 'text'"):
        load_processor(None, images)


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_bpe_and_unigram_tokenizers_serve_with_their_own_pad_token(tmp_path, kind):
    """RoBERTa- and T5-style vocabularies: ``<pad>`` is not id 0, and the processor pads with it."""
    special = ["<s>", "</s>", "<unk>", "<pad>"]
    if kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        trainer = trainers.BpeTrainer(special_tokens=special, vocab_size=200)
    else:
        tok = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(special_tokens=special, unk_token="<unk>", vocab_size=100)
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(CORPUS, trainer)
    tok.save(str(tmp_path / "tokenizer.json"))
    pad = tok.token_to_id("<pad>")
    assert pad != 0
    ports = {"input_ids": ("tensor(int64)", DYNAMIC), "attention_mask": ("tensor(int64)", DYNAMIC)}
    processor = TextProcessor(hf_info(tmp_path / "tokenizer.json", ports))
    lines = ["disk full", "user login ok from host"]
    tensors = processor.preprocess(processor.prepare(lines))
    short = len(tok.encode(lines[0]).ids)
    assert tensors["input_ids"][0, short:].tolist() == [pad] * (tensors["input_ids"].shape[1] - short)
    assert tensors["attention_mask"][0].sum() == short


def test_the_fixed_length_caps_a_longer_truncation_and_a_tokenizers_fixed_padding_counts(
    tmp_path, tokenizer_path
):
    tok = Tokenizer.from_file(str(tokenizer_path))
    tok.enable_truncation(32)
    tok.save(str(tmp_path / "tokenizer.json"))
    fixed = {"input_ids": ("tensor(int64)", ("batch", 3))}
    processor = TextProcessor(hf_info(tmp_path / "tokenizer.json", fixed))
    ids = processor.prepare(["user login ok from host on port"])
    assert processor.preprocess(ids)["input_ids"].shape == (1, 3)  # truncated at 3, not 32
    with pytest.raises(ConfigError) as err:
        TextProcessor(hf_info(tmp_path / "tokenizer.json", fixed, padding="longest"))
    assert err.value.setting == "MICROBATCH_MODEL__PADDING"
    tok.enable_padding(length=5)
    tok.save(str(tmp_path / "tokenizer.json"))
    dynamic = TextProcessor(hf_info(tmp_path / "tokenizer.json", {"input_ids": ("tensor(int64)", DYNAMIC)}))
    assert dynamic.preprocess(dynamic.prepare(["disk full"]))["input_ids"].shape == (1, 5)
