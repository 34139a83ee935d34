"""service/engine/binding.py on ONNX Runtime's CPU device, the same code path the GPU runs: results equal
to a plain run at every batch size, buffers kept per shape bucket and reused, the oldest freed."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from service.engine.binding import BoundRunner, row_bucket
from service.models.reference import MODELS_DIR

CPU = ["CPUExecutionProvider"]


def session(name: str) -> ort.InferenceSession:
    return ort.InferenceSession(str(MODELS_DIR / f"{name}.onnx"), providers=CPU)


def runner(s: ort.InferenceSession, **kwargs) -> BoundRunner:
    return BoundRunner(s, [o.name for o in s.get_outputs()], "cpu", 0, **kwargs)


def plain(s: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds), strict=True))


def features(rows: int, seed: int = 3) -> dict[str, np.ndarray]:
    return {"features": np.random.default_rng(seed).normal(size=(rows, 11)).astype(np.float32)}


@pytest.mark.parametrize(("rows", "bucket"), [(0, 1), (1, 1), (2, 2), (3, 4), (8, 8), (9, 16), (500, 512)])
def test_rows_round_up_to_a_power_of_two(rows, bucket):
    assert row_bucket(rows) == bucket


def test_every_batch_size_gives_what_a_plain_run_gives():
    s = session("metrics-anomaly")
    bound = runner(s)
    for rows in (1, 3, 4, 8, 9, 16, 17):
        feeds = features(rows, seed=rows)
        got, want = bound.run(feeds), plain(s, feeds)
        assert got.keys() == want.keys()
        for name in want:
            assert got[name].shape == want[name].shape, (rows, name)
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6)


def test_buffers_are_kept_per_bucket_and_reused():
    s = session("metrics-anomaly")
    bound = runner(s)
    for rows in (3, 4, 3, 4):  # one bucket of 4 rows
        bound.run(features(rows))
    assert len(bound) == 1
    bound.run(features(5))  # a bucket of 8
    assert len(bound) == 2
    # A smaller batch after a larger one in the same bucket: the rows it does not fill are zeros again,
    # not the last batch's, so they cannot leak into anything.
    bound.run(features(4, seed=1))
    small = features(3, seed=2)
    np.testing.assert_allclose(bound.run(small)["score"], plain(s, small)["score"], rtol=1e-6)


def test_the_least_recently_used_bucket_is_freed_beyond_the_limit():
    bound = runner(session("metrics-anomaly"), max_buckets=2)
    for rows in (1, 2, 4, 1):
        bound.run(features(rows))
    assert len(bound) == 2


def test_a_text_model_with_two_inputs_and_a_sequence_axis():
    """Buckets cross the rows with the sequence length as padded by the processor."""
    s = session("log-classifier")
    bound = runner(s)
    rng = np.random.default_rng(5)
    for rows, length in ((5, 12), (7, 12), (3, 30)):
        ids = rng.integers(1, 1000, size=(rows, length), dtype=np.int64)
        mask = np.ones((rows, length), dtype=np.int64)
        mask[0, length // 2 :] = 0  # one line shorter than the batch's longest
        feeds = {"input_ids": ids, "attention_mask": mask}
        got, want = bound.run(feeds), plain(s, feeds)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
    assert len(bound) == 2  # (8, 12) served 5 and 7 rows; (4, 30)
