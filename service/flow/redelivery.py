"""A share group's last delivery of a record: dead-lettered unprocessed, so a record that kills the process
every time it is processed leaves a trail instead of being archived by the broker without one.

The group counts the deliveries of each record (``InputRecord.delivery_count``) and archives a record
whose count reached ``share.delivery.count.limit`` once that delivery ends unanswered. A record delivered
that many times without an answer is one no member could answer: most likely it stopped the process
each time (a crash, an out-of-memory kill). :class:`LastDelivery` takes it out before decoding, as a
``delivery_limit`` dead letter; its acknowledgement ACCEPTs it.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.errors import Reason
from service.flow.ports import DecodeStage
from service.flow.records import Decoding, InputRecord, Rejection


class LastDelivery:
    """A decode stage in front of ``inner``: records on their ``limit``-th delivery or later become
    ``delivery_limit`` dead letters; the rest are decoded by ``inner``."""

    def __init__(self, inner: DecodeStage, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    def decode(self, records: Sequence[InputRecord]) -> Decoding:
        limit = self._limit
        last = [record for record in records if (record.delivery_count or 0) >= limit]
        if not last:
            return self._inner.decode(records)
        items, rejected, counts = self._inner.decode([r for r in records if (r.delivery_count or 0) < limit])
        detail = (
            f"delivered {limit} times (share.delivery.count.limit) without an answer: not processed again"
        )
        return items, rejected + [Rejection(record, Reason.DELIVERY_LIMIT, detail) for record in last], counts
