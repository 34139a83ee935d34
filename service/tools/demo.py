"""``microbatch demo``: the three reference models, real broker, generated traffic, then a summary.

``metrics-anomaly`` and ``log-classifier`` get generated JSON events; ``host-anomaly`` gets host metrics as
collectd writes them, assembled into rows (``demo_hosts``: generated hosts, and this machine when collectd
is installed). It creates its own topics, runs one service process per model, warms each up (a few events
sent through the producer the traffic will use, until the service has answered them: the group join, the
consumer's first offset lookups and the producer's own set-up are start-up, not latency), then warms the
broker up (traffic at the demo's rate until the round trip settles: a freshly started broker serves its first
seconds slowly), produces the timed traffic (with a little poison), waits until every input has an output,
stops the services with SIGTERM, reads the output topics back and prints what happened. The latency of the
timed traffic is reported twice (``demo_latency``): the service's own share, and end to end through the
broker. It leaves no process running and, unless asked, no topics behind.
"""

from __future__ import annotations

import argparse
import math
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from service.config import Settings
from service.errors import EXIT_OK, BrokerUnavailableError
from service.tools import demo_hosts, demo_latency
from service.tools.demo_latency import Settle, Timing, WarmUp
from service.tools.processes import Child, start_service
from service.tools.produce import Deliveries, EventProducer, ProduceReport
from service.tools.reader import Tail, read_to_end
from service.tools.topics import TopicAdmin, Watermarks
from service.tools.verify import VerifyReport, verify

MODELS = {"metrics-anomaly": "metrics", "log-classifier": "logs"}
WARM_UP_EVENTS = 20
_DEMO_MAX_VALUE_BYTES = 65_536
_ASSIGNED_TIMEOUT_S = 60.0
_ANSWER_TIMEOUT_S = 60.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of traffic")
    parser.add_argument("--rate", type=float, default=300.0, help="events per second per model")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--poison-ratio", type=float, default=0.01)
    parser.add_argument(
        "--warm-up",
        type=float,
        default=30.0,
        help="at most this many seconds of traffic to warm the broker up before the timed traffic (0: none)",
    )
    parser.add_argument("--keep-topics", action="store_true", help="do not delete the demo topics afterwards")


