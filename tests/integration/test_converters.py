"""Bring your own model: models built with real frameworks, converted with their real converters
(skl2onnx, onnxmltools, torch.onnx), served by the real service on the real broker, and each result checked
against the framework's own prediction for the event it came from.

The service gets nothing but the model's path and what the input needs (the feature names, or the text
format): it must work out the processor from the graph, and turn each converter's outputs (ZipMap's
sequence of maps, ``[N, 1]`` columns, string labels, a bare ``logits``) into plain JSON results. The
builders and the result each case must give are in ``tests/support/converters.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.support import converters
from tests.support.converters import Built, Result
from tests.support.harness import (
    SERVICE_PARTITIONS,
    end_offsets,
    produce,
    read_topic,
    source_of,
    start_on_topics,
    wait_for,
)

pytestmark = pytest.mark.integration

EVENTS = 2000
TEST_SEED = 424242  # the events served; the models are trained on converters.TRAIN_SEED's
MIN_AGREEMENT = 0.99  # share of events whose labels must equal the framework's
# Scores and probabilities must satisfy |service - framework| <= SCORE_ATOL + SCORE_RTOL * |framework|. The
# ONNX graphs compute in float32, the frameworks mostly in float64, on the same branches (converters.py).
# Measured on the 2,000 events of TEST_SEED, ONNX Runtime run directly and through the service, the largest
# differences were 1.5e-7 (tree ensembles' probabilities, IsolationForest's scores), 6.2e-7 (the logistic
# regression), 1.1e-6 (BERT's softmax, batches padded differently) absolute, and 2.5e-7 relative (the
# forest's regression of latencies up to ~1,000 ms: 2.0e-4 absolute): float32 rounding summed over tens of
# trees or a few layers. 1e-5 leaves ~10x room over the worst, and still catches any real change of a result
# (a wrong class column, a missing softmax, a float16 cast).
SCORE_ATOL = 1e-5
SCORE_RTOL = 1e-5

CASES: dict[str, Callable[[Path], Built]] = {
    "isolation-forest": converters.isolation_forest,
    "gradient-boosting": converters.gradient_boosting,
    "logistic-regression": converters.logistic_regression,
    "random-forest-regressor": converters.random_forest_regressor,
    "lightgbm": converters.lightgbm_classifier,
    "xgboost": converters.xgboost_classifier,
    "torch": converters.torch_classifier,
    "bert": converters.bert_classifier,
    "gradient-boosting-binary": lambda folder: converters.gradient_boosting(folder, classes=2),
}


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Built]:
    """``build(case)``: the case's model, built once per module (two tests serve the same GBC)."""
    cache: dict[str, Built] = {}

    def get(case: str) -> Built:
        if case not in cache:
            cache[case] = CASES[case](tmp_path_factory.mktemp(case))
        return cache[case]

    return get


def serve(
    tmp_path: Path, bootstrap: str, topics: dict[str, str], group_id: str, built: Built, **extra: str
) -> list[tuple[Result, Result]]:
    """Send EVENTS events to the service serving ``built`` (its settings, plus ``extra``), read every result
    back and pair each with the framework's: ``[(expected, got)]`` in input order."""
    items = built.items(EVENTS, TEST_SEED)
    coords = produce(bootstrap, topics["in"], items)
    service = start_on_topics(tmp_path, bootstrap, topics, group_id, model=None, **built.settings, **extra)

    def written(topic: str, partitions: int) -> int:
        return sum(end_offsets(bootstrap, topic, partitions).values())

    try:
        # Results or dead letters for everything, or the service gone (a model it refuses): then fail
        # now, with its log, not after read_topic's minute of waiting.
        wait_for(
            lambda: (
                not service.alive()
                or written(topics["out"], SERVICE_PARTITIONS) + written(topics["dlq"], 1) >= len(items)
            ),
            90,
            "a result or a dead letter for every event",
        )
        assert service.alive(), f"the service exited:\n{service.log()[-4000:]}"
        dead = written(topics["dlq"], 1)
        if dead:
            first = read_topic(bootstrap, topics["dlq"], expected=1, timeout=10)[0]
            pytest.fail(f"{dead} of {len(items)} events dead-lettered, e.g. {first.headers}")
        outputs = read_topic(bootstrap, topics["out"], expected=len(items))
    finally:
        code = service.stop()
    assert code == 0, service.log()[-4000:]

    results = {source_of(o): msgspec.json.decode(o.value)["result"] for o in outputs}
    assert len(outputs) == len(items) and set(results) == set(coords), (
        f"{len(outputs)} results for {len(items)} events; {len(set(coords) - set(results))} have none"
    )
    expected = built.expect([value for _, value in items])
    return [(want, results[coord]) for want, coord in zip(expected, coords, strict=True)]


