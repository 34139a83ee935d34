"""The demo's host path: ``host-anomaly`` on metrics as agents send them, assembled into rows.

Generated hosts (one of them with incidents injected) are sent live as collectd's ``write_kafka`` JSON, one
interval a second, keyed by host; with collectd installed, a private ``collectd`` reads this machine and
writes to the same topic too. The summary says, per host, how many rows were scored and flagged, how many
of the incident rows were flagged, and whether every row came out answering every message that fed it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from service.tools import collectd
from service.tools.generate import HOST_FEATURES, HostSeries, HostSpec, Incident, host_rows
from service.tools.generate.agents import render
from service.tools.produce import Deliveries
from service.tools.reader import ClientConf, read_to_end
from service.tools.rowcheck import RowCheck, check_rows, expected_rows, model_metadata

MODEL = "host-anomaly"
FORMAT = "collectd-json"
INTERVAL_S = 1.0
MAX_WAIT_S = 3.0
SETTINGS = {
    "input__format": FORMAT,
    "assemble__interval_s": str(INTERVAL_S),
    "assemble__max_wait_s": str(MAX_WAIT_S),
}
"""What the host service runs with beyond the demo's usual settings: collectd's JSON, 1 s intervals."""
WARM_UP_INTERVALS = 4
_HOSTS = (
    HostSpec("web-01", cpus=4, regime="daily"),
    HostSpec("web-02", cpus=4, regime="daily"),
    HostSpec("db-01", cpus=16, memory_bytes=128 * 2**30, filesystem_bytes=2 * 2**40, regime="busy"),
    HostSpec("batch-01", cpus=8, regime="batch"),
    HostSpec("spare-01", cpus=2, regime="idle"),
)


@dataclass
class HostTraffic:
    """What was sent, and what came back."""

    series: list[HostSeries] = field(default_factory=list)
    sent: int = 0
    collectd_host: str | None = None
    collectd_note: str = ""
    results: list[dict[str, Any]] = field(default_factory=list)
    dead: int = 0
    check: RowCheck | None = None


def warm_up(deliveries: Deliveries, topic: str) -> None:
    """A few intervals of a host of its own, so the service has rows to answer before the traffic."""
    now = float(int(time.time())) - WARM_UP_INTERVALS
    (series,) = host_rows(0, [HostSpec("warm-up", regime="idle")], now, INTERVAL_S, WARM_UP_INTERVALS)
    for value in render(series, "collectd"):
        deliveries.send(topic, value, b"warm-up")
    deliveries.flush("the host warm-up")


def send(deliveries: Deliveries, topic: str, duration_s: float, log_dir: Path, bootstrap: str) -> HostTraffic:
    """Send ``duration_s`` seconds of generated hosts live (and run collectd meanwhile, when installed)."""
    traffic = HostTraffic()
    count = max(int(duration_s / INTERVAL_S), 12)
    start = float(int(time.time())) + 1.0
    incidents = [
        Incident("db-01", "memory_leak", start=start + count * 0.3, duration_s=count * 0.6),
        Incident("batch-01", "interface_errors", start=start + count * 0.5, duration_s=count * 0.3),
    ]
    traffic.series = host_rows(8, list(_HOSTS), start, INTERVAL_S, count, incidents)
    bursts: dict[int, list[tuple[bytes, bytes]]] = {}
    for series in traffic.series:
        for value in render(series, "collectd"):
            interval = round(msgspec.json.decode(value)[0]["time"] / INTERVAL_S)
            bursts.setdefault(interval, []).append((series.spec.name.encode(), value))
    agent = _collectd(bootstrap, topic, log_dir, traffic)
    try:
        for interval in sorted(bursts):
            ahead = interval * INTERVAL_S - time.time()  # each burst when its interval ends, as agents do
            if ahead > 0:
                time.sleep(ahead)
            for key, value in bursts[interval]:
                deliveries.send(topic, value, key)
                traffic.sent += 1
        deliveries.flush("the host metrics")
    finally:
        if agent is not None:
            agent.stop()
    return traffic


def _collectd(bootstrap: str, topic: str, log_dir: Path, traffic: HostTraffic) -> collectd.Collectd | None:
    reason = collectd.missing()
    if reason:
        traffic.collectd_note = f"collectd not installed ({reason}): generated hosts only"
        return None
    host = socket.gethostname() or "this-host"
    agent = collectd.Collectd(
        bootstrap, topic, log_dir / "collectd", interval=INTERVAL_S, hostname=host, key=host
    )
    try:
        agent.start()
    except RuntimeError as exc:
        traffic.collectd_note = f"collectd did not start ({exc}): generated hosts only"
        return None
    traffic.collectd_host = host
    traffic.collectd_note = f"collectd reading this machine as {host!r}"
    return agent


def wait_for_rows(
    client_conf: ClientConf,
    topics: dict[str, str],
    traffic: HostTraffic,
    timeout_s: float,
    alive: Callable[[], bool],
) -> None:
    """Until every row the inputs make has a result (or the timeout, or the service died), then read the
    results and the dead letters."""
    required = msgspec.json.decode(model_metadata(MODEL)["microbatch.required"])
    inputs = [((r.partition, r.offset), r.value) for r in read_to_end(client_conf, topics["in"])]
    rows = expected_rows(inputs, FORMAT, HOST_FEATURES, INTERVAL_S, required)
    deadline = time.monotonic() + timeout_s
    decoder = msgspec.json.Decoder()
    while True:
        traffic.results = [
            decoder.decode(r.value or b"") for r in read_to_end(client_conf, topics["results"])
        ]
        traffic.check = check_rows(rows, traffic.results, topics["in"])
        if not traffic.check.missing or time.monotonic() > deadline or not alive():
            break
        time.sleep(1.0)
    traffic.dead = sum(1 for _ in read_to_end(client_conf, topics["dlq"]))


def summary(traffic: HostTraffic) -> list[str]:
    """The host path's lines of the demo's summary."""
    lines = [traffic.collectd_note] if traffic.collectd_note else []
    check = traffic.check
    if check is not None:
        lines.append(
            f"messages {traffic.sent} generated   rows expected {check.rows}   answered whole "
            f"{check.whole}   missing {len(check.missing)}   unanswered messages {check.unanswered}   "
            f"dead letters {traffic.dead}"
        )
    by_key: dict[str, list[dict[str, Any]]] = {}
    for result in traffic.results:
        by_key.setdefault(result["row"]["key"], []).append(result)
    labels = {  # rows of an incident's window where its definition does not hold yet: its onset
        (s.spec.name, round(t * 1000)): "onset" if window and label == "normal" else label
        for s in traffic.series
        for t, label, window in zip(s.times.tolist(), s.label_names(), s.in_window.tolist(), strict=True)
    }
    for key in sorted(by_key):
        rows = by_key[key]
        flagged = sum(bool(r["result"]["is_anomaly"]) for r in rows)
        kinds: Counter[str] = Counter()
        caught: Counter[str] = Counter()
        for r in rows:
            label = labels.get((key, r["row"]["time_ms"]), "normal")
            kinds[label] += 1
            caught[label] += bool(r["result"]["is_anomaly"])
        what = "this machine, by collectd" if key == traffic.collectd_host else "generated"
        line = f"  {key:<12} {what:<26} rows {len(rows):>3}   flagged {flagged:>3}"
        if set(kinds) != {"normal"}:
            line += "   of them: " + ", ".join(f"{k} rows {caught[k]}/{n}" for k, n in kinds.items())
        lines.append(line)
    return lines


def run_live(
    deliveries: Deliveries, topic: str, duration_s: float, log_dir: Path, bootstrap: str
) -> tuple[threading.Thread, dict[str, HostTraffic | BaseException]]:
    """:func:`send` on a thread of its own (alongside the other models' traffic)."""
    out: dict[str, HostTraffic | BaseException] = {}

    def target() -> None:
        try:
            out["traffic"] = send(deliveries, topic, duration_s, log_dir, bootstrap)
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=target, name="host-traffic")
    thread.start()
    return thread, out
