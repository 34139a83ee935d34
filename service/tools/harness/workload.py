"""The events a scenario feeds to every system: generated once per kind and seed, as (key, value) bytes.

The same seed gives the same events, so the Kafka systems and the in-process model baseline see identical
inputs. Keys are host names, as from ``microbatch produce``.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from service.tools.generate import EventGenerator
from service.tools.generate.otlp import encode, logs_request

Event = tuple[bytes | None, bytes]
_CHUNK = 10_000


def make_events(kind: str, count: int, seed: int, per_message: int = 1) -> list[Event]:
    """``count`` valid messages of ``kind``: ``metrics`` or ``logs`` events as JSON, or ``otlp-logs``
    requests of ``per_message`` log records each (protobuf, as the Collector writes them; the records are
    the ``logs`` events of the same seed, in order). No poison, so every item must come out as a result
    and nothing as a dead letter."""
    if kind == "otlp-logs":
        # One agent's batch per request (a Collector on each node): one resource, the first event's host
        # and service; no key, as the Collector's exporter sends them.
        records = [msgspec.json.decode(v) for _k, v in make_events("logs", count * per_message, seed)]
        requests: list[Event] = []
        for i in range(0, len(records), per_message):
            chunk = records[i : i + per_message]
            agent = {"host": chunk[0]["host"], "service": chunk[0]["service"]}
            requests.append((None, encode(logs_request([e | agent for e in chunk], seed=i), "proto")))
        return requests
    if kind not in {"metrics", "logs"}:
        raise ValueError(f"unknown event kind {kind!r}")
    gen = EventGenerator(seed)
    to_json = msgspec.json.Encoder().encode
    events: list[Event] = []
    while len(events) < count:  # in chunks: a few hundred thousand event dicts at once would be large
        n = min(_CHUNK, count - len(events))
        chunk = gen.logs(n) if kind == "logs" else gen.metrics(n)
        events.extend((e["host"].encode(), to_json(e)) for e in chunk)
    return events


def cycle(pool: Sequence[Event], count: int) -> list[Event]:
    """The first ``count`` events of ``pool`` repeated end to end."""
    if not pool:
        raise ValueError("empty event pool")
    return [pool[i % len(pool)] for i in range(count)]
