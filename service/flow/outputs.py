"""Outputs: what the service produces, handed to the sink.

This class is responsible for: one output record per item of a finished batch (its result, or a dead
letter when the item failed or its result cannot be encoded; an assembled row that fails gets one per
message that fed it), in batch order; a dead letter for every
message rejected before batching. What the broker acknowledges, or refuses, is the checkpoint's business
(``flow.checkpoint``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from service.errors import InvalidMessage, Reason
from service.flow.assembly import dead_letters
from service.flow.encode import dead_letter, result_record, row_record
from service.flow.inference import Finished
from service.flow.model import ModelRef
from service.flow.ports import SinkLike, TelemetryLike
from service.flow.records import Decoded, OutRecord, Rejection


class Outputs:
    """Not thread-safe: the loop's thread only."""

    def __init__(
        self,
        sink: SinkLike,
        topic: str,
        dlq_topic: str,
        model: ModelRef,
        telemetry: TelemetryLike,
        clock: Callable[[], float],
        wall_ms: Callable[[], int],
    ) -> None:
        self._sink = sink
        self._topic = topic
        self._dlq_topic = dlq_topic
        self._model = model
        self._telemetry = telemetry
        self._clock = clock
        self._wall_ms = wall_ms

    def batch(self, done: Finished) -> None:
        """Queue one output per item of ``done``, in batch order (the results together, acknowledged
        together; a dead letter at once), and report the batch."""
        produced_ms = self._wall_ms()
        now = self._clock()
        topic, model, size = self._topic, self._model, len(done.batch)
        outs: list[OutRecord] = []
        send = outs.append
        event_ms = []
        for item, result in done.answers:  # per message: keep it lean
            record = item.record
            if isinstance(result, InvalidMessage):
                self._fail(item, result.reason, result.detail)
                continue
            consumed_ms = produced_ms - int((now - record.received) * 1000)
            try:
                if item.row is not None:
                    out = row_record(item.row, topic, model, result, size, consumed_ms, produced_ms)
                else:
                    out = result_record(
                        record, topic, model, result, size, consumed_ms, produced_ms, item.index, item.fields
                    )
            except (TypeError, ValueError) as exc:  # a processor returned something JSON cannot hold
                self._fail(item, Reason.INVALID_OUTPUT, f"result not encodable: {exc}")
                continue
            send(out)
            event_ms.append(record.timestamp_ms or consumed_ms)
        if outs:
            self._sink.send_all(outs)
        latencies_ms = produced_ms - np.asarray(event_ms, dtype=np.float64)
        # The batcher hands batches over in arrival order, its oldest waiting item first.
        queue_wait_s = done.started - done.batch[0].record.received
        self._telemetry.batch(size, queue_wait_s, done.run_s, latencies_ms, done.padding)

    def _fail(self, item: Decoded, reason: Reason, detail: str) -> None:
        """The dead letter of an item; of a row, one per message that fed it (its bytes as they came)."""
        if item.row is None:
            self.reject(Rejection(item.record, reason, detail, item.index))
            return
        for rejection in dead_letters(item.row, reason, detail):
            self.reject(rejection)

    def reject(self, rejection: Rejection) -> None:
        """Queue the dead letter of one message."""
        self._telemetry.rejected(rejection.reason)
        self._sink.send(dead_letter(rejection, self._dlq_topic))
