"""Broker faults on a three-node cluster (replication factor 3, min.insync.replicas 2) against the real
service process: a rolling restart of all three nodes, the leader of input and output partitions
SIGKILLed mid-stream and brought back, and that leader frozen for 30 s.

Everything runs on the ``kafka_cluster`` fixture (its own ports, topic auto-creation OFF), never on the
session broker. The cluster places the topics' partitions; the node a kill or a freeze strikes leads an
input partition and an output partition both, so one fault takes a leader away on each side. Each test
ends with every node back in every ISR, and with :func:`service.tools.verify.verify` over the real
topics: nothing lost, the duplicates printed (``-s``) and held to the bound of :func:`_bound`.

The service runs with its default session timeout (45 s), not the single-broker tests' 6 s: losing a
node must not cost the consumer its group. With 6 s it lost its partitions at every kill and freeze, its
coordinator (on a live node) having answered no heartbeat until the controller fenced the lost node, 9 s
on.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import KafkaException

from service.errors import StalledError
from service.tools.processes import Child
from service.tools.topics import TopicAdmin
from service.tools.verify import verify
from tests.support.broker import Cluster, FaultBroker, MakeTopic
from tests.support.fleet import log_time_ms
from tests.support.harness import metrics_events, wait_for
from tests.support.streams import (
    LogWatch,
    Probe,
    StreamProducer,
    alive,
    check_report,
    hold,
    start_streamed,
    stop_service,
    stream_topics,
    tail,
)
from tests.support.supervise import Supervised

T = TypeVar("T")

RATE = 100  # events/s of the input stream, throughout each test
MAX_EVENTS = 20_000  # cap on the stream (200 s at RATE); in practice a few thousand are produced
AHEAD = 10  # per partition: a fault is over once the commits pass this many inputs beyond its end then
FIRST_COMMITS = 100  # inputs committed before the first fault: the service is up and flowing
FREEZE_S = 30.0
SESSION_TIMEOUT_MS = 45_000  # the service's default
# Per fault, beside what was uncommitted when it struck and what arrived until the commits had passed
# it: the 1 s auto-commit interval, one batch window and scheduling on a busy machine.
SLACK_S = 5.0

# Bounded waits (generous: a loaded 2-core CI machine).
ANSWER_TIMEOUT_S = 30
RECOVERY_TIMEOUT_S = 90
HEAL_TIMEOUT_S = 90
DRAIN_TIMEOUT_S = 120


# -- helpers -------------------------------------------------------------------------------------------


def _fresh(bootstrap: str, group: str, read: Callable[[Probe], T]) -> T | None:
    """``read`` through a probe of its own, or None if the cluster did not answer. A long-lived client
    may go on asking a node that is gone or frozen (its metadata or its coordinator are stale); a new
    one asks whoever answers."""
    probe = Probe(bootstrap, group)
    try:
        return read(probe)
    except KafkaException:
        return None
    finally:
        probe.close()


def _answer(read: Callable[[], T | None], what: str) -> T:
    """``read()`` until it answers (not None), bounded."""
    answer: list[T] = []

    def ask() -> bool:
        value = read()
        if value is not None:
            answer.append(value)
        return value is not None

    wait_for(ask, ANSWER_TIMEOUT_S, what)
    return answer[0]


def _coordinator(bootstrap: str, group: str) -> int | None:
    """The node of ``group``'s coordinator, asked by a fresh client; None if none answered."""
    client = TopicAdmin({"bootstrap.servers": bootstrap}).client
    try:
        described = client.describe_consumer_groups([group], request_timeout=5)[group].result(timeout=10)
    except KafkaException:
        return None
    return described.coordinator.id


class Watch:
    """Polls ``done`` from a thread of its own (so that a fault can be held for its set time meanwhile)
    and records when it first came true."""

    def __init__(self, done: Callable[[], object], name: str) -> None:
        self._done = done
        self._start = time.monotonic()
        self._stop = threading.Event()
        self.after_s: float | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._done():
                self.after_s = round(time.monotonic() - self._start, 1)
                return
            self._stop.wait(0.2)

    def wait(self, service: Child, timeout_s: float, what: str) -> float:
        """Seconds from the start of the watch until ``done``. Raises AssertionError after ``timeout_s``,
        or if the service died meanwhile."""
        try:
            wait_for(lambda: alive(service) and self.after_s is not None, timeout_s, what)
        finally:
            self.cancel()
        assert self.after_s is not None
        return self.after_s

    def cancel(self) -> None:
        self._stop.set()
        self._thread.join(15)


