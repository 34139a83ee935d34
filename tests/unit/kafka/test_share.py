"""service/kafka/share.py with fake members: a member fetches again only once every record of its last
fetch is answered; answers go to the member that acquired the record; closing releases what is held."""

from __future__ import annotations

import pytest
from confluent_kafka import AcknowledgeType

from service.config import KafkaSettings, Settings, check_run_settings
from service.errors import ConfigError
from service.flow.records import Ack
from service.kafka.share import ShareSource


class Message:
    def __init__(self, partition: int, offset: int, delivery_count: int = 1) -> None:
        self._partition, self._offset, self._count = partition, offset, delivery_count

    def error(self):
        return None

    def topic(self) -> str:
        return "in"

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self):
        return None

    def value(self) -> bytes:
        return b"{}"

    def headers(self):
        return None

    def timestamp(self):
        return (1, 1000)

    def delivery_count(self) -> int:
        return self._count


class Member:
    """Hands out what the test queues; raises as the real one does when polled with records unanswered."""

    def __init__(self, options: dict) -> None:
        self.options = options
        self.queued: list[list[Message]] = []
        self.unanswered: set[tuple[int, int]] = set()
        self.acks: list[tuple[int, int, int]] = []
        self.calls: list[str] = []

    def subscribe(self, topics: list[str]) -> None:
        self.calls.append("subscribe")

    def poll(self, timeout: float):
        assert not self.unanswered, "IllegalStateException: records of the last poll unacknowledged"
        self.calls.append("poll")
        batch = self.queued.pop(0) if self.queued else []
        self.unanswered = {(m.partition(), m.offset()) for m in batch}
        return batch

    def acknowledge_offset(
        self, topic: str, partition: int, offset: int, ack_type=AcknowledgeType.ACCEPT
    ) -> None:
        self.unanswered.discard((partition, offset))
        self.acks.append((partition, offset, int(ack_type)))

    def commit_async(self) -> None:
        self.calls.append("commit_async")

    def commit_sync(self, timeout: float):
        self.calls.append("commit_sync")
        return {}

    def close(self) -> None:
        self.calls.append("close")


@pytest.fixture
def source():
    made: list[Member] = []

    def member(options: dict) -> Member:
        made.append(Member(options))
        return made[-1]

    settings = KafkaSettings(bootstrap_servers="127.0.0.1:9", group_type="share", share_members=2)
    share = ShareSource(settings, members=member)
    yield share, made
    share.close()


def test_each_member_is_an_explicit_share_consumer_of_the_group(source):
    _share, (a, b) = source
    assert a.options["share.acknowledgement.mode"] == "explicit"
    assert a.options["group.id"] == b.options["group.id"] == "microbatch"
    assert a.options["max.poll.records"] == 64


def test_a_member_fetches_again_only_once_its_records_are_answered(source):
    share, (a, b) = source
    a.queued = [[Message(0, 0, 1), Message(0, 1, 3)], [Message(0, 2)]]
    b.queued = [[Message(1, 0)]]
    first = share.consume(10, 0.0)
    assert [(r.offset, r.delivery_count) for r in first] == [(0, 1), (1, 3)]
    assert share.consume(10, 0.0)[0].partition == 1  # a holds its records: b fetches
    assert share.consume(10, 0.0) == []  # both hold theirs
    share.acknowledge(first, Ack.ACCEPT)
    assert a.calls[-1] == "commit_async"  # its answers go out at once
    assert [r.offset for r in share.consume(10, 0.0)] == [2]
    assert a.acks == [(0, 0, int(AcknowledgeType.ACCEPT)), (0, 1, int(AcknowledgeType.ACCEPT))]


def test_records_fetched_beyond_what_the_loop_asked_for_wait_in_the_source(source):
    share, (a, _b) = source
    a.queued = [[Message(0, offset) for offset in range(5)]]
    assert [r.offset for r in share.consume(2, 0.0)] == [0, 1]
    assert [r.offset for r in share.consume(10, 0.0)] == [2, 3, 4]
    assert share.held() == 5


def test_closing_releases_what_is_held_and_leaves(source):
    share, (a, b) = source
    a.queued = [[Message(0, 0), Message(0, 1)]]
    records = share.consume(1, 0.0)
    share.acknowledge(records, Ack.ACCEPT)
    share.close()
    assert a.acks == [(0, 0, int(AcknowledgeType.ACCEPT)), (0, 1, int(AcknowledgeType.RELEASE))]
    assert a.calls[-1] == b.calls[-1] == "close"


def test_paused_it_fetches_nothing(source):
    share, (a, _b) = source
    a.queued = [[Message(0, 0)]]
    share.pause()
    assert share.consume(10, 0.0) == []
    share.resume()
    assert len(share.consume(10, 0.0)) == 1


def test_an_answer_for_a_record_not_held_is_ignored(source):
    share, (a, _b) = source
    a.queued = [[Message(0, 0)]]
    records = share.consume(1, 0.0)
    assert share.acknowledge(records, Ack.ACCEPT) == 1
    assert share.acknowledge(records, Ack.ACCEPT) == 0


@pytest.mark.parametrize(
    ("setting", "value", "named"),
    [
        ("delivery", {"guarantee": "exactly-once"}, "MICROBATCH_DELIVERY__GUARANTEE"),
        ("assemble", {"enabled": True}, "MICROBATCH_ASSEMBLE__ENABLED"),
        (
            "kafka",
            {"group_type": "share", "group_instance_id": "pod-0"},
            "MICROBATCH_KAFKA__GROUP_INSTANCE_ID",
        ),
    ],
)
def test_what_a_share_group_cannot_do_stops_start_up_naming_the_setting(setting, value, named):
    base = {"input": {"topics": ["in"]}, "output": {"topic": "out"}, "kafka": {"group_type": "share"}}
    settings = Settings(**(base | {setting: base.get(setting, {}) | value}))  # type: ignore[operator]
    with pytest.raises(ConfigError, match=named) as raised:
        check_run_settings(settings)
    assert "share" in str(raised.value)
    consumer_group = {**base, "kafka": {}} | ({} if setting == "kafka" else {setting: value})
    check_run_settings(Settings(**consumer_group))  # the same with a consumer group is fine


def test_the_acknowledgement_mode_cannot_be_overridden():
    with pytest.raises(ValueError, match=r"share\.acknowledgement\.mode"):
        KafkaSettings(consumer_extra={"share.acknowledgement.mode": "implicit"})