@dataclass
class Agreement:
    """How the service's results compare with the framework's: ``labels`` the share of events whose
    non-float values (classes, label names) all equal; ``max_diff`` the largest absolute score difference;
    ``outside`` how many of the ``events`` have a score beyond the tolerance; ``example`` the first
    (expected, got) that differ in either way, else the first pair."""

    labels: float
    max_diff: float
    outside: int
    events: int
    example: tuple[Result, Result]

    def __str__(self) -> str:
        return (
            f"label agreement {self.labels:.4f}, max abs score difference {self.max_diff:.3g}, "
            f"{self.outside} of {self.events} events with a score beyond "
            f"{SCORE_ATOL:g} + {SCORE_RTOL:g} x |expected|; "
            f"e.g. expected {self.example[0]}, got {self.example[1]}"
        )


def compare(pairs: list[tuple[Result, Result]]) -> Agreement:
    """Compare (expected, got) results leaf by leaf. The keys must be exactly the expected ones at every
    level (the result contract; asserted); a float leaf must be a number within the tolerance; any other
    leaf (a class, a label name) must be equal and of the same type (``1`` is not ``"1"``, ``1.0`` or
    ``[1]``)."""
    agreeing, diffs, outside, example = 0, [], 0, None
    for index, (want, got) in enumerate(pairs):
        labels_equal, scores_close = True, True
        for path, expected, value in _leaves(want, got, index):
            if isinstance(expected, float):
                assert isinstance(value, int | float) and not isinstance(value, bool), (path, value, got)
                diff = abs(value - expected)
                diffs.append(diff)
                scores_close &= diff <= SCORE_ATOL + SCORE_RTOL * abs(expected)
            else:
                labels_equal &= type(value) is type(expected) and value == expected
        agreeing += labels_equal
        outside += not scores_close
        if example is None and not (labels_equal and scores_close):
            example = (want, got)
    return Agreement(agreeing / len(pairs), max(diffs, default=0.0), outside, len(pairs), example or pairs[0])


def _leaves(want: Any, got: Any, index: int, path: str = "result") -> Iterator[tuple[str, Any, Any]]:
    """(path, expected, got) of every leaf of ``want``, asserting that ``got`` has the same keys."""
    if isinstance(want, dict):
        keys = sorted(got) if isinstance(got, dict) else None
        assert keys == sorted(want), (
            f"event {index}: {path} is {got!r}; the contract says keys {sorted(want)}"
        )
        for key in want:
            yield from _leaves(want[key], got[key], index, f"{path}.{key}")
    else:
        yield path, want, got


def assert_agrees(pairs: list[tuple[Result, Result]]) -> None:
    """At least MIN_AGREEMENT of the labels equal, and every score within the tolerance (the builders'
    models take the same branches and layers as their frameworks, so no event may be off)."""
    agreement = compare(pairs)
    assert agreement.labels >= MIN_AGREEMENT and agreement.outside == 0, str(agreement)


@pytest.mark.parametrize("case", [c for c in CASES if c != "gradient-boosting-binary"])
def test_model_gives_the_frameworks_results(case, build, tmp_path, kafka_bootstrap, topics, group_id):
    assert_agrees(serve(tmp_path, kafka_bootstrap, topics, group_id, build(case)))


def test_outputs_can_be_renamed(build, tmp_path, kafka_bootstrap, topics, group_id):
    built = build("gradient-boosting")
    pairs = serve(
        tmp_path,
        kafka_bootstrap,
        topics,
        group_id,
        built,
        model__outputs="output_label=label,output_probability=probabilities",
    )
    renamed = {"output_label": "label", "output_probability": "probabilities"}
    assert_agrees([({renamed[k]: v for k, v in want.items()}, got) for want, got in pairs])


def test_labels_name_the_classes_by_position(build, tmp_path, kafka_bootstrap, topics, group_id):
    built = build("gradient-boosting-binary")  # int classes 0 and 1
    names = ["calm", "busy"]
    pairs = serve(tmp_path, kafka_bootstrap, topics, group_id, built, model__labels=",".join(names))
    named = [
        (
            {
                "output_label": names[want["output_label"]],
                "output_probability": {names[int(c)]: p for c, p in want["output_probability"].items()},
            },
            got,
        )
        for want, got in pairs
    ]
    assert {want["output_label"] for want, _ in named} == set(names)  # both classes are served
    assert_agrees(named)
