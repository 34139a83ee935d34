"""service/flow/redelivery.py: a share group's last delivery of a record is dead-lettered unprocessed."""

from __future__ import annotations

from collections.abc import Sequence

from service.errors import Reason
from service.flow.records import Decoding, InputRecord
from service.flow.redelivery import LastDelivery


class Inner:
    def __init__(self) -> None:
        self.seen: list[int] = []

    def decode(self, records: Sequence[InputRecord]) -> Decoding:
        self.seen += [r.offset for r in records]
        return [], [], []


def rec(offset: int, delivery_count: int | None) -> InputRecord:
    return InputRecord("in", 0, offset, None, b"{}", None, None, 0.0, delivery_count=delivery_count)


def test_records_on_their_last_delivery_become_dead_letters_and_the_rest_are_decoded():
    inner = Inner()
    _items, rejected, _counts = LastDelivery(inner, 5).decode([rec(0, 1), rec(1, 5), rec(2, 4), rec(3, 6)])
    assert inner.seen == [0, 2]
    assert [(r.record.offset, r.reason) for r in rejected] == [
        (1, Reason.DELIVERY_LIMIT),
        (3, Reason.DELIVERY_LIMIT),
    ]
    assert "delivered 5 times" in rejected[0].detail


def test_records_without_a_delivery_count_are_decoded():
    inner = Inner()
    LastDelivery(inner, 2).decode([rec(0, None), rec(1, 1)])
    assert inner.seen == [0, 1]
