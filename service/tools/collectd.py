"""A real, private ``collectd`` (5.x) whose ``write_kafka`` plugin publishes every value list it reads to one
topic: the demo's host path and the tests run it.

Its config, base directory, pid file, own log and stderr are under ``tmp_dir``: it runs in the
foreground (``-f``), never reads ``/etc/collectd``, never writes ``/var/lib/collectd`` or ``/var/run``, opens
no socket of its own, never talks to systemd or upstart, and needs no root. The read plugins (``cpu``,
``memory``, ...) report the host they run on. What each ``Format`` writes, with captured messages:
tests/fixtures/agents/SOURCES.md.
"""

from __future__ import annotations

import ctypes.util
import re
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from service.tools.daemons import Daemon

# /usr/sbin is not on a non-root PATH on Debian.
COLLECTD = shutil.which("collectd") or shutil.which("collectd", path="/usr/sbin:/sbin:/usr/local/sbin")
# collectd-core only suggests librdkafka1, and write_kafka.so cannot load without it.
INSTALL_HINT = "apt-get install collectd-core librdkafka1"


def _prefixes() -> list[str]:
    prefix = str(Path(COLLECTD).resolve().parents[1]) if COLLECTD else "/usr"
    return list(dict.fromkeys((prefix, "/usr", "/usr/local", "/opt/collectd")))


def _find(*relative: str) -> Path | None:
    # Debian/Ubuntu: <prefix>/lib/collectd; Fedora/RHEL: lib64/collectd; source builds: /opt/collectd.
    hits = [Path(p) / r for p in _prefixes() for r in relative if (Path(p) / r).is_file()]
    return hits[0] if hits else None


WRITE_KAFKA = _find("lib/collectd/write_kafka.so", "lib64/collectd/write_kafka.so")
TYPES_DB = _find("share/collectd/types.db")
RDKAFKA = ctypes.util.find_library("rdkafka")

DEFAULT_PLUGINS = ("cpu", "memory", "load", "interface", "df", "disk")
FORMATS = ("JSON", "Command", "Graphite")
# librdkafka settings beyond metadata.broker.list: none, librdkafka's defaults are what users run.
DEFAULT_PROPERTIES: tuple[tuple[str, str], ...] = ()
START_TIMEOUT_S = 10.0
# Read and write threads joined, then exit: well under a second when healthy. collectd never flushes its
# producers, so values still queued in librdkafka at the stop are dropped ("Producer terminating with N
# messages still in queue" in its log): count what arrived.
STOP_TIMEOUT_S = 10.0
_INIT_DONE = "Initialization complete, entering read-loop."


def missing() -> str | None:
    """Why a private collectd cannot run here (a ``pytest.skip`` reason), or None when it can."""
    found = (("collectd", COLLECTD), ("write_kafka.so", WRITE_KAFKA), ("types.db", TYPES_DB))
    absent = [name for name, path in (*found, ("librdkafka", RDKAFKA)) if not path]
    return f"{', '.join(absent)} not found: {INSTALL_HINT}" if absent else None


