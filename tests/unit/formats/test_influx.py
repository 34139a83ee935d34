"""service/formats/influx.py: InfluxDB line protocol as Telegraf's serializer writes it
(tests/fixtures/agents/telegraf, see SOURCES.md there): escaping, types, several lines per message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.errors import InvalidMessage, Reason
from service.formats import load_format
from service.formats.influx import InfluxFormat, parse_lines

TELEGRAF = Path(__file__).resolve().parents[2] / "fixtures" / "agents" / "telegraf"

_TYPES = {"float": float, "integer": int, "uinteger": int, "boolean": bool, "string": str}


def split(value: bytes | str) -> list:
    return InfluxFormat().split(value.encode() if isinstance(value, str) else value)


def test_every_escaping_rule_decodes_as_expected():
    lines = (TELEGRAF / "influx-escaping.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    expected = (TELEGRAF / "influx-escaping.expected.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(expected) == 8
    for line, want in zip(lines, map(json.loads, expected), strict=True):
        [(name, tags, fields, stamp)] = parse_lines(line)  # each line is one message
        assert name == want["name"]
        assert tags == want["tags"]
        assert stamp == want["time_ns"]
        assert fields.keys() == want["fields"].keys()
        for key, typed in want["fields"].items():
            assert fields[key] == typed["value"]
            assert type(fields[key]) is _TYPES[typed["type"]], key


def test_the_escaped_names_become_point_names_and_attributes():
    value = (TELEGRAF / "influx-escaping.txt").read_bytes()
    points = split(value)  # all eight lines in one message
    assert all(not isinstance(p, InvalidMessage) for p in points)
    by_metric = {p["metric"]: p for p in points}
    assert by_metric["my measurement,v2=beta.value"]["time"] == 1556813561.098
    assert by_metric["http_requests.count"]["attributes"] == {
        "mood": "\U0001f36d",
        "query": "a=b&c=d",
        "route key": "/api/orders,items",
    }
    assert by_metric["syslog.n"]["attributes"] == {"facility": "local0\tkern", "msgid": "a\r\nb"}
    assert by_metric["win_disk.free"]["host"] == "WIN-01"
    # The string and the boolean fields are not measurements; the numbers are all floats.
    assert "app_event.message text" not in by_metric and "app_event.a,b=c" not in by_metric
    assert by_metric["app_event.neg"]["value"] == -12.0
    assert by_metric["app_event.big"]["value"] == 1.5e21
    assert by_metric["gauges.ok"]["value"] == 0.0
    assert [p["value"] for p in points if p["metric"] == "counters.max"] == [2.0**64 - 1, 2.0**63 - 1]
    assert {type(p["value"]) for p in points} == {float}


def test_a_raw_newline_inside_a_string_field_does_not_end_the_line():
    value = (TELEGRAF / "influx-string-newline.txt").read_bytes()
    assert value.count(b"\n") == 2
    [(name, tags, fields, _)] = parse_lines(value.decode())
    assert (name, tags, fields) == ("app_log", {"host": "web-01"}, {"message": "line one\nline two"})
    assert split(value) == []  # a string: no point, and no bad line either


def test_many_lines_in_one_message_give_the_points_of_each():
    lines = (TELEGRAF / "influx.txt").read_bytes().splitlines(keepends=True)
    one_by_one = [p for line in lines for p in split(line)]
    assert split(b"".join(lines)) == one_by_one
    assert len(one_by_one) == 210


def test_a_bad_line_is_an_entry_and_the_other_lines_still_count():
    value = (
        "# a comment\n"
        "\n"
        "cpu,cpu=cpu0,host=a usage_user=1 1718000000000000000\n"
        "cpu,host=a 1718000000000000000\n"  # no fields
        "cpu,host=a usage_user=abc 1718000000000000000\n"  # a value that is no number
        'cpu,host=a msg="unterminated 1718000000000000000\n'
        "cpu,host=a usage_user=1\n"  # no timestamp
        "cpu,host=a usage_user=1 1718000000000000000 extra\n"
        "cpu,host=a usage_user=-1u 1718000000000000000\n"  # an unsigned integer is not negative
        "cpu,host=a usage_user=1.5.5 1718000000000000000\n"
        "cpu,host=a usage_user=yes 1718000000000000000\n"
        "cpu,host=a,novalue usage_user=1 1718000000000000000\n"
        "   \n"
        "mem,host=a used_percent=50 1718000000000000000\r\n"
    )
    entries = split(value)
    assert [e["metric"] for e in entries if not isinstance(e, InvalidMessage)] == [
        "system.cpu.utilization",
        "system.memory.utilization",
    ]
    bad = [e for e in entries if isinstance(e, InvalidMessage)]
    assert len(bad) == 9
    assert {e.reason for e in bad} == {Reason.INVALID_EVENT}
    assert "line 4 " in bad[0].detail  # lines are counted as written, comments and blanks included
    assert "has no timestamp" in bad[3].detail


def test_a_string_spanning_lines_counts_as_its_lines():
    value = 'log,host=a msg="one\ntwo",n=1i 1\nlog,host=a n=? 1\n'
    good, bad = split(value)
    assert good["metric"] == "log.n"
    assert isinstance(bad, InvalidMessage)
    assert "line 3 " in bad.detail


@pytest.mark.parametrize(
    ("stamp", "seconds"),
    [
        ("1718000010123456789", 1718000010.123456789),
        ("1718000010123456", 1718000010.123456),
        ("1718000010123", 1718000010.123),
        ("1718000010", 1718000010.0),
    ],
)
def test_the_timestamps_unit_is_told_by_its_magnitude(stamp, seconds):
    [only] = split(f"m,host=a v=1 {stamp}\n")
    assert only["time"] == pytest.approx(seconds, abs=1e-6)


@pytest.mark.parametrize("text", ["t", "T", "true", "True", "TRUE", "f", "F", "false", "False", "FALSE"])
def test_booleans_in_every_spelling_are_read_and_left_out(text):
    [(_, _, fields, _)] = parse_lines(f"m ok={text},n=2i 0")
    assert fields["ok"] is text.lower().startswith("t")
    assert [p["metric"] for p in split(f"m ok={text},n=2i 0")] == ["m.n"]


def test_backslashes_that_escape_nothing_stay():
    [(name, tags, fields, _)] = parse_lines(r'a\b,path=C:\Temp,x\\y=1 k\q=1,s="q\w" 5')
    assert name == "a\\b"
    assert tags == {"path": "C:\\Temp", "x\\\\y": "1"}
    assert fields == {"k\\q": 1.0, "s": "q\\w"}


def test_an_equals_sign_needs_no_escape_in_a_measurement():
    [(name, _, _, _)] = parse_lines("a=b,t=1 v=1 5")
    assert name == "a=b"


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("m v=9223372036854775808i 1", "no number"),  # above int64
        ("m v=-9223372036854775809i 1", "no number"),
        ("m v=18446744073709551616u 1", "no number"),  # above uint64
        ("m v=" + "9" * 5000 + "i 1", "no number"),
        ("m v=1 " + "9" * 40, "not line protocol"),
        ("m v=1 9223372036854775808", "out of range"),
    ],
)
def test_numbers_out_of_their_range_make_a_bad_line(line, why):
    [bad] = split(line)
    assert isinstance(bad, InvalidMessage)
    assert why in bad.detail


def test_the_64_bit_limits_themselves_are_read():
    [(_, _, fields, stamp)] = parse_lines(
        "m a=-9223372036854775808i,b=18446744073709551615u -9223372036854775808"
    )
    assert fields == {"a": -(2**63), "b": 2**64 - 1}
    assert stamp == -(2**63)


def test_a_float_too_large_is_no_value():
    [only] = split("m v=1" + "0" * 400 + " 1")
    assert only["value"] is None


def test_a_metric_without_host_has_no_host():
    [only] = split("swap used_percent=1.5 1718000000000000000")
    assert "host" not in only
    assert only == {
        "metric": "swap.used_percent",
        "attributes": {},
        "time": 1718000000.0,
        "value": 1.5,
        "kind": "gauge",
    }


def test_invalid_utf8_rejects_the_message():
    with pytest.raises(InvalidMessage) as info:
        split(b"cpu,host=\xff v=1 1\n")
    assert info.value.reason is Reason.INVALID_UTF8


def test_only_comments_and_blank_lines_hold_no_points():
    assert split(b"# nothing\n\n  \n") == []


def test_the_format_is_registered_as_a_metrics_format():
    for metrics in (False, True):
        assert isinstance(load_format("influx", metrics=metrics), InfluxFormat)
    assert InfluxFormat.metrics and InfluxFormat.fans_out
    assert InfluxFormat.text_field is None
