"""Generated host rows as the messages real metrics agents put in Kafka, for the demo and the integration
tests: collectd 5 ``write_kafka`` JSON, Telegraf's ``kafka`` output (line protocol or JSON) and the
OpenTelemetry Collector's ``kafka`` exporter after the ``hostmetrics`` receiver (OTLP protobuf or JSON).
One module per agent (``collectd``, ``telegraf``, ``otel``) and :func:`render` to pick one by name; what
they share, the host's counters and bytes behind the rows, is in ``_host``.

Every renderer takes a host name and its rows as ``(time, row)`` pairs at a fixed interval
(:meth:`HostSeries.samples`): ``time`` in unix seconds, the end of the interval the row's rates are over,
``row`` feature -> value with the :data:`HOST_FEATURES` names. The host's size comes as keyword arguments
(``cpus``, ``memory_bytes``, ``filesystem_bytes``: :meth:`HostSpec.facts`), since the agents send bytes and
per-CPU counters where the rows hold ratios. A row missing a feature group (or holding None there) leaves
that group's messages out at that sample: cpu (user, system, iowait), memory, load (1m, 5m, 15m), network
(all six), disk (read, write), filesystem.

What a consumer reads back is the row (see ``tests/fixtures/agents/MAPPINGS.md`` for the mappings):

- cpu: jiffies at 100 per second per CPU; every renderer's per-state share of an interval is the row's
  value (user, system, iowait; nice, irq and steal are 0, softirq takes ~1 % of the busy time out of idle).
  collectd (``ReportByCpu false``, ``ValuesPercentage true``) and Telegraf (``cpu-total``) send no cpu on
  the first sample, as they need two readings; hostmetrics sends cumulative ``system.cpu.time`` per CPU,
  whose per-CPU shares differ but average (each CPU has the same total) to the row's.
- memory: ``used`` is the row's share of the total (collectd: of the sum of its type_instances, which is
  the total; Telegraf: ``used_percent``; hostmetrics: of used + free + buffered + cached, and of the total).
- filesystem ``/``: used / (used + free), free being what non-root users may still use (Telegraf's
  ``used_percent``, hostmetrics' utilization, ``df``); 5 % of the filesystem is reserved for root, so
  collectd's ``percent_bytes`` (of the whole size) reads lower.
- network ``eth0`` (and loopback ``lo``, whose traffic is not the host's and must be left out; Telegraf's
  ``net`` skips it itself) and disk ``sda``: collectd sends rates (``StoreRates``: the value of a derive is
  already per second; the first sample of a series is null), Telegraf and hostmetrics cumulative integer
  counters from boot that grow by the row's rate times the interval.

Deterministic: the same arguments give the same bytes (boot time and counter bases come from the host
name).
"""

from __future__ import annotations

from service.tools.generate._hosts import HostSeries
from service.tools.generate.agents._host import CPU_STATES, Sample
from service.tools.generate.agents.collectd import collectd_messages
from service.tools.generate.agents.otel import Encoding, otlp_metrics_messages, otlp_metrics_requests
from service.tools.generate.agents.telegraf import influx_lines, telegraf_json

__all__ = [
    "AGENT_FORMATS",
    "CPU_STATES",
    "Encoding",
    "Sample",
    "collectd_messages",
    "influx_lines",
    "otlp_metrics_messages",
    "otlp_metrics_requests",
    "render",
    "telegraf_json",
]

AGENT_FORMATS = ("collectd", "influx", "telegraf-json", "otlp-proto", "otlp-json")


def render(series: HostSeries, agent: str) -> list[bytes]:
    """A generated host's rows as one agent's messages: ``agent`` one of :data:`AGENT_FORMATS`."""
    spec, samples = series.spec, series.samples()
    facts = {"cpus": spec.cpus, "memory_bytes": spec.memory_bytes, "filesystem_bytes": spec.filesystem_bytes}
    if agent == "collectd":
        return collectd_messages(spec.name, samples, interval_s=series.interval_s, **facts)
    if agent == "influx":
        return influx_lines(spec.name, samples, interval_s=series.interval_s, **facts)
    if agent == "telegraf-json":
        return telegraf_json(spec.name, samples, interval_s=series.interval_s, **facts)
    if agent in ("otlp-proto", "otlp-json"):
        encoding: Encoding = "proto" if agent == "otlp-proto" else "json"
        return otlp_metrics_messages(
            spec.name,
            samples,
            encoding=encoding,
            cpus=spec.cpus,
            memory_bytes=spec.memory_bytes,
            filesystem_bytes=spec.filesystem_bytes,
            interval_s=series.interval_s,
        )
    raise ValueError(f"unknown agent format {agent!r}; known: {AGENT_FORMATS}")