@dataclass
class ModelRun:
    """One model's topics, process and what came out of it."""

    model: str
    kind: str
    topics: dict[str, str]
    producer: EventProducer
    child: Child | None = None
    report: ProduceReport = field(default_factory=ProduceReport)
    warm_up_sent: int = 0
    traffic_from_ms: int = 0
    results: list[dict[str, Any]] = field(default_factory=list)
    timings: list[Timing] = field(default_factory=list)
    dead: Counter[str] = field(default_factory=Counter)
    verdict: VerifyReport | None = None
    exit_code: int | None = None


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Exit 0 when every input got a result or a dead letter and both services stopped cleanly, else 1."""
    client_conf = settings.kafka.client_config()
    admin = TopicAdmin(client_conf)
    try:
        admin.check()
    except BrokerUnavailableError as exc:
        print(f"microbatch: {exc}", file=sys.stderr)
        return 1  # what the demo has always exited with when no broker answers
    run_id = uuid.uuid4().hex[:8]
    log_dir = Path(".local/demo")
    runs = [
        ModelRun(
            model,
            kind,
            {r: f"demo.{kind}.{r}.{run_id}" for r in ("in", "results", "dlq")},
            EventProducer(settings.kafka.producer_config()),
        )
        for model, kind in MODELS.items()
    ]
    hosts = ModelRun(
        demo_hosts.MODEL,
        "hosts",
        {r: f"demo.hosts.{r}.{run_id}" for r in ("in", "results", "dlq")},
        EventProducer(settings.kafka.producer_config()),
    )
    all_topics = [t for r in (*runs, hosts) for t in r.topics.values()]
    bootstrap = settings.kafka.bootstrap_servers
    print(
        f"demo {run_id}: {args.duration:.0f}s at {args.rate:.0f} events/s per model, and host metrics "
        f"every {demo_hosts.INTERVAL_S:.0f} s; broker {bootstrap}"
    )
    traffic: demo_hosts.HostTraffic | None = None
    warmed: WarmUp | None = None
    deliveries = Deliveries(settings.kafka.producer_config() | {"linger.ms": 5, "enable.idempotence": True})
    tail: Tail | None = None
    try:
        admin.create(all_topics, args.partitions)
        tail = Tail(client_conf, [r.topics["results"] for r in runs])
        tail.start()
        for model_run in runs:
            model_run.child = _start(model_run, settings, run_id, log_dir)
        hosts.child = _start(hosts, settings, run_id, log_dir, **demo_hosts.SETTINGS)
        for model_run in runs:
            _warm_up(model_run, settings, args.partitions)
        _warm_up_hosts(hosts, deliveries, settings, args.partitions)
        if args.warm_up > 0:
            warmed = _warm_up_broker(runs, tail, args)
        thread, live = demo_hosts.run_live(deliveries, hosts.topics["in"], args.duration, log_dir, bootstrap)
        _produce_all(runs, args)
        thread.join()
        if "error" in live:
            raise live["error"]  # type: ignore[misc]
        traffic = live["traffic"]  # type: ignore[assignment]
        _wait_for_outputs(runs, client_conf)
        _read_back(runs, tail)
        assert traffic is not None
        demo_hosts.wait_for_rows(client_conf, hosts.topics, traffic, _ANSWER_TIMEOUT_S, hosts.child.alive)
    finally:
        if tail is not None:
            tail.stop()
        for model_run in (*runs, hosts):
            model_run.exit_code = model_run.child.stop() if model_run.child else None
        if not args.keep_topics:
            admin.delete(all_topics)
    ok = _report(runs, hosts, traffic, warmed, args)
    print("demo finished: " + ("every input has a result or a dead letter" if ok else "PROBLEMS, see above"))
    return EXIT_OK if ok else 1


def _report(
    runs: list[ModelRun],
    hosts: ModelRun,
    traffic: demo_hosts.HostTraffic | None,
    warmed: WarmUp | None,
    args: argparse.Namespace,
) -> bool:
    """Print the summary; True when every input has an answer and every service stopped cleanly."""
    for line in _legend(warmed, args):
        print(line)
    for model_run in runs:
        _print_summary(model_run)
    print(
        f"\n== {hosts.model} (host rows from collectd's messages)  service exit code {hosts.exit_code}  "
        f"log {hosts.child.log_path if hosts.child else '?'}"
    )
    for line in demo_hosts.summary(traffic) if traffic else []:
        print(line)
    hosts_ok = bool(
        traffic and traffic.check and traffic.check.ok and not traffic.dead and hosts.exit_code == 0
    )
    return hosts_ok and all(r.exit_code == 0 and r.verdict is not None and r.verdict.ok for r in runs)


def _start(model_run: ModelRun, settings: Settings, run_id: str, log_dir: Path, **extra: Any) -> Child:
    return start_service(
        log_dir,
        inherit=True,  # the caller's own MICROBATCH_* settings reach the services too
        name=f"{model_run.model}.{run_id}",
        kafka__bootstrap_servers=settings.kafka.bootstrap_servers,
        kafka__group_id=f"demo-{model_run.model}-{run_id}",
        input__topics=model_run.topics["in"],
        input__max_value_bytes=_DEMO_MAX_VALUE_BYTES,
        output__topic=model_run.topics["results"],
        dlq__topic=model_run.topics["dlq"],
        model__name=model_run.model,
        log__stats_interval_s=5,
        **extra,
    )


def _warm_up(model_run: ModelRun, settings: Settings, partitions: int) -> None:
    """Until the service owns its partitions and has answered a few events sent through the producer the
    traffic will use. Raises RuntimeError if it exits or does not get there in time."""
    child = model_run.child
    if child is None:
        raise RuntimeError(f"the {model_run.model} service was not started")
    _wait(lambda: bool(child.events("partitions_assigned")), child, _ASSIGNED_TIMEOUT_S, "got no partitions")
    model_run.producer.send(model_run.topics["in"], model_run.kind, WARM_UP_EVENTS, seed=0)
    watermarks = Watermarks(settings.kafka.client_config())
    topics = model_run.topics

    def answered() -> bool:
        outputs = watermarks.count(topics["results"], partitions) + watermarks.count(
            topics["dlq"], partitions
        )
        return outputs >= WARM_UP_EVENTS

    try:
        _wait(answered, child, _ANSWER_TIMEOUT_S, "did not answer its warm-up events")
    finally:
        watermarks.close()


def _warm_up_hosts(hosts: ModelRun, deliveries: Deliveries, settings: Settings, partitions: int) -> None:
    """Until the host service owns its partitions and has answered a row of the warm-up host."""
    child = hosts.child
    if child is None:
        raise RuntimeError("the host-anomaly service was not started")
    _wait(lambda: bool(child.events("partitions_assigned")), child, _ASSIGNED_TIMEOUT_S, "got no partitions")
    demo_hosts.warm_up(deliveries, hosts.topics["in"])
    watermarks = Watermarks(settings.kafka.client_config())
    try:
        answered = lambda: watermarks.count(hosts.topics["results"], partitions) >= 1  # noqa: E731
        _wait(answered, child, _ANSWER_TIMEOUT_S, "did not answer its warm-up rows")
    finally:
        watermarks.close()


def _wait(done: Callable[[], bool], child: Child, timeout_s: float, failure: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if not child.alive():
            raise RuntimeError(f"the service exited early; see {child.log_path}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the service {failure} within {timeout_s:.0f}s; see {child.log_path}")
        time.sleep(0.2)


def _warm_up_broker(runs: list[ModelRun], tail: Tail, args: argparse.Namespace) -> WarmUp:
    """Traffic at the demo's rate, through the producers and services the timed traffic will use, until
    the end-to-end p99 of each second settles (:class:`~service.tools.demo_latency.Settle`) or
    ``args.warm_up`` seconds have passed. No poison: its dead letters would count in the summary."""
    stop = threading.Event()
    seen = {topic: len(read) for topic, read in tail.read.items()}  # the service warm-up's results: not these

    def sample() -> list[float]:
        latencies: list[float] = []
        for topic, read in tail.read.items():
            new, seen[topic] = read[seen[topic] :], len(read)
            latencies += [t.end_to_end_ms for t in (demo_latency.timing(v, ms) for v, ms in new) if t]
        return latencies

    errors: list[BaseException] = []

    def produce(model_run: ModelRun, seed: int) -> None:
        try:
            report = model_run.producer.send(
                model_run.topics["in"], model_run.kind, 1 << 40, args.rate, seed=seed, stop=stop.is_set
            )
            model_run.warm_up_sent = report.sent
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    threads = [
        threading.Thread(target=produce, args=(model_run, 100 + i), daemon=True)
        for i, model_run in enumerate(runs)
    ]
    for thread in threads:
        thread.start()
    try:
        warmed = demo_latency.warm_up(sample, Settle(), args.warm_up, time.monotonic, time.sleep, stop.is_set)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    return warmed


def _produce_all(runs: list[ModelRun], args: argparse.Namespace) -> None:
    count = int(args.rate * args.duration)
    errors: list[BaseException] = []

    def produce(model_run: ModelRun) -> None:
        try:
            model_run.traffic_from_ms = time.time_ns() // 1_000_000
            model_run.report = model_run.producer.send(
                model_run.topics["in"],
                model_run.kind,
                count,
                args.rate,
                args.poison_ratio,
                seed=sorted(MODELS).index(model_run.model) + 1,
                too_large_bytes=_DEMO_MAX_VALUE_BYTES + 1024,
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(model_run,)) for model_run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _wait_for_outputs(runs: list[ModelRun], client_conf: dict[str, Any]) -> None:
    """Poll the verifier until no input is missing an answer (or the timeout), then read what came out."""
    deadline = time.monotonic() + _ANSWER_TIMEOUT_S
    decoder = msgspec.json.Decoder()
    for model_run in runs:
        topics = model_run.topics
        while True:
            model_run.verdict = verify(client_conf, topics["in"], topics["results"], topics["dlq"])
            if model_run.verdict.total("lost") == 0 or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        model_run.results = [
            decoder.decode(r.value or b"") for r in read_to_end(client_conf, topics["results"])
        ]
        for record in read_to_end(client_conf, topics["dlq"]):
            model_run.dead[(dict(record.headers or []).get("error.reason") or b"?").decode()] += 1


def _read_back(runs: list[ModelRun], tail: Tail) -> None:
    """The tail's times of each model's results, once it has read as many as the topic holds (or 10 s)."""
    for model_run in runs:
        topic = model_run.topics["results"]
        if not tail.wait_for(topic, len(model_run.results), 10.0):
            print(
                f"demo: read back {len(tail.read[topic])} of the {len(model_run.results)} results of "
                f"{model_run.model} as they came ({tail.error or 'too slowly'}): end to end is theirs only",
                file=sys.stderr,
            )
        model_run.timings = [t for t in (demo_latency.timing(v, ms) for v, ms in tail.read[topic]) if t]


def _legend(warmed: WarmUp | None, args: argparse.Namespace) -> list[str]:
    """What the latency figures are, and how the broker's warm-up went."""
    lines = [
        "",
        "latency, of the timed traffic only (ms, p50 and p99):",
        "  service     consumed -> produced, from each result's timestamps: the service's own share",
        "              (the wait for a batch, inference, encoding)",
        "  end to end  produced by the demo -> read back by the demo: the service, two trips through the",
        "              broker and both producers' batching",
    ]
    if warmed is None:
        lines.append("broker warm-up: none (--warm-up 0); a fresh broker's first seconds count in end to end")
        return lines
    p99s = ", ".join("-" if math.isinf(p) else f"{p:.0f}" for p in warmed.p99s)
    how = "until the round trip settled" if warmed.settled else "and the round trip had NOT settled"
    lines += [
        f"broker warm-up: {warmed.seconds:.0f} s of traffic at {args.rate:.0f} events/s per model before the "
        f"timed traffic, {how}",
        f"  (end-to-end p99 of each second: {p99s} ms; none of it is in the figures below)",
    ]
    if not warmed.settled:
        lines.append("  so end to end below may still hold the broker's warm-up; the service's share cannot")
    return lines


