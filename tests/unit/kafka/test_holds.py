"""service/kafka/holds.py: failures held per topic, sent again in input order, one back-off per topic."""

from __future__ import annotations

import pytest

from service.kafka.holds import MAX_BACKOFF_S, Holds, backoff

Record = tuple[str, int, int]  # output topic, input partition, input offset


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def holds(clock: Clock) -> Holds[Record]:
    return Holds(lambda r: r[0], lambda r: ("in", r[1], r[2]), clock)


def test_backoff_doubles_up_to_its_cap() -> None:
    delays = [backoff(attempt) for attempt in range(10)]
    assert delays[:3] == [0.1, 0.2, 0.4]
    assert delays == sorted(delays) and delays[-1] == MAX_BACKOFF_S


def test_with_nothing_held_every_record_goes_at_once(holds: Holds[Record]) -> None:
    records = [("out", 0, 1), ("dlq", 0, 2)]
    assert holds.admit(records) is records
    assert not holds and holds.due() == [] and holds.next_due() is None


def test_a_failure_holds_its_topic_only_and_later_records_wait_behind_it(
    holds: Holds[Record], clock: Clock
) -> None:
    assert holds.failed(("out", 0, 5)) == (1, backoff(0))
    assert holds.admit([("out", 0, 6), ("dlq", 0, 7), ("out", 1, 1)]) == [("dlq", 0, 7)]
    assert holds.waiting() == 3
    assert holds.due() == [] and holds.next_due() == pytest.approx(clock.now + backoff(0))


def test_a_round_goes_out_in_input_order_whatever_order_the_failures_came_in(
    holds: Holds[Record], clock: Clock
) -> None:
    for record in [("out", 1, 9), ("out", 0, 7), ("out", 0, 3), ("out", 1, 2)]:
        holds.failed(record)
    clock.now += backoff(0)
    assert holds.due() == [("out", [("out", 0, 3), ("out", 0, 7), ("out", 1, 2), ("out", 1, 9)])]
    assert holds.waiting() == 0 and holds, "the round is out: the topic is still held"
    assert holds.admit([("out", 0, 8)]) == []


def test_a_round_that_fails_again_backs_off_longer_and_new_records_join_it_in_order(
    holds: Holds[Record], clock: Clock
) -> None:
    holds.failed(("out", 0, 3))
    for attempt in range(1, 5):
        clock.now += backoff(attempt - 1)
        [(_, sent)] = holds.due()
        holds.admit([("out", 0, 10 + attempt)])  # consumed meanwhile: behind the round
        for record in sent:
            assert holds.failed(record) == (attempt + 1, backoff(attempt))
        holds.round_done("out")
        assert holds.next_due() == pytest.approx(clock.now + backoff(attempt))
        assert holds.due() == []
    clock.now += backoff(4)
    [(_, sent)] = holds.due()
    assert sent == [("out", 0, 3), ("out", 0, 11), ("out", 0, 12), ("out", 0, 13), ("out", 0, 14)]


def test_a_round_acknowledged_whole_sends_what_gathered_at_once_then_the_hold_ends(
    holds: Holds[Record], clock: Clock
) -> None:
    holds.failed(("out", 0, 3))
    clock.now += backoff(0)
    holds.due()
    holds.admit([("out", 0, 4)])
    holds.round_done("out")
    assert holds.due() == [("out", [("out", 0, 4)])], "due at once, no back-off"
    assert holds.admit([("out", 0, 5)]) == [], "held until that round is acknowledged too"
    holds.round_done("out")
    [(_, sent)] = holds.due()
    holds.round_done("out")
    assert sent == [("out", 0, 5)]
    assert not holds and holds.admit([("out", 0, 6)]) == [("out", 0, 6)]


def test_a_late_failure_of_a_record_sent_before_the_hold_counts_against_the_round(
    holds: Holds[Record], clock: Clock
) -> None:
    holds.failed(("out", 0, 3))
    clock.now += backoff(0)
    holds.due()
    holds.failed(("out", 0, 4))  # was with the producer before the first failure
    holds.round_done("out")
    assert holds.next_due() == pytest.approx(clock.now + backoff(1))


def test_topics_back_off_apart(holds: Holds[Record], clock: Clock) -> None:
    holds.failed(("out", 0, 1))
    clock.now += 1.0
    holds.failed(("dlq", 0, 2))
    assert holds.due() == [("out", [("out", 0, 1)])]
    clock.now += backoff(0)
    assert holds.due() == [("dlq", [("dlq", 0, 2)])]
