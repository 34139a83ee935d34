"""The ONNX Runtime session: the only code that touches onnxruntime."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnxruntime as ort
import structlog

from service.config import GpuSettings, ModelSettings
from service.engine.binding import BoundRunner
from service.engine.providers import (
    CUDA,
    GPU_PROVIDERS,
    TENSORRT,
    Shapes,
    choose_providers,
    cuda_problem,
    expected_drop,
    provider_options,
    trt_profile,
)
from service.errors import ConfigError
from service.processors.base import Port, Tensors

_log = structlog.get_logger("microbatch.engine")


class Engine:
    """An InferenceSession plus what the pipeline needs to know about it.

    ``provider`` is the provider actually serving (the first of the session's). ``run`` is thread-safe
    and releases the GIL while ONNX Runtime computes.
    """

    def __init__(
        self,
        path: Path,
        providers: Sequence[str],
        intra_op_threads: int = 0,
        allow_spinning: bool = False,
        gpu: GpuSettings | None = None,
        shapes: Shapes | None = None,
        default_providers: bool = False,
    ) -> None:
        """``gpu``: the CUDA and TensorRT options (defaults when None); ``shapes``: the batch sizes and
        sequence lengths TensorRT's profile covers (no profile when None); ``default_providers``:
        ``providers`` is the default list, not one a setting asked for. Logs ``providers`` (info) naming
        the one serving when ``providers`` offered a choice, and ``providers_unavailable`` (warning) with
        why for requested ones that cannot serve, unless that is the default list on a machine with no
        NVIDIA driver (``providers.expected_drop``)."""
        cuda = cuda_problem() if GPU_PROVIDERS & set(providers) else None
        usable, dropped = choose_providers(
            providers, ort.get_all_providers(), ort.get_available_providers(), cuda
        )
        self.dropped = dropped
        """Requested providers that cannot serve here, each with why (no driver, no device, a library
        missing, not in this build)."""
        # A CPU machine serving the default list is not news: CUDA was only ever a "use it if it is there".
        if dropped and not expected_drop(default_providers, cuda):
            _log.warning("providers_unavailable", dropped=dropped, using=usable)
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # ONNX Runtime's own warnings are noise; errors still print
        # Idle intra-op threads spin-wait for the next batch by default. Here they share the cores with the
        # loop thread, which consumes and pre-processes the next batch meanwhile: spinning starves it
        # (docs/BENCHMARKS.md, *What makes it fast*).
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if allow_spinning else "0")
        trt = trt_profile(_declared_inputs(path), shapes) if TENSORRT in usable and shapes else None
        gpu = gpu or GpuSettings()
        entries = provider_options(usable, gpu, trt)
        try:
            self._session = ort.InferenceSession(str(path), options, providers=entries)
        except Exception as exc:  # ORT raises its own Fail/InvalidGraph/InvalidProtobuf/NoSuchFile types
            raise ConfigError(ModelSettings.env("path"), f"cannot load the model: {exc}") from None
        self.path = path
        self.provider: str = self._session.get_providers()[0]
        if self.provider != usable[0]:
            _log.warning("provider_fallback", requested=usable[0], using=self.provider)
        elif len(providers) > 1:  # there was a choice: say which one serves (one line)
            _log.info("providers", chosen=self.provider)
        self.inputs = tuple(_port(i) for i in self._session.get_inputs())
        self.outputs = tuple(_port(o) for o in self._session.get_outputs())
        self.input_names = tuple(i.name for i in self.inputs)
        self.output_names = tuple(o.name for o in self.outputs)
        self.bound: BoundRunner | None = None
        """Batches through I/O binding on the GPU (``MICROBATCH_GPU__IO_BINDING``); None: plain runs."""
        if self.provider == CUDA and gpu.io_binding:
            self.bound = BoundRunner(self._session, self.output_names, "cuda", gpu.device_id)
        meta = self._session.get_modelmeta()
        self.metadata: dict[str, str] = dict(meta.custom_metadata_map)
        self.producer: str = meta.producer_name or ""

    def run(self, feeds: Tensors) -> Tensors:
        """Run one batch. Raises whatever ONNX Runtime raises (bad input, out of memory): the caller
        splits the batch and retries, so only the items that fail alone are rejected."""
        if self.bound is not None:
            return self.bound.run(feeds)
        outputs = self._session.run(None, feeds)
        return dict(zip(self.output_names, outputs, strict=True))

    def describe(self) -> dict[str, Any]:
        """For the start-up log line."""
        described: dict[str, Any] = {
            "path": str(self.path),
            "provider": self.provider,
            "inputs": self.input_names,
        }
        if self.dropped:
            described["dropped"] = self.dropped
        return described


def _declared_inputs(path: Path) -> list[Port]:
    """The model's inputs as its file declares them, read without a session (TensorRT's profile is
    part of the session's options); none when the file cannot be read (the session then says why)."""
    import onnx  # only for TensorRT: not imported on the way to a CPU or CUDA session

    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception:  # the session's own error then names the file and the setting
        return []
    weights = {init.name for init in graph.initializer}
    return [
        Port(
            i.name,
            "",
            tuple(d.dim_value or d.dim_param or None for d in i.type.tensor_type.shape.dim),
        )
        for i in graph.input
        if i.name not in weights
    ]


def _port(arg: Any) -> Port:
    """ONNX Runtime's NodeArg as a Port: a dynamic axis is its name (``batch``) or None."""
    shape = arg.shape if isinstance(arg.shape, list) else []
    return Port(arg.name, arg.type, tuple(d if isinstance(d, int | str) else None for d in shape))