@dataclass
class Fault:
    """One fault on one node, and what it cost (seconds from the fault unless said otherwise)."""

    node: int
    coordinator: bool  # the node was the service group's coordinator
    led: list[int]  # the input partitions it led
    uncommitted_at_fault: int
    at: float = field(repr=False)  # time.monotonic() of the fault
    caught_up: Watch = field(repr=False)
    """The commits have passed AHEAD inputs beyond the input's end at the fault on every partition:
    inputs that came after the fault were answered and committed."""
    moved: Watch = field(repr=False)  # metadata shows other leaders for the partitions in ``led``
    act_s: float = 0.0  # the fault itself: 0 for SIGKILL and SIGSTOP, the controlled shutdown for SIGTERM
    leaders_moved_after_s: float | None = None
    back_after_s: float | None = None  # until the node was running again (started and ready, or thawed)
    caught_up_after_s: float = 0.0
    healed_after_s: float = 0.0  # from the node's return until it was back in every ISR

    def figures(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.repr}
        return {name: value for name, value in values.items() if value is not None}


@dataclass
class Run:
    """One service process on a stream into the cluster: what a fault acts on and measures."""

    cluster: Cluster
    service: Child
    group: str
    topics: dict[str, str]

    def victim(self) -> int:
        """The leader of the lowest input partition whose leader also leads an output partition."""
        inputs = _answer(lambda: self.cluster.leaders(self.topics["in"]), "the input's leaders")
        outputs = _answer(lambda: self.cluster.leaders(self.topics["out"]), "the output's leaders")
        both = [node for _, node in sorted(inputs.items()) if node in outputs.values()]
        assert both, f"no node leads both an input and an output partition: {inputs}, {outputs}"
        return both[0]

    def strike(self, node: int, act: Callable[[FaultBroker], None], hold_s: float = 0.0) -> Fault:
        """Apply ``act`` to ``node``, and keep it so until ``hold_s`` after the fault."""
        bootstrap, group, topic = self.cluster.bootstrap, self.group, self.topics["in"]
        ends = _answer(lambda: _fresh(bootstrap, group, lambda probe: probe.ends(topic)), "the input's ends")
        commits = _answer(
            lambda: _fresh(bootstrap, group, lambda probe: probe.committed(topic)), "the commits"
        )
        coordinator = _answer(lambda: _coordinator(bootstrap, group), "the group's coordinator")
        leaders = _answer(lambda: self.cluster.leaders(topic), "the input's leaders")
        led = [p for p, leader in leaders.items() if leader == node]
        marks = {p: end + AHEAD for p, end in ends.items()}

        def caught_up() -> bool:
            commits = _fresh(bootstrap, group, lambda probe: probe.committed(topic))
            return commits is not None and all(commits[p] >= mark for p, mark in marks.items())

        def moved() -> bool:
            leaders = self.cluster.leaders(topic)
            return leaders is not None and all(leaders[p] not in (node, -1) for p in led)

        fault = Fault(
            node,
            coordinator == node,
            led,
            sum(end - max(commits[p], 0) for p, end in ends.items()),
            time.monotonic(),
            Watch(caught_up, "caught-up"),
            Watch(moved, "leaders-moved"),
        )
        act(self.cluster.nodes[node])
        fault.act_s = round(time.monotonic() - fault.at, 1)
        hold(hold_s - (time.monotonic() - fault.at), self.service)
        return fault

    def moved(self, fault: Fault) -> float:
        """Wait until other nodes lead the partitions the struck node led; return the seconds it took."""
        what = f"other leaders for input partitions {fault.led} of node {fault.node}"
        fault.leaders_moved_after_s = fault.moved.wait(self.service, RECOVERY_TIMEOUT_S, what)
        return fault.leaders_moved_after_s

    def caught_up(self, fault: Fault) -> None:
        what = f"the commits past the fault on node {fault.node}"
        fault.caught_up_after_s = fault.caught_up.wait(self.service, RECOVERY_TIMEOUT_S, what)

    def back(self, fault: Fault, *, start: bool) -> None:
        """Start the node again if ``start`` (else it was just thawed); wait until it is back in every
        ISR."""
        if start:
            self.cluster.nodes[fault.node].start()
        fault.back_after_s = round(time.monotonic() - fault.at, 1)
        fault.healed_after_s = round(self.cluster.wait_healed(HEAL_TIMEOUT_S), 1)


def _bound(faults: list[Fault]) -> int:
    """Duplicates allowed: per fault, what was not committed when it struck, plus the stream until the
    commits had passed it, plus SLACK_S of stream. Only inputs consumed but not committed when the
    service lost a partition, or whose results were re-sent after a leader change, can come twice."""
    return int(sum(f.uncommitted_at_fault + RATE * (f.caught_up_after_s + SLACK_S) for f in faults))


