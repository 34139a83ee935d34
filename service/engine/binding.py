"""I/O binding: a batch's inputs copied to the model's device once, into buffers kept per shape bucket, and
its outputs left on the device until one copy back.

Without it, ``InferenceSession.run`` copies every input to the GPU and allocates for it on every call. Here
each shape bucket (the batch's rows rounded up to a power of two, crossed with the other axes as they are,
e.g. the sequence length a text batch was padded to) gets its device buffers once; a batch is copied into
its bucket's buffers through one host staging array (the rows beyond the batch's own are zeros, and their
outputs are dropped), run, and its outputs copied back in one call. The same code runs on ONNX Runtime's
CPU device, which is how the tests exercise it without a GPU.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnxruntime as ort

Tensors = dict[str, np.ndarray]
BucketKey = tuple[tuple[str, str, tuple[int, ...]], ...]

MAX_BUCKETS = 64
"""Shape buckets kept at once (the least recently used beyond it are freed): batch sizes are powers of
two, but a text model's sequence lengths multiply them."""


def row_bucket(rows: int) -> int:
    """The rows a batch of ``rows`` is run at: the next power of two (1, 2, 4, ... )."""
    return 1 << max(0, rows - 1).bit_length()


@dataclass
class _Bucket:
    binding: Any  # ort.IOBinding
    staging: dict[str, np.ndarray]
    device: dict[str, Any]  # ort.OrtValue per input, on the device


class BoundRunner:
    """Runs batches of a session through I/O binding on ``device`` (``"cuda"`` or ``"cpu"``) number
    ``device_id``. Thread-safe: one batch at a time (the buffers are shared; the device runs one batch at
    a time anyway)."""

    def __init__(
        self,
        session: ort.InferenceSession,
        output_names: Sequence[str],
        device: str = "cuda",
        device_id: int = 0,
        max_buckets: int = MAX_BUCKETS,
    ) -> None:
        self._session = session
        self._outputs = tuple(output_names)
        self._device, self._device_id = device, device_id
        self._max = max_buckets
        self._buckets: OrderedDict[BucketKey, _Bucket] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Shape buckets holding buffers now."""
        return len(self._buckets)

    def run(self, feeds: Tensors) -> Tensors:
        """One batch: ``feeds`` by input name, every input with the batch on its first axis."""
        rows = len(next(iter(feeds.values())))
        rounded = row_bucket(rows)
        key = tuple((name, a.dtype.str, (rounded, *a.shape[1:])) for name, a in feeds.items())
        with self._lock:
            bucket = self._bucket(key)
            for name, values in feeds.items():
                staging = bucket.staging[name]
                staging[:rows] = values
                staging[rows:] = 0
                bucket.device[name].update_inplace(staging)
            self._session.run_with_iobinding(bucket.binding)
            outputs = bucket.binding.copy_outputs_to_cpu()
        return {
            name: out[:rows] if out.ndim and out.shape[0] == rounded else out
            for name, out in zip(self._outputs, outputs, strict=True)
        }

    def _bucket(self, key: BucketKey) -> _Bucket:
        found = self._buckets.get(key)
        if found is not None:
            self._buckets.move_to_end(key)
            return found
        binding = self._session.io_binding()
        staging, device = {}, {}
        for name, dtype, shape in key:
            staging[name] = np.zeros(shape, dtype=np.dtype(dtype))
            value = ort.OrtValue.ortvalue_from_shape_and_type(
                shape, staging[name].dtype, self._device, self._device_id
            )
            binding.bind_ortvalue_input(name, value)
            device[name] = value
        for name in self._outputs:
            binding.bind_output(name, self._device, self._device_id)
        self._buckets[key] = made = _Bucket(binding, staging, device)
        while len(self._buckets) > self._max:
            self._buckets.popitem(last=False)
        return made
