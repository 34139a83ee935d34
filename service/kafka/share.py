"""The input edge of a share group (KIP-932): several members, each record acknowledged on its own.

A share group hands each record to one member, locked for ``share.record.lock.duration.ms``; the member
ACCEPTs it (done), RELEASEs it (to be delivered again) or REJECTs it, and a lock that runs out releases
it. In explicit acknowledgement mode a member's ``poll`` raises until every record of its last poll is
acknowledged, so one member cannot fetch while its records compute. :class:`ShareSource` runs
``MICROBATCH_KAFKA__SHARE_MEMBERS`` of them, and ``consume`` fetches through the members whose records
are all answered: one fetches while another's records compute.

The parent :class:`service.kafka.source.Source`'s consumer never joins a group here: it answers start-up
(metadata, the brokers' reachability, the causes of a refused connection), and nothing else.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from confluent_kafka import AcknowledgeType, IllegalStateException, KafkaError, KafkaException, ShareConsumer
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, but not declared so
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from service.config import KafkaSettings
from service.errors import EnvironmentNotReadyError, FatalKafkaError, NotAuthorizedError
from service.flow.ports import RebalanceListener
from service.flow.records import Ack, InputRecord, TopicPartition
from service.kafka.hooks import NO_HOOKS, ClientHooks
from service.kafka.source import Source, to_record
from service.observability.logs import client_log

_log = structlog.get_logger("microbatch.source")

_ACK = {
    Ack.ACCEPT: AcknowledgeType.ACCEPT,
    Ack.RELEASE: AcknowledgeType.RELEASE,
    Ack.REJECT: AcknowledgeType.REJECT,
}
_BUSY_WAIT_S = 0.001
"""With every member waiting for its records' answers, how long ``consume`` waits before the loop goes
round again (to serve the producer's acknowledgements, which free a member)."""
_SERVE_EVERY_S = 0.5
"""How often the start-up consumer's callbacks (statistics: the brokers' reachability) are served."""
_COMMIT_TIMEOUT_S = 10.0
_AUTHORIZATION = {KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED}

Key = tuple[str, int, int]


class Member(Protocol):
    """What the service uses of ``confluent_kafka.ShareConsumer``."""

    def subscribe(self, topics: list[str]) -> None: ...

    def poll(self, timeout: float) -> Any: ...

    def acknowledge_offset(
        self, topic: str, partition: int, offset: int, ack_type: AcknowledgeType = ...
    ) -> None: ...

    def commit_async(self) -> None: ...

    def commit_sync(self, timeout: float) -> Any: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ShareGroup:
    """The group's settings the service abides by (from the brokers, at start-up)."""

    delivery_limit: int
    """``share.delivery.count.limit``: the last delivery of a record the group makes."""
    lock_s: float
    """``share.record.lock.duration.ms``, in seconds: how long a member holds a record it acquired."""


def _said(facility: str, _client: str, message: str) -> bool:
    """librdkafka's notice that its share consumer is a preview: the service says so once, itself."""
    return facility == "SHARECONSUMER" and "Preview" in message


class ShareSource(Source):
    """A ``SourceLike`` over a share group, and ``acknowledge`` (``ports.ShareSourceLike``). ``members``:
    how a member is made from its options (``ShareConsumer``; a fake in the unit tests)."""

    def __init__(
        self,
        settings: KafkaSettings,
        hooks: ClientHooks = NO_HOOKS,
        members: Callable[[dict[str, object]], Member] | None = None,
    ) -> None:
        super().__init__(settings, hooks)
        self._settings = settings
        options = settings.share_consumer_config()
        private = settings.private_values()
        make = members or _share_consumer
        self._members = [
            make({**options, "error_cb": self._fatal, "logger": client_log(options, private, _said)})
            for _ in range(settings.share_members)
        ]
        self._held = [0] * len(self._members)  # records each member acquired and has not acknowledged
        self._owner: dict[Key, int] = {}  # each record acquired -> its member
        self._fetched: deque[InputRecord] = deque()  # acquired, not handed to the loop yet
        self._next = 0
        self._paused = False
        self._served = 0.0

    def prepare(self, timeout_s: float) -> ShareGroup:
        """Make the group start where a consumer group would (``AUTO_OFFSET_RESET``: a new share group
        starts at the latest offset otherwise, skipping what is there), and read the limits it keeps.
        The group's ``share.auto.offset.reset`` is set only when it differs, so a group configured
        beforehand needs no ALTER_CONFIGS. Raises NotAuthorizedError naming the ACL the principal lacks,
        EnvironmentNotReadyError when the brokers refuse otherwise. (Brokers with share groups off take
        the group's settings all the same: the first fetch tells, raising the same error.)"""
        admin = AdminClient(self._settings.client_config())
        group, reset = self._settings.group_id, self._settings.auto_offset_reset
        configs = self._group_configs(admin, timeout_s)
        if configs["share.auto.offset.reset"] != reset:
            entry = ConfigEntry("share.auto.offset.reset", reset, incremental_operation=AlterConfigOpType.SET)
            resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
            try:
                admin.incremental_alter_configs([resource], request_timeout=timeout_s)[resource].result()
            except KafkaException as exc:
                raise self._refused(exc, "ALTER_CONFIGS", f"share.auto.offset.reset={reset}") from None
        limit = int(configs["share.delivery.count.limit"])
        lock_s = int(configs["share.record.lock.duration.ms"]) / 1000
        _log.warning(
            "share_group_experimental",
            group=group,
            delivery_limit=limit,
            lock_s=lock_s,
            members=len(self._members),
            note="the client's share consumer is a preview: no order across records, no exactly-once",
        )
        return ShareGroup(limit, lock_s)

    def _group_configs(self, admin: AdminClient, timeout_s: float) -> dict[str, str]:
        resource = ConfigResource(ResourceType.GROUP, self._settings.group_id)
        try:
            described = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result()
        except KafkaException as exc:
            raise self._refused(exc, "DESCRIBE_CONFIGS", "its settings") from None
        return {name: entry.value for name, entry in described.items()}

    def _refused(self, exc: KafkaException, operation: str, what: str) -> EnvironmentNotReadyError:
        err: KafkaError = exc.args[0]
        group = self._settings.group_id
        if err.code() in _AUTHORIZATION:
            verb, hint = "read", f"grant {operation} on group {group!r}"
            if operation == "ALTER_CONFIGS":
                verb, hint = "set", f"{hint}, or set it on the group beforehand"
            return NotAuthorizedError(f"share group {group!r}: not authorised to {verb} {what}: {hint}")
        return self._no_share_groups(f"the brokers refused {what}: {self._redact(err.str())}")

    def _no_share_groups(self, why: str) -> EnvironmentNotReadyError:
        return EnvironmentNotReadyError(
            f"share group {self._settings.group_id!r}: {why}; a share group needs Kafka 4.2+ with share "
            f"groups on (the feature share.version at 1 or more: kafka-features.sh upgrade --feature "
            f"share.version=1), else set {self._settings.env('group_type')}=consumer"
        )

    def subscribe(self, topics: list[str], listener: RebalanceListener) -> None:
        """Every member joins the group on ``topics``. A share group assigns no partitions of this
        replica's own: ``listener`` is not called."""
        for member in self._members:
            member.subscribe(topics)

    def consume(self, max_messages: int, timeout_s: float) -> list[InputRecord]:
        """Up to ``max_messages`` acquired records: those fetched already, else a fetch through a member
        whose records are all answered (waiting up to ``timeout_s``). With none free, waits at most a
        millisecond. Raises FatalKafkaError on a fatal client error."""
        self._fatal.check()
        self._serve()
        if not self._fetched and not self._paused:
            self._fetch(timeout_s)
        fetched = self._fetched
        records = [fetched.popleft() for _ in range(min(max(1, max_messages), len(fetched)))]
        self._access.read(records)
        return records

    def _fetch(self, timeout_s: float) -> None:
        members = len(self._members)
        free = [i % members for i in range(self._next, self._next + members) if self._held[i % members] == 0]
        if not free:
            time.sleep(min(timeout_s, _BUSY_WAIT_S))
            return
        for i in free:  # whichever has records at hand, without waiting
            if self._poll(i, 0.0):
                return
        self._poll(free[0], timeout_s)

    def _poll(self, i: int, timeout_s: float) -> int:
        self._next = (i + 1) % len(self._members)
        try:
            messages = self._members[i].poll(timeout_s)
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.code() == KafkaError.UNSUPPORTED_VERSION:  # ShareGroupHeartbeat: share groups are off
                raise self._no_share_groups("the brokers do not serve share groups") from None
            if err.fatal():
                raise FatalKafkaError("consumer", err.code(), err.name(), self._redact(err.str())) from None
            _log.warning("share_poll_failed", error=self._redact(err.str()))
            return 0
        now = time.monotonic()
        got = 0
        for msg in messages:
            err = msg.error()
            if err is not None:
                self._on_message_error(msg, err)
                continue
            record = to_record(msg, now, msg.delivery_count())
            self._owner[(record.topic, record.partition, record.offset)] = i
            self._fetched.append(record)
            got += 1
        self._held[i] += got
        return got

    def _serve(self) -> None:
        """Serve the start-up consumer's callbacks now and then (statistics: the brokers' reachability)."""
        now = time.monotonic()
        if now - self._served >= _SERVE_EVERY_S:
            self._served = now
            self._consumer.poll(0)

    def acknowledge(self, records: Sequence[InputRecord], ack: Ack) -> int:
        """Answer each of ``records`` with ``ack``; a member whose records are all answered sends its
        acknowledgements at once (and may fetch again). Returns how many were still held (a record whose
        lock ran out, or acknowledged already, is not: its lock is gone, the group delivers it again)."""
        done = 0
        freed = set()
        for record in records:
            i = self._owner.pop((record.topic, record.partition, record.offset), None)
            if i is None:
                continue
            self._held[i] -= 1
            if not self._held[i]:
                freed.add(i)
            try:
                self._members[i].acknowledge_offset(record.topic, record.partition, record.offset, _ACK[ack])
            except (IllegalStateException, KafkaException) as exc:
                _log.warning(
                    "share_acknowledge_failed",
                    partition=f"{record.topic}[{record.partition}]",
                    offset=record.offset,
                    ack=str(ack),
                    error=self._redact(str(exc)),
                )
                continue
            done += 1
        for i in freed:
            self._members[i].commit_async()
        return done

    def held(self) -> int:
        """Records acquired and not acknowledged."""
        return len(self._owner)

    def lag(self) -> dict[TopicPartition, int]:
        """A share group has no position of this replica's own: nothing to report per partition."""
        return {}

    def store(self, offsets: dict[TopicPartition, int]) -> None:
        """A share group stores no offsets (``acknowledge`` answers each record)."""

    def commit(self) -> bool:
        """Send every member's acknowledgements and wait for the brokers. False when one failed (logged):
        its records are delivered again once their locks run out."""
        ok = True
        for member in self._members:
            try:
                results = member.commit_sync(_COMMIT_TIMEOUT_S) or {}
            except KafkaException as exc:
                _log.warning("share_commit_failed", error=self._redact(str(exc)))
                ok = False
                continue
            for part, error in results.items():
                if error is not None:
                    _log.warning(
                        "share_commit_failed", partition=f"{part.topic}[{part.partition}]", error=str(error)
                    )
                    ok = False
        return ok

    def pause(self) -> None:
        """Fetch nothing more (back-pressure); the members stay in the group."""
        self._paused = True

    def resume(self, tps: list[TopicPartition] | None = None) -> None:
        self._paused = False

    def rewind(self, offsets: dict[TopicPartition, int]) -> None:
        """Never called: a share group runs at-least-once (exactly-once is refused at start-up)."""
        raise NotImplementedError("a share group has no offsets to rewind")

    def close(self) -> None:
        """Release what is held and not answered (the group hands it to another member at once, rather
        than when its lock runs out), send the acknowledgements, leave the group."""
        held = [(topic, partition, offset) for topic, partition, offset in self._owner]
        if held:
            _log.info("share_releasing", records=len(held))
        self.acknowledge([_coordinates(*key) for key in held], Ack.RELEASE)
        for member in self._members:
            try:
                member.close()
            except KafkaException as exc:
                _log.warning("share_close_failed", error=self._redact(str(exc)))
        super().close()


def _share_consumer(options: dict[str, object]) -> Member:
    return ShareConsumer(options)


def _coordinates(topic: str, partition: int, offset: int) -> InputRecord:
    return InputRecord(topic, partition, offset, None, None, None, None, 0.0)
