"""The synthetic event generator: deterministic, well-formed, JSON-able, and with the promised mix."""

from __future__ import annotations

import json
import math
import time
from collections import Counter

import numpy as np
import pytest

from service.tools.generate import ANOMALY_KINDS, LOG_LABELS, LOG_LEVELS, METRIC_FEATURES, EventGenerator

METRIC_KEYS = {"ts", "host", "service", *METRIC_FEATURES}
LOG_KEYS = {"ts", "host", "service", "level", "message"}


def test_same_seed_same_events() -> None:
    a, b = EventGenerator(42), EventGenerator(42)
    assert a.metrics(500, 0.1) == b.metrics(500, 0.1)
    assert a.logs(500) == b.logs(500)
    # ... and the streams stay in step over further calls.
    assert a.metrics_labeled(200, 0.2)[1].tolist() == b.metrics_labeled(200, 0.2)[1].tolist()
    assert a.logs_labeled(200)[1].tolist() == b.logs_labeled(200)[1].tolist()


def test_different_seeds_differ() -> None:
    assert EventGenerator(1).metrics(50) != EventGenerator(2).metrics(50)
    assert EventGenerator(1).logs(50) != EventGenerator(2).logs(50)


def test_unseeded_generators_differ() -> None:
    assert EventGenerator().logs(20) != EventGenerator().logs(20)


def test_metrics_fields_and_ranges() -> None:
    events = EventGenerator(3).metrics(2000, anomaly_ratio=0.1)
    assert len(events) == 2000
    for ev in events:
        assert set(ev) == METRIC_KEYS
        assert isinstance(ev["ts"], int)
        assert isinstance(ev["host"], str) and "-" in ev["host"]
        assert isinstance(ev["service"], str)
        for f in METRIC_FEATURES:
            assert isinstance(ev[f], float) and math.isfinite(ev[f]) and ev[f] >= 0.0, (f, ev)
        assert ev["cpu_pct"] <= 100.0 and ev["mem_pct"] <= 100.0
    assert len(METRIC_FEATURES) == len(set(METRIC_FEATURES))


def test_timestamps_increase_across_calls() -> None:
    gen = EventGenerator(5)
    ts = [e["ts"] for e in gen.metrics(300) + gen.metrics(300)]
    assert ts == sorted(ts)
    logs = [e["ts"] for e in gen.logs(300) + gen.logs(300)]
    assert logs == sorted(logs)


def test_start_ms_sets_the_clock() -> None:
    start = 1_800_000_000_000
    events = EventGenerator(1, start_ms=start).logs(10)
    assert all(start <= e["ts"] < start + 60_000 for e in events)


@pytest.mark.parametrize("ratio", [0.0, 0.02, 0.1, 0.5])
def test_anomaly_ratio_roughly_honoured(ratio: float) -> None:
    n = 20_000
    _, labels = EventGenerator(11).metrics_labeled(n, ratio)
    assert labels.dtype == bool and labels.shape == (n,)
    # Bernoulli per event: allow 5 standard deviations.
    tolerance = 5 * math.sqrt(ratio * (1 - ratio) / n) + 1e-9
    assert abs(labels.mean() - ratio) <= tolerance


def test_every_anomaly_kind_occurs() -> None:
    _, kinds = EventGenerator(12).metrics_with_kinds(10_000, 0.2)
    assert set(np.unique(kinds).tolist()) == set(range(len(ANOMALY_KINDS)))


def test_anomalies_change_the_data() -> None:
    # Same seed, same random stream up to the anomaly draw: only labelled rows may differ.
    normal = EventGenerator(13).metrics(3000, anomaly_ratio=0.0)
    anomalous, labels = EventGenerator(13).metrics_labeled(3000, anomaly_ratio=0.3)
    differs = np.array([a != b for a, b in zip(normal, anomalous, strict=True)])
    assert not differs[~labels].any()
    assert differs[labels].mean() > 0.95


def test_bad_anomaly_ratio_rejected() -> None:
    with pytest.raises(ValueError):
        EventGenerator(1).metrics(10, anomaly_ratio=1.5)


def test_zero_events() -> None:
    gen = EventGenerator(1)
    assert gen.metrics(0) == [] and gen.logs(0) == []
    events, labels = gen.logs_labeled(0)
    assert events == [] and labels.shape == (0,)


def test_logs_fields_and_labels() -> None:
    events, labels = EventGenerator(21).logs_labeled(5000)
    assert labels.dtype == np.int64 and labels.shape == (5000,)
    assert set(labels.tolist()) == set(range(len(LOG_LABELS)))
    for ev in events:
        assert set(ev) == LOG_KEYS
        assert isinstance(ev["ts"], int)
        assert ev["level"] in LOG_LEVELS
        assert isinstance(ev["message"], str) and ev["message"].strip()


def test_log_lengths_vary() -> None:
    lengths = np.array([len(e["message"]) for e in EventGenerator(22).logs(5000)])
    assert lengths.min() < 30
    assert lengths.max() > 180
    assert np.percentile(lengths, 75) - np.percentile(lengths, 25) > 30


def test_level_does_not_determine_label() -> None:
    events, labels = EventGenerator(23).logs_labeled(20_000)
    classes_by_level: dict[str, set[int]] = {}
    for ev, label in zip(events, labels.tolist(), strict=True):
        classes_by_level.setdefault(ev["level"], set()).add(label)
    for level in ("INFO", "WARN", "ERROR"):
        assert len(classes_by_level[level]) == len(LOG_LABELS), level
    # The best a level-only classifier can do is far from perfect.
    by_level = Counter(zip((e["level"] for e in events), labels.tolist(), strict=True))
    best = sum(max(c for (lv, _), c in by_level.items() if lv == level) for level in classes_by_level)
    assert best / len(events) < 0.7


def test_messages_share_vocabulary_across_classes() -> None:
    events, labels = EventGenerator(24).logs_labeled(10_000)
    vocab: list[set[str]] = [set() for _ in LOG_LABELS]
    for ev, label in zip(events, labels.tolist(), strict=True):
        vocab[label].update(w.lower().strip(",:()") for w in ev["message"].split())
    for word in ("request", "connection", "user", "failed"):
        assert sum(word in v for v in vocab) >= 3, word


def test_events_are_json_serialisable() -> None:
    gen = EventGenerator(31)
    for events in (gen.metrics(500, 0.2), gen.logs(500)):
        assert json.loads(json.dumps(events, allow_nan=False)) == events


def test_fast_enough_for_a_load_generator() -> None:
    gen = EventGenerator(41)
    start = time.perf_counter()
    gen.metrics(100_000)
    gen.logs(100_000)
    # ~1 s on a 2-core machine; generous so a busy CI runner does not flake.
    assert time.perf_counter() - start < 10.0
