"""service/formats/plain.py: the json and text formats, and telling bad text from bad JSON from bad shape."""

from __future__ import annotations

import msgspec
import pytest

from service.errors import InvalidMessage, Reason
from service.formats import FORMATS, load_format
from service.formats.plain import JsonFormat, TextFormat, parse_json

TYPED: msgspec.json.Decoder[dict[str, float]] = msgspec.json.Decoder(dict[str, float])


@pytest.mark.parametrize(
    "value",
    [
        b"2026-12-01T10:00:00.000000+00:00 web-1 app[1]: a syslog line starts with a number",
        b"123 apples",
        b'{"cpu": 0.5',  # cut by a kcat -K: slip
        b"true or false",
        b"",
    ],
)
def test_what_does_not_parse_as_json_is_invalid_json_whatever_it_starts_with(value):
    for decoder in (TYPED, None):
        with pytest.raises(InvalidMessage) as info:
            parse_json(value, decoder) if decoder else parse_json(value)
        assert info.value.reason is Reason.INVALID_JSON, value
        assert info.value.detail.startswith("not JSON: ")


@pytest.mark.parametrize("value", [b"42", b'{"cpu": "high"}', b"[1, 2]"])
def test_json_of_the_wrong_shape_is_invalid_event(value):
    with pytest.raises(InvalidMessage) as info:
        parse_json(value, TYPED)
    assert info.value.reason is Reason.INVALID_EVENT


def test_bad_utf8_inside_json_is_invalid_utf8():
    with pytest.raises(InvalidMessage) as info:
        parse_json(b'{"cpu": "caf\xc3\x28"}', TYPED)
    assert info.value.reason is Reason.INVALID_UTF8


def test_the_json_format_wants_an_object():
    assert JsonFormat().split(b'{"a": {"b": 1}}') == [{"a": {"b": 1}}]
    with pytest.raises(InvalidMessage) as info:
        JsonFormat().split(b"[1]")
    assert info.value.reason is Reason.INVALID_EVENT


def test_the_text_format_is_the_whole_line_without_its_newline():
    assert TextFormat().split(b"disk full on /var\r\n") == [{"message": "disk full on /var"}]
    assert TextFormat().split(b'{"looks": "like json"}') == [{"message": '{"looks": "like json"}'}]


def test_every_format_name_loads_and_says_its_name():
    for name in FORMATS:
        assert load_format(name).name == name
    with pytest.raises(ValueError, match="unknown"):
        load_format("xml")