def _ms(value: float) -> str:
    return "<1" if value < 1 else f"{value:.0f}"


def _print_summary(model_run: ModelRun) -> None:
    results, verdict, child = model_run.results, model_run.verdict, model_run.child
    log = child.log_path if child else "?"
    print(f"\n== {model_run.model} ({model_run.kind})  service exit code {model_run.exit_code}  log {log}")
    missing = verdict.total("lost") if verdict else model_run.report.sent
    warm = WARM_UP_EVENTS + model_run.warm_up_sent
    print(
        f"events in {model_run.report.sent + warm} ({warm} to warm up)   "
        f"results {len(results)}   dead letters {sum(model_run.dead.values())}   missing {missing}   "
        f"duplicates {verdict.total('duplicates') if verdict else '?'}"
    )
    if model_run.dead:
        print(f"dead letters by reason: {dict(sorted(model_run.dead.items()))}")
    if not results:
        return
    # The warm-up's results count as answers above; the figures below are the traffic's.
    traffic = [r for r in results if r["timestamps"]["event_ms"] >= model_run.traffic_from_ms] or results
    produced = np.array([r["timestamps"]["produced_ms"] for r in traffic])
    span_s = max((produced.max() - produced.min()) / 1000, 1e-3)
    print(f"throughput {len(produced) / span_s:.0f} results/s   provider {results[0]['model']['provider']}")
    figures = demo_latency.latency(model_run.timings, model_run.traffic_from_ms)
    if figures:
        (s50, s99), (e50, e99) = figures.service, figures.end_to_end
        print(
            f"latency ({figures.count} results)   service p50 {_ms(s50)} ms  p99 {_ms(s99)} ms   "
            f"end to end p50 {_ms(e50)} ms  p99 {_ms(e99)} ms"
        )
    sizes = Counter(r["batch_size"] for r in traffic)
    print("batch sizes (items per batch size): " + "  ".join(f"{k}:{v}" for k, v in sorted(sizes.items())))
    if model_run.model == "log-classifier":
        labels = Counter(r["result"].get("label") for r in traffic)
        print("labels: " + "  ".join(f"{k}:{v}" for k, v in labels.most_common()))
    else:
        flagged = sum(bool(r["result"].get("is_anomaly")) for r in traffic)
        print(f"anomalies flagged: {flagged} of {len(traffic)} ({100 * flagged / len(traffic):.1f}%)")
