"""The OpenTelemetry Collector's ``kafka`` exporter after the ``hostmetrics`` receiver, from generated host
rows: OTLP metrics requests, as protobuf or JSON."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import msgspec
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as pb

from service.tools.generate._hosts import GIB
from service.tools.generate.agents._host import NS, Host, Point, Sample, nanoseconds

Encoding = Literal["proto", "json"]

SCOPE_PREFIX = "github.com/open-telemetry/opentelemetry-collector-contrib/receiver/hostmetricsreceiver"
SCHEMA_URL = "https://opentelemetry.io/schemas/1.9.0"
COLLECTOR_VERSION = "0.136.0"
_CUMULATIVE = pb.AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
# hostmetrics' cpu states in the order its Linux scraper records them.
_OTLP_CPU_STATES = ("user", "system", "idle", "interrupt", "nice", "softirq", "steal", "wait")
_SCRAPE_OFFSET_NS = {"cpu": 4_918_273, "disk": 6_121_391, "filesystem": 6_958_824, "load": 7_230_180}
_SCRAPE_OFFSET_NS |= {"memory": 7_386_575, "network": 7_821_988}


def otlp_metrics_requests(
    host: str,
    samples: Sequence[Sample],
    *,
    cpus: int = 2,
    memory_bytes: int = 8 * GIB,
    filesystem_bytes: int = 64 * GIB,
    interval_s: float | None = None,
    optional_metrics: bool = False,
) -> list[ExportMetricsServiceRequest]:
    """One ``ExportMetricsServiceRequest`` per scrape, as the Collector's ``hostmetrics`` receiver (scrapers
    cpu, disk, filesystem, load, memory, network at their defaults; ``resourcedetection`` adding
    ``host.name`` and ``os.type``) hands it to the ``kafka`` exporter: one ResourceMetrics per scraper,
    semconv-1.9 names and attributes (``cpu``, ``state``, ``device``, ``direction``), cumulative sums with
    ``startTimeUnixNano`` = boot. ``optional_metrics`` also enables ``system.cpu.utilization`` (from the
    second scrape on), ``system.memory.utilization`` and ``system.filesystem.utilization``."""
    h = Host(host, samples, cpus, memory_bytes, filesystem_bytes, interval_s)
    return [_otlp_request(h, p, optional_metrics, i) for i, p in enumerate(h.points)]


def otlp_metrics_messages(
    host: str,
    samples: Sequence[Sample],
    *,
    encoding: Encoding = "proto",
    cpus: int = 2,
    memory_bytes: int = 8 * GIB,
    filesystem_bytes: int = 64 * GIB,
    interval_s: float | None = None,
    optional_metrics: bool = False,
) -> list[bytes]:
    """:func:`otlp_metrics_requests` as Kafka message values: ``otlp_proto`` (the exporter's default) or
    ``otlp_json`` (lowerCamelCase keys, 64-bit integers as strings, enums as numbers)."""
    requests = otlp_metrics_requests(
        host,
        samples,
        cpus=cpus,
        memory_bytes=memory_bytes,
        filesystem_bytes=filesystem_bytes,
        interval_s=interval_s,
        optional_metrics=optional_metrics,
    )
    if encoding == "proto":
        return [r.SerializeToString(deterministic=True) for r in requests]
    if encoding == "json":
        return [msgspec.json.encode(MessageToDict(r, use_integers_for_enums=True)) for r in requests]
    raise ValueError(f"unknown encoding {encoding!r}; use 'proto' or 'json'")


def _kv(pairs: Mapping[str, str | int | float]) -> list[KeyValue]:
    out = []
    for key, value in pairs.items():
        if isinstance(value, str):
            out.append(KeyValue(key=key, value=AnyValue(string_value=value)))
        elif isinstance(value, int):
            out.append(KeyValue(key=key, value=AnyValue(int_value=value)))
        else:
            out.append(KeyValue(key=key, value=AnyValue(double_value=value)))
    return out


def _otlp_request(h: Host, p: Point, optional: bool, index: int) -> ExportMetricsServiceRequest:
    scrape = _Scrape(h, p, optional, index)
    scrapers: dict[str, Callable[[], list[pb.Metric]]] = {
        "cpu": scrape.cpu,
        "disk": scrape.disk,
        "filesystem": scrape.filesystem,
        "load": scrape.load,
        "memory": scrape.memory,
        "network": scrape.network,
    }
    request = ExportMetricsServiceRequest()
    for scraper, make in scrapers.items():
        if not p.has[scraper]:
            continue
        rm = request.resource_metrics.add()
        rm.resource.attributes.extend(_kv({"host.name": h.name, "os.type": "linux"}))
        rm.schema_url = SCHEMA_URL
        sm = rm.scope_metrics.add()
        sm.scope.name = f"{SCOPE_PREFIX}/internal/scraper/{scraper}scraper"
        sm.scope.version = COLLECTOR_VERSION
        sm.metrics.extend(make())
    return request


class _Scrape:
    """The metrics of one scrape, per scraper, as the hostmetrics receiver's metadata.yaml names them."""

    def __init__(self, h: Host, p: Point, optional: bool, index: int) -> None:
        self.h, self.p, self.optional, self.index = h, p, optional, index
        self.boot_ns, self.base_ns = h.boot * NS, nanoseconds(p.time)

    def point(self, scraper: str, value: float, attrs: Mapping[str, str | int | float]) -> pb.NumberDataPoint:
        dp = pb.NumberDataPoint(
            start_time_unix_nano=self.boot_ns, time_unix_nano=self.base_ns + _SCRAPE_OFFSET_NS[scraper]
        )
        dp.attributes.extend(_kv(attrs))
        if isinstance(value, int):
            dp.as_int = value
        else:
            dp.as_double = float(value)
        return dp

    @staticmethod
    def sum_(name: str, desc: str, unit: str, points: list, monotonic: bool) -> pb.Metric:
        data = pb.Sum(data_points=points, aggregation_temporality=_CUMULATIVE, is_monotonic=monotonic)
        return pb.Metric(name=name, description=desc, unit=unit, sum=data)

    @staticmethod
    def gauge(name: str, desc: str, unit: str, points: list) -> pb.Metric:
        return pb.Metric(name=name, description=desc, unit=unit, gauge=pb.Gauge(data_points=points))

    def cpu(self) -> list[pb.Metric]:
        h, point = self.h, self.point
        per_cpu = h.per_cpu_seconds(self.p)
        times = [
            point("cpu", seconds[state], {"cpu": f"cpu{i}", "state": state})
            for i, seconds in enumerate(per_cpu)
            for state in _OTLP_CPU_STATES
        ]
        desc = "Total seconds each logical CPU spent on each mode."
        metrics = [self.sum_("system.cpu.time", desc, "s", times, True)]
        if self.optional and self.index > 0:
            utilization = []
            before_all = h.per_cpu_seconds(h.points[self.index - 1])
            for i, (now, before) in enumerate(zip(per_cpu, before_all, strict=True)):
                elapsed = sum(now.values()) - sum(before.values())
                for state in _OTLP_CPU_STATES:
                    share = (now[state] - before[state]) / elapsed if elapsed > 0 else 0.0
                    utilization.append(point("cpu", share, {"cpu": f"cpu{i}", "state": state}))
            desc = (
                "Difference in system.cpu.time since the last measurement per logical CPU, divided by the "
                "elapsed time (value in interval [0,1])."
            )
            metrics.append(self.gauge("system.cpu.utilization", desc, "1", utilization))
        return metrics

    def disk(self) -> list[pb.Metric]:
        t, point = self.p.totals, self.point
        io = [point("disk", t[f"{d}_bytes"], {"device": "sda", "direction": d}) for d in ("read", "write")]
        ops = [point("disk", t[f"{d}s"], {"device": "sda", "direction": d}) for d in ("read", "write")]
        return [
            self.sum_("system.disk.io", "Disk bytes transferred.", "By", io, True),
            self.sum_("system.disk.operations", "Disk operations count.", "{operations}", ops, True),
        ]

    def filesystem(self) -> list[pb.Metric]:
        f, point = self.p.filesystem, self.point
        base: dict[str, str | int | float] = {
            "device": "/dev/sda1",
            "mode": "rw",
            "mountpoint": "/",
            "type": "ext4",
        }
        usage = [
            point("filesystem", f[state], {**base, "state": state}) for state in ("used", "free", "reserved")
        ]
        inodes = [
            point("filesystem", f["inodes_used"], {**base, "state": "used"}),
            point("filesystem", f["inodes"] - f["inodes_used"], {**base, "state": "free"}),
        ]
        metrics = [
            self.sum_("system.filesystem.inodes.usage", "FileSystem inodes used.", "{inodes}", inodes, False),
            self.sum_("system.filesystem.usage", "Filesystem bytes used.", "By", usage, False),
        ]
        if self.optional:
            share = [point("filesystem", f["used"] / (f["used"] + f["free"]), base)]
            desc = "Fraction of filesystem bytes used."
            metrics.append(self.gauge("system.filesystem.utilization", desc, "1", share))
        return metrics

    def load(self) -> list[pb.Metric]:
        metrics = []
        for window, text in (("15m", "15 minutes"), ("1m", "1 minute"), ("5m", "5 minutes")):
            value = float(self.p.row[f"system.cpu.load_average.{window}"] or 0.0)
            name, desc = f"system.cpu.load_average.{window}", f"Average CPU Load over {text}."
            metrics.append(self.gauge(name, desc, "{thread}", [self.point("load", value, {})]))
        return metrics

    def memory(self) -> list[pb.Metric]:
        m = self.p.memory
        states = {
            "used": m["used"],
            "free": m["free"],
            "buffered": m["buffered"],
            "cached": m["cached"],
            "slab_reclaimable": m["slab_recl"],
            "slab_unreclaimable": m["slab_unrecl"],
        }
        usage = [self.point("memory", v, {"state": s}) for s, v in states.items()]
        metrics = [self.sum_("system.memory.usage", "Bytes of memory in use.", "By", usage, False)]
        if self.optional:
            shares = [self.point("memory", v / m["total"], {"state": s}) for s, v in states.items()]
            desc = "Percentage of memory bytes in use."
            metrics.append(self.gauge("system.memory.utilization", desc, "1", shares))
        return metrics

    def network(self) -> list[pb.Metric]:
        t, point = self.p.totals, self.point
        series: dict[str, list[pb.NumberDataPoint]] = {"dropped": [], "errors": [], "io": [], "packets": []}
        devices: dict[str, dict[str, tuple[str, str]]] = {
            "lo": {"io": ("lo_bytes", "lo_bytes"), "packets": ("lo_packets", "lo_packets")},
            "eth0": {
                "io": ("tx_bytes", "rx_bytes"),
                "packets": ("tx_packets", "rx_packets"),
                "errors": ("tx_errors", "rx_errors"),
                "dropped": ("tx_dropped", "rx_dropped"),
            },
        }
        for device, keys in devices.items():
            for direction, side in (("transmit", 0), ("receive", 1)):
                attrs = {"device": device, "direction": direction}
                for name, points in series.items():
                    key = keys.get(name)
                    points.append(point("network", t[key[side]] if key else 0, attrs))
        connections = [
            point("network", n, {"protocol": "tcp", "state": s})
            for s, n in (("ESTABLISHED", 12), ("LISTEN", 6), ("TIME_WAIT", 3))
        ]
        counters = [
            ("dropped", "The number of packets dropped.", "{packets}"),
            ("errors", "The number of errors encountered.", "{errors}"),
            ("io", "The number of bytes transmitted and received.", "By"),
            ("packets", "The number of packets transferred.", "{packets}"),
        ]
        desc = "The number of connections."
        metrics = [self.sum_("system.network.connections", desc, "{connections}", connections, False)]
        metrics += [self.sum_(f"system.network.{n}", d, u, series[n], True) for n, d, u in counters]
        return metrics