def _scenario(
    tmp_path: Path,
    cluster: Cluster,
    topic_factory: MakeTopic,
    group: str,
    seed: int,
    faults: Callable[[Run], list[Fault]],
    bound: Callable[[list[Fault]], int] = _bound,
    restart_on: frozenset[int] = frozenset(),
    **settings: str,
) -> Supervised:
    """A service (with ``settings``, restarted when it exits with a code in ``restart_on``) on a stream of
    RATE events/s; ``faults`` once it commits; then the stream stops and everything must be answered:
    nothing lost, duplicates within ``bound``. Returns the service, stopped."""
    cluster.wait_healed(HEAL_TIMEOUT_S)
    topics = stream_topics(topic_factory)
    bootstrap = cluster.bootstrap
    stream = StreamProducer(bootstrap, topics["in"], metrics_events(MAX_EVENTS, seed=seed), RATE)
    service = Supervised(
        start_streamed(
            tmp_path, bootstrap, group, topics, kafka__session_timeout_ms=str(SESSION_TIMEOUT_MS), **settings
        ),
        restart_on,
    )
    logs = LogWatch(service)
    t0 = time.monotonic()
    healed = False
    try:
        wait_for(
            lambda: (
                alive(service)
                and (_fresh(bootstrap, group, lambda probe: probe.committed_total(topics["in"])) or 0)
                >= FIRST_COMMITS
            ),
            RECOVERY_TIMEOUT_S,
            "first commits",
        )
        first_commits_s = time.monotonic() - t0
        try:
            measured = faults(Run(cluster, service, group, topics))
        except AssertionError as exc:  # with what the service said last, and whether it still runs
            state = "running" if service.proc.poll() is None else f"exited {service.proc.returncode}"
            raise AssertionError(f"{exc}\nthe service: {state}\n{tail(service, 60)}") from None
        healed = True  # each fault ends with the struck node back in every ISR
        produced = stream.finish()
        wait_for(
            lambda: alive(service) and _fresh(bootstrap, group, lambda probe: probe.drained(topics["in"])),
            DRAIN_TIMEOUT_S,
            "all committed",
        )
    finally:
        stream.cancel()
        if not healed:
            cluster.restore()  # never leave a node frozen or down for the next test
        code = stop_service(service)
    assert code == 0, tail(service)
    assert len(logs.events("started")) == 1 + len(service.exits), "the service started more than once"
    report = verify({"bootstrap.servers": bootstrap}, topics["in"], topics["out"], topics["dlq"])
    print(
        f"\nproduced={produced} first_commits_after_s={first_commits_s:.1f} "
        f"stream_s={time.monotonic() - t0:.1f} faults={[f.figures() for f in measured]} "
        f"partitions_lost={len(logs.events('partitions_lost'))} "
        f"partitions_revoked={len(logs.events('partitions_revoked'))} "
        f"delivery_failed={len(logs.events('delivery_failed'))} "
        f"transactions_aborted={len(logs.events('transaction_aborted'))} "
        f"restarted_after={service.exits} bound={bound(measured)}"
    )
    # The test's own producer is not idempotent: a retry across a leader change may write an input twice.
    assert report.total("inputs") >= produced
    check_report(report, bound(measured))
    return service


# -- the faults ----------------------------------------------------------------------------------------


@pytest.mark.timeout(360)
def test_rolling_restart_of_all_three_nodes(tmp_path, kafka_cluster, cluster_topic_factory, group_id):
    """Stop each node in turn with SIGTERM (a controlled shutdown: its leaderships move first), start it
    again and wait until it is back in every ISR before the next. With one node away every ISR is 2,
    still min.insync.replicas: acks=all writes go on, and the commits pass each stop meanwhile."""

    def rolling(run: Run) -> list[Fault]:
        faults = []
        for node in sorted(run.cluster.nodes):
            fault = run.strike(node, FaultBroker.stop)
            run.back(fault, start=True)
            run.caught_up(fault)
            fault.moved.cancel()  # controlled: the leaderships had moved before the node stopped
            assert fault.back_after_s is not None and fault.caught_up_after_s < fault.back_after_s, (
                f"the commits passed the stop of node {node} only once it was back: {fault.figures()}"
            )
            faults.append(fault)
        return faults

    _scenario(tmp_path, kafka_cluster, cluster_topic_factory, group_id, 52, rolling)


@pytest.mark.timeout(300)
def test_leader_sigkilled_mid_stream_then_back(tmp_path, kafka_cluster, cluster_topic_factory, group_id):
    """SIGKILL a node leading an input and an output partition. Once the controller fences it (its 9 s
    broker session), its partitions get new leaders from the ISR, and only then is it started again,
    from its data, to rejoin every ISR."""

    def kill_and_back(run: Run) -> list[Fault]:
        fault = run.strike(run.victim(), FaultBroker.kill)
        run.moved(fault)
        run.back(fault, start=True)
        run.caught_up(fault)
        return [fault]

    _scenario(tmp_path, kafka_cluster, cluster_topic_factory, group_id, 51, kill_and_back)


