"""A rolling restart of three instances under a steady stream, group protocol by group protocol: what it
costs in duplicates and in the longest pause of any input partition. Not a test.

    .venv/bin/python bench/rolling_restart.py [--rounds 3] [--rate 300] [VARIANT ...]

Variants: ``classic`` (cooperative-sticky, a new member at every start), ``static`` (classic with
``GROUP_INSTANCE_ID``), ``consumer`` (the KIP-848 protocol), ``consumer-static``, and any of them with
``+eos`` (exactly-once). Each instance is stopped with SIGTERM and started again under the same names (a
StatefulSet's rollout: its pod name is its instance id), one after the other once the replacement
answers. The pause of a partition is the longest gap between the production times of consecutive results
of its inputs while the stream runs (at ``--rate`` over six partitions, 20 ms apart normally);
duplicates are inputs answered more than once (``microbatch verify``). Prints every round's figures and
the medians. Needs the local broker (``make kafka-up``).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

import msgspec
from confluent_kafka import Producer

from service.config import KafkaSettings
from service.tools.generate import EventGenerator
from service.tools.processes import Child, settings_env, start
from service.tools.reader import read_to_end
from service.tools.topics import TopicAdmin, Watermarks
from service.tools.verify import verify

PARTITIONS = 6
INSTANCES = 3
LOGS = Path(".local/bench/rolling")
_QUIET = {"log__format": "json", "model__intra_op_threads": "1", "metrics__port": "0"}


class _Source(msgspec.Struct):
    partition: int
    offset: int


class _Result(msgspec.Struct):
    source: _Source


def settings_of(variant: str) -> dict[str, str]:
    """The settings a variant adds to every instance (its names come per instance)."""
    protocol, _, eos = variant.partition("+")
    group = {"kafka__group_protocol": "consumer" if protocol.startswith("consumer") else "classic"}
    return group | ({"delivery__guarantee": "exactly-once"} if eos == "eos" else {})


def _static(variant: str) -> bool:
    return variant.partition("+")[0].endswith("static")


class Stream:
    """Metrics events at ``rate``/s into ``topic`` from a thread, until :meth:`stop`."""

    def __init__(self, bootstrap: str, topic: str, rate: float) -> None:
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self._topic, self._rate = topic, rate
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        generator = EventGenerator(7)
        start, sent = time.monotonic(), 0
        while not self._stopping.is_set():
            due = start + sent / self._rate - time.monotonic()
            if due > 0:
                time.sleep(due)
            event = generator.metrics(1)[0]
            self._producer.produce(self._topic, msgspec.json.encode(event), str(event["host"]).encode())
            self._producer.poll(0)
            sent += 1

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(10)
        self._producer.flush(30)


def one_round(bootstrap: str, variant: str, rate: float, settle_s: float) -> dict[str, float]:
    name = f"bench.rolling.{uuid.uuid4().hex[:8]}"
    topics = {"in": f"{name}.in", "out": f"{name}.out", "dlq": f"{name}.dlq"}
    admin = TopicAdmin({"bootstrap.servers": bootstrap})
    admin.create(list(topics.values()), PARTITIONS)
    common = {
        "kafka__bootstrap_servers": bootstrap,
        "kafka__group_id": name,
        "input__topics": topics["in"],
        "output__topic": topics["out"],
        "dlq__topic": topics["dlq"],
        "model__name": "metrics-anomaly",
    } | settings_of(variant)

    def launch(index: int) -> Child:
        names = {"kafka__instance_id": f"r{index}"}
        if _static(variant):
            names["kafka__group_instance_id"] = f"r{index}"
        env = settings_env(_QUIET | common | names)
        return start(("service", "run"), env, LOGS / name / f"r{index}-{uuid.uuid4().hex[:6]}.log")

    counter = Watermarks({"bootstrap.servers": bootstrap})
    stream = Stream(bootstrap, topics["in"], rate)
    instances = [launch(i) for i in range(INSTANCES)]
    try:
        _wait(lambda: all(c.events("partitions_assigned") for c in instances), 90, "every instance joined")
        time.sleep(settle_s)
        began = time.time()
        for index in range(INSTANCES):
            code = instances[index].stop()
            if code != 0:
                raise RuntimeError(f"instance {index} exited {code}: {instances[index].log_path}")
            instances[index] = launch(index)
            _wait(lambda c=instances[index]: c.events("partitions_assigned"), 90, f"instance {index} back")
            time.sleep(settle_s)
        ended = time.time()
        stream.stop()
        _wait(
            lambda: counter.count(topics["out"], PARTITIONS) >= counter.count(topics["in"], PARTITIONS),
            90,
            "every input answered",
        )
    finally:
        stream.stop()
        codes = [c.stop() for c in instances]
        counter.close()
    report = verify({"bootstrap.servers": bootstrap}, topics["in"], topics["out"], topics["dlq"])
    pauses = _pauses(bootstrap, topics["out"], began * 1000, ended * 1000)
    admin.delete(list(topics.values()))
    admin.delete_group(name)
    return {
        "inputs": report.total("inputs"),
        "lost": report.total("lost"),
        "duplicates": report.total("duplicates"),
        "longest_pause_s": round(max(pauses.values()) / 1000, 2),
        "exits_nonzero": sum(1 for c in codes if c != 0),
    }


def _pauses(bootstrap: str, topic: str, since_ms: float, until_ms: float) -> dict[int, float]:
    """Per input partition, the longest gap (ms) between the production times of consecutive results
    produced during the restarts."""
    decoder = msgspec.json.Decoder(_Result)
    times: dict[int, list[int]] = defaultdict(list)
    for record in read_to_end({"bootstrap.servers": bootstrap}, topic, timeout_s=120):
        stamp = record.timestamp_ms or 0
        if since_ms <= stamp <= until_ms:
            times[decoder.decode(record.value or b"{}").source.partition].append(stamp)
    return {
        p: max((b - a for a, b in zip(sorted(ts), sorted(ts)[1:], strict=False)), default=0)
        for p, ts in times.items()
    }


def _wait(done, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench/rolling_restart.py", description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=KafkaSettings().bootstrap_servers)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=300.0, help="events/s of the stream (300)")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds between restarts (5)")
    parser.add_argument("variants", nargs="*", default=["classic", "static", "consumer", "consumer-static"])
    args = parser.parse_args()
    figures: dict[str, list[dict[str, float]]] = {v: [] for v in args.variants}
    for round_ in range(args.rounds):
        for variant in args.variants:
            result = one_round(args.bootstrap, variant, args.rate, args.settle)
            figures[variant].append(result)
            print(f"round {round_ + 1} {variant}: {result}", flush=True)
    for variant, runs in figures.items():
        dup = statistics.median(r["duplicates"] for r in runs)
        pause = statistics.median(r["longest_pause_s"] for r in runs)
        lost = sum(r["lost"] for r in runs)
        print(
            f"{variant}: duplicates {dup:g}, longest pause {pause:g} s (medians of {len(runs)}), lost {lost}"
        )


if __name__ == "__main__":
    main()
