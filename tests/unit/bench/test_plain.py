"""bench/plain.py: the plain loop's acknowledged watermark and its producing side, with a fake producer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.plain import AckWatermark, Relay

A0, A1, B0 = ("in", 0), ("in", 1), ("other", 0)


def consumed(marks: AckWatermark, tp, offsets) -> None:
    for offset in offsets:
        marks.consumed(tp, offset)


def test_the_watermark_stops_at_the_first_offset_not_acknowledged():
    marks = AckWatermark()
    consumed(marks, A0, range(34, 41))
    for offset in (34, 35, 36, 40):
        marks.acked(A0, offset)
    assert marks.take() == {A0: 37}
    assert marks.take() == {}  # nothing new
    for offset in (38, 39):
        marks.acked(A0, offset)
    assert marks.take() == {}  # 37 still in flight
    marks.acked(A0, 37)
    assert marks.take() == {A0: 41}


def test_acks_out_of_order_across_partitions_move_each_partition_alone():
    marks = AckWatermark()
    consumed(marks, A0, [0, 1, 2])
    consumed(marks, A1, [10, 11])
    consumed(marks, B0, [5])
    marks.acked(A1, 11)
    marks.acked(A0, 1)
    marks.acked(B0, 5)
    assert marks.take() == {B0: 6}
    marks.acked(A1, 10)
    marks.acked(A0, 0)
    assert marks.take() == {A0: 2, A1: 12}
    marks.acked(A0, 2)
    assert marks.take() == {A0: 3}


def test_a_gap_in_the_consumed_offsets_does_not_hold_the_watermark_back():
    marks = AckWatermark()
    consumed(marks, A0, [7, 9, 12])  # 8, 10, 11: transaction markers or compacted away
    for offset in (12, 9, 7):
        marks.acked(A0, offset)
    assert marks.take() == {A0: 13}


def test_an_assignment_forgets_the_partition_and_drops_its_late_acks():
    marks = AckWatermark()
    consumed(marks, A0, [3, 4])
    consumed(marks, A1, [8])
    marks.forget([A0])
    marks.acked(A0, 3)  # a late ack from before the assignment
    marks.acked(A1, 8)
    assert marks.take() == {A1: 9}
    consumed(marks, A0, [3, 4])  # consumed again from the committed offset
    marks.acked(A0, 3)
    assert marks.take() == {A0: 4}


@dataclass
class Msg:
    """A consumed record, as much of it as the relay reads."""

    payload: bytes
    k: bytes | None = b"k"
    h: Any = None

    def value(self) -> bytes:
        return self.payload

    def key(self) -> bytes | None:
        return self.k

    def headers(self) -> Any:
        return self.h


class FakeProducer:
    """Queues what is produced; ``poll``/``flush`` deliver it, failing the values listed in ``fail`` once
    each; ``room`` bounds the local queue (BufferError beyond it, as librdkafka's)."""

    def __init__(self, fail: set[bytes] | None = None, room: int = 1_000) -> None:
        self.queue: list[tuple[str, Any, Any, Any, Any]] = []
        self.delivered: list[tuple[str, Any, Any, Any]] = []
        self.fail = set(fail or ())
        self.room = room

    def produce(self, topic: str, value: Any = None, key: Any = None, *, headers=None, on_delivery=None):
        if len(self.queue) >= self.room:
            raise BufferError("Local: Queue full")
        self.queue.append((topic, value, key, headers, on_delivery))

    def poll(self, timeout: float = 0.0) -> int:
        queue, self.queue = self.queue, []
        for topic, value, key, headers, on_delivery in queue:
            if value in self.fail:
                self.fail.discard(value)
                on_delivery("delivery failed", None)
            else:
                self.delivered.append((topic, value, key, headers))
                on_delivery(None, None)
        return len(queue)

    def flush(self, timeout: float = 0.0) -> int:
        self.poll(timeout)
        return len(self.queue)

    def __len__(self) -> int:
        return len(self.queue)


def relay_with(producer: FakeProducer) -> tuple[Relay, AckWatermark]:
    marks = AckWatermark()
    return Relay(producer, "out", marks), marks


def send(relay: Relay, marks: AckWatermark, tp, offset: int, value: bytes) -> None:
    marks.consumed(tp, offset)
    relay.send(Msg(value, h=[("trace", b"1")]), tp, offset)


def test_each_record_is_copied_with_its_key_and_headers_and_acks_its_own_offset():
    producer = FakeProducer()
    relay, marks = relay_with(producer)
    send(relay, marks, A0, 0, b"a")
    send(relay, marks, A1, 5, b"b")
    relay.poll(0)
    assert producer.delivered == [
        ("out", b"a", b"k", [("trace", b"1")]),
        ("out", b"b", b"k", [("trace", b"1")]),
    ]
    assert marks.take() == {A0: 1, A1: 6}


def test_a_failed_delivery_is_sent_again_and_holds_the_watermark_until_it_is_acknowledged():
    producer = FakeProducer(fail={b"b"})
    relay, marks = relay_with(producer)
    for offset, value in enumerate((b"a", b"b", b"c")):
        send(relay, marks, A0, offset, value)
    relay.poll(0)  # a and c acked, b failed and is queued again
    assert relay.failures == 1
    assert marks.take() == {A0: 1}
    assert [value for _t, value, *_ in producer.queue] == [b"b"]
    relay.poll(0)
    assert marks.take() == {A0: 3}
    assert sorted(value for _t, value, *_ in producer.delivered) == [b"a", b"b", b"c"]


def test_flush_waits_for_re_sends_too():
    producer = FakeProducer(fail={b"a"})
    relay, marks = relay_with(producer)
    send(relay, marks, A0, 0, b"a")
    assert relay.flush(5.0) is True
    assert marks.take() == {A0: 1}
    assert not producer.queue


def test_a_full_local_queue_is_drained_by_serving_delivery_reports():
    producer = FakeProducer(room=2)
    relay, marks = relay_with(producer)
    for offset in range(5):
        send(relay, marks, B0, offset, b"x%d" % offset)
    relay.poll(0)
    assert len(producer.delivered) == 5
    assert marks.take() == {B0: 5}