def _quote(value: str) -> str:
    """A collectd config string: double quotes, with ``\\`` and ``"`` escaped."""
    if "\n" in value:
        raise ValueError(f"a collectd config string cannot hold a newline: {value!r}")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Collectd(Daemon):
    """``collectd -f`` reading ``plugins`` every ``interval`` seconds and publishing each value list to
    ``topic`` on ``bootstrap`` with ``write_kafka``, one Kafka message per value list, in ``format``:
    ``JSON`` (``[{"values":[...],"dstypes":[...],"dsnames":[...],"time":...,"interval":...,"host":...,
    "plugin":...,"plugin_instance":...,"type":...,"type_instance":...}]``), ``Command`` (``PUTVAL ...``) or
    ``Graphite`` (one ``<metric> <value> <timestamp>\\r\\n`` line per data source).

    ``hostname`` fixes the ``host`` field (default: gethostname(), no FQDN lookup). ``key`` is the Kafka key
    of every message (``Key``): None gives each message a fresh random 8-hex-digit key, ``"Random"`` draws
    one at start and keeps it. write_kafka partitions with its own hash of the key, not librdkafka's.
    ``store_rates`` None keeps write_kafka's default: derive/counter values as per-second rates (``null`` for
    a first sample) in JSON, raw in Graphite; Command is always raw. ``properties`` are librdkafka settings
    for every topic. ``extra_config`` is appended to the config (``<Plugin cpu> ... </Plugin>`` blocks, say).
    As a context manager: started, then stopped."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        tmp_dir: Path,
        *,
        interval: float = 1.0,
        plugins: Sequence[str] = DEFAULT_PLUGINS,
        hostname: str | None = None,
        key: str | None = None,
        store_rates: bool | None = None,
        format: str = "JSON",
        properties: Sequence[tuple[str, str]] = DEFAULT_PROPERTIES,
        extra_config: str = "",
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be positive, got {interval}")
        if not plugins:
            raise ValueError("no read plugin: collectd would never write to Kafka")
        if format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
        self.topic = topic
        d = self.dir = Path(tmp_dir).resolve()
        self.conf, self.pid_file, self.base_dir = d / "collectd.conf", d / "collectd.pid", d / "base"
        super().__init__(d / "collectd.stderr", d / "collectd.log", STOP_TIMEOUT_S)
        topic_options = [f"Format {format}"]
        if key is not None:
            topic_options.append(f"Key {_quote(key)}")
        if store_rates is not None:
            topic_options.append(f"StoreRates {'true' if store_rates else 'false'}")
        props = [("metadata.broker.list", bootstrap), *properties]
        # The logfile plugin first, so that it also gets the other plugins' config-time complaints.
        # FQDNLookup false: no getaddrinfo() on the host name, which can hang where DNS is unreachable.
        self.config = "\n".join(
            [
                *([f"Hostname {_quote(hostname)}"] if hostname is not None else []),
                "FQDNLookup false",
                f"BaseDir {_quote(str(self.base_dir))}",
                f"PIDFile {_quote(str(self.pid_file))}",
                f"PluginDir {_quote(str(WRITE_KAFKA.parent if WRITE_KAFKA else '/usr/lib/collectd'))}",
                f"TypesDB {_quote(str(TYPES_DB or '/usr/share/collectd/types.db'))}",
                f"Interval {interval:g}",
                "LoadPlugin logfile",
                "<Plugin logfile>",
                "  LogLevel info",
                f"  File {_quote(str(self.own_log))}",
                "  Timestamp true",
                "  PrintSeverity true",
                "</Plugin>",
                *(f"LoadPlugin {name}" for name in plugins),
                "LoadPlugin write_kafka",
                "<Plugin write_kafka>",
                *(f"  Property {_quote(k)} {_quote(v)}" for k, v in props),
                f"  <Topic {_quote(topic)}>",
                *(f"    {option}" for option in topic_options),
                "  </Topic>",
                "</Plugin>",
                extra_config,
                "",
            ]
        )

    def start(self) -> None:
        """Write the config, run ``collectd -t`` on it, start ``collectd -f`` and return once write_kafka has
        made its producer for ``topic``, which it does on the first value list it is given (the first read,
        right after start): that message is handed to librdkafka, not yet delivered. RuntimeError with
        collectd's words if the config is rejected, collectd exits or logs an error or a Kafka complaint
        while starting, or is not writing within ``START_TIMEOUT_S``."""
        if reason := missing():
            raise RuntimeError(reason)
        assert COLLECTD
        self.dir.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(self.config)
        self.own_log.unlink(missing_ok=True)  # a stale one would pass the readiness check
        argv = [COLLECTD, "-C", str(self.conf), "-P", str(self.pid_file)]
        # collectd 5.8-5.12's -t parses nothing and exits 0 (collectd#3216, fixed by #3793): kept for the
        # versions where it works. Everywhere a config that does not parse, or names a plugin that is not
        # there, makes -f exit 1 ("Error: Parsing the config file failed!"), which the wait below reports.
        self.check_config([*argv, "-t"], self.conf)
        proc = self.spawn([*argv, "-f"])
        ready = re.compile(rf"write_kafka plugin: handle created for topic : {re.escape(self.topic)}$", re.M)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            log = self.own_log.read_text(errors="replace") if self.own_log.exists() else ""
            complaints = self._complaints(log)
            if complaints or proc.poll() is not None or time.monotonic() > deadline:
                code = self.stop()
                why = f"complains: {complaints}" if complaints else f"is not writing to {self.topic}"
                raise RuntimeError(f"collectd {why} (exit {code}):\n{self.diagnostics()}")
            if ready.search(log):
                return
            time.sleep(0.02)

    @staticmethod
    def _complaints(log: str) -> list[str]:
        # Until the read loop starts: errors, and warnings about write_kafka's config (an unknown option, a
        # bad Format or Property), which collectd only logs and runs on, maybe without the topic's writer.
        # librdkafka's own warnings (a broker down, say) come later, with "[thrd:".
        starting = log.split(_INIT_DONE, 1)[0]
        return [
            line
            for line in starting.splitlines()
            if "] [error] " in line or ("] [warning] " in line and "kafka" in line.lower())
        ]
