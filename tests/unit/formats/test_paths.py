"""service/formats/paths.py: parsing dotted paths with escapes, and the longest-key-first lookup."""

from __future__ import annotations

import pytest

from service.formats.paths import MISSING, PathError, Picker, is_flat, lookup, parse_path


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("message", ("message",)),
        ("kubernetes.labels.app", ("kubernetes", "labels", "app")),
        (r"labels.app\.kubernetes\.io/name", ("labels", "app.kubernetes.io/name")),
        (r"a\\b", ("a\\b",)),
        ("mem-used %", ("mem-used %",)),
    ],
)
def test_parse_path_splits_on_unescaped_dots(text, path):
    assert parse_path(text) == path


@pytest.mark.parametrize("text", ["", ".a", "a.", "a..b", "a\\"])
def test_bad_paths_are_refused(text):
    with pytest.raises(PathError):
        parse_path(text)


def test_only_one_key_is_flat():
    assert is_flat(parse_path(r"a\.b"))
    assert not is_flat(parse_path("a.b"))


def test_lookup_walks_nested_objects():
    event = {"kubernetes": {"labels": {"app": "checkout"}}}
    assert lookup(event, parse_path("kubernetes.labels.app")) == "checkout"


def test_lookup_finds_keys_that_contain_dots():
    # OpenTelemetry attribute names and Kubernetes label names are single keys with dots in them.
    otlp = {"resource": {"service.name": "checkout"}}
    k8s = {"kubernetes": {"labels": {"app.kubernetes.io/name": "web"}}}
    assert lookup(otlp, parse_path("resource.service.name")) == "checkout"
    assert lookup(k8s, parse_path("kubernetes.labels.app.kubernetes.io/name")) == "web"


def test_the_longest_key_wins_over_nesting():
    both = {"a.b": "whole", "a": {"b": "nested"}}
    assert lookup(both, parse_path("a.b")) == "whole"
    assert lookup({"a": {"b": "nested"}}, parse_path("a.b")) == "nested"


def test_a_longer_key_that_leads_nowhere_gives_way_to_a_shorter_one():
    fields = {"a.b": 1, "a": {"b": {"c": 2}}}
    assert lookup(fields, parse_path("a.b.c")) == 2
    assert lookup(fields, parse_path("a.b")) == 1


def test_an_escaped_dot_matches_only_a_whole_key():
    assert lookup({"a": {"b": 1}}, parse_path(r"a\.b")) is MISSING
    assert lookup({"a.b": 1}, parse_path(r"a\.b")) == 1


@pytest.mark.parametrize("fields", [{}, {"a": 1}, {"a": {"c": 1}}, {"a": [1, 2]}, "not a mapping"])
def test_lookup_of_nothing_is_missing_not_none(fields):
    assert lookup(fields, parse_path("a.b")) is MISSING


def test_a_json_null_is_a_value():
    assert lookup({"a": None}, parse_path("a")) is None


def test_picker_keys_by_the_path_as_written_and_leaves_out_what_is_missing():
    picker = Picker(["host.name", "severity", "absent"])
    assert picker.pick({"host": {"name": "web-1"}, "severity": "err", "x": 1}) == {
        "host.name": "web-1",
        "severity": "err",
    }
    assert not Picker([])