@pytest.mark.timeout(300)
def test_leader_frozen_30s_mid_stream(tmp_path, kafka_cluster, cluster_topic_factory, group_id):
    """SIGSTOP a node leading an input and an output partition for FREEZE_S, then SIGCONT. The controller
    fences it and its partitions get new leaders while it is frozen; thawed, it rejoins as a follower and
    is back in every ISR."""

    def freeze(run: Run) -> list[Fault]:
        fault = run.strike(run.victim(), FaultBroker.freeze, hold_s=FREEZE_S)
        run.cluster.nodes[fault.node].thaw()
        run.back(fault, start=False)
        assert run.moved(fault) < FREEZE_S, "the leaderships moved only after the thaw"
        run.caught_up(fault)
        return [fault]

    _scenario(tmp_path, kafka_cluster, cluster_topic_factory, group_id, 53, freeze)


_NAMED_COORDINATOR = re.compile(r"TxnCoordinator/(\d+)")


def _transaction_coordinator(cluster: Cluster, transactional_id: str) -> int | None:
    """The node coordinating ``transactional_id``: the leader of its partition of the transaction state
    log, which the broker picks as ``Utils.abs(transactionalId.hashCode) % partitions``."""
    leaders = cluster.leaders("__transaction_state")
    if not leaders:
        return None
    code = _java_hash(transactional_id)
    leader = leaders[(0 if code == -(2**31) else abs(code)) % len(leaders)]  # Kafka's Utils.abs
    return leader if leader >= 0 else None


def _java_hash(text: str) -> int:
    """Java's ``String.hashCode``: a signed 32-bit int over the UTF-16 code units."""
    units = text.encode("utf-16-be")
    code = 0
    for i in range(0, len(units), 2):
        code = (31 * code + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return code - (1 << 32) if code >= 1 << 31 else code


@pytest.mark.timeout(360)
def test_exactly_once_with_the_transaction_coordinator_sigkilled_mid_stream(
    tmp_path, kafka_cluster, cluster_topic_factory, group_id
):
    """Exactly-once: SIGKILL the node coordinating the service's transactions. Its transaction state
    partition moves to another node (RF 3, min ISR 2), which completes or aborts what was in flight;
    every input is answered, none twice. The client's own debug lines confirm which node coordinated.

    librdkafka 2.16 sometimes never returns from ``send_offsets_to_transaction`` after such a kill
    (confluentinc/librdkafka#5456, #5511): the service then exits 6 once the call is ``GRACE_S`` past
    its timeout. An abort that meets the coordinator just moved can be refused for good
    (INVALID_TXN_STATE): exit 6 too. Either way it is restarted here as the kubelet would, under the same
    instance id and static member id, which ends the transaction it left open. Any other exit fails the
    test."""
    struck: list[int] = []

    def kill_the_coordinator(run: Run) -> list[Fault]:
        node = _answer(
            lambda: _transaction_coordinator(run.cluster, f"{run.group}.eos"), "the transaction coordinator"
        )
        struck.append(node)
        struck.append(time.time_ns() // 1_000_000)
        fault = run.strike(node, FaultBroker.kill)
        run.moved(fault)
        run.back(fault, start=True)
        run.caught_up(fault)
        return [fault]

    service = _scenario(
        tmp_path,
        kafka_cluster,
        cluster_topic_factory,
        group_id,
        53,
        kill_the_coordinator,
        lambda _faults: 0,
        frozenset({StalledError.exit_code}),
        delivery__guarantee="exactly-once",
        kafka__instance_id="eos",
        kafka__group_instance_id="eos",
        output__flush_timeout_s="10",  # the transactional calls' timeout: a stall shows 10 s + GRACE_S on
        kafka__extra='{"debug": "eos"}',
        log__level="debug",
    )
    # The struck node was the coordinator the client was talking to: the last one its debug lines name
    # before the kill (they are sampled, and a process that stalls may not say it went down).
    node, at_ms = struck
    named = [
        int(match.group(1))
        for event in service.log_lines()
        if log_time_ms(event) < at_ms and (match := _NAMED_COORDINATOR.search(event.get("event", "")))
    ]
    assert named and named[-1] == node, f"node {node} was not the transaction coordinator: {named[-5:]}"
    # Each exit said why, in one line: a stalled call, or a transaction only a restart could end.
    said = [line for line in service.log().splitlines() if line.startswith("microbatch: ")]
    assert len(said) == len(service.exits), (said, service.exits)
