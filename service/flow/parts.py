"""The loop's collaborators, one per concern, built outside (``service/startup.py``) and handed to the
loop together."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from service.flow.backlog import Backlog
from service.flow.backpressure import BackPressure
from service.flow.batcher import Batcher
from service.flow.inference import Inference
from service.flow.outputs import Outputs
from service.flow.ports import Acknowledgements, DecodeStage, HeldItems, TelemetryLike
from service.flow.records import Decoded
from service.flow.sizing import BatchPolicy


@dataclass(frozen=True, slots=True)
class Parts:
    """``decoder`` turns consumed records into items and ``held`` are the stages that hold items back
    across rounds (the open rows: empty unless rows are assembled); ``batcher`` cuts batches at the size
    ``policy`` decides; ``inference`` runs them; ``outputs`` produces one record per item; ``acks`` is the
    acknowledgement path; ``backpressure`` pauses the input while too much is in flight; ``backlog`` is
    the consumer lag; ``telemetry`` hears of everything."""

    decoder: DecodeStage
    batcher: Batcher[Decoded]
    inference: Inference
    outputs: Outputs
    acks: Acknowledgements
    backpressure: BackPressure
    policy: BatchPolicy
    backlog: Backlog
    telemetry: TelemetryLike
    held: Sequence[HeldItems] = ()
