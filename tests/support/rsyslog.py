"""A real, private ``rsyslogd`` whose ``omkafka`` action publishes to one topic, fed by ``logger``. No mocks.

Its config, pid file, work directory, own log and unix socket are under ``tmp_dir``: it never reads the
system socket (``SysSock.Use="off"``), never writes to ``/dev/log`` (its own messages go to a file), never
talks to systemd, and needs no root. What each template writes: docs/FORMATS.md.
"""

from __future__ import annotations

import glob
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from service.tools.daemons import Daemon

# /usr/sbin is not on a non-root PATH on Debian.
RSYSLOGD = shutil.which("rsyslogd") or shutil.which("rsyslogd", path="/usr/sbin:/sbin:/usr/local/sbin")
LOGGER = shutil.which("logger")
INSTALL_HINT = "apt-get install rsyslog rsyslog-kafka"


def _find_omkafka() -> Path | None:
    # Debian/Ubuntu: <prefix>/lib/<triplet>/rsyslog; Fedora/RHEL: lib64/rsyslog; source builds: /usr/local.
    prefixes = {"/usr", "/usr/local", str(Path(RSYSLOGD).resolve().parents[1]) if RSYSLOGD else "/usr"}
    hits = sorted(
        hit for p in prefixes for d in ("lib*", "lib/*") for hit in glob.glob(f"{p}/{d}/rsyslog/omkafka.so")
    )
    return Path(hits[0]) if hits else None


OMKAFKA = _find_omkafka()

JSON_TEMPLATE = "json"
"""A jsonf template as users write them: ``{"timestamp":"2026-12-01T10:34:14.494557+00:00", "host":"vm",
"app":"web", "pid":"4242", "facility":"user", "severity":"info", "message":" GET \\/a"}`` and ``\\n``. The
message keeps the space after ``tag:``, no pid is ``"-"``, and ``/`` comes escaped (still valid JSON)."""
JSON_TEMPLATE_DEFINITION = """template(name="json" type="list" option.jsonf="on") {
  property(outname="timestamp" name="timereported" dateFormat="rfc3339" format="jsonf")
  property(outname="host" name="hostname" format="jsonf")
  property(outname="app" name="programname" format="jsonf")
  property(outname="pid" name="procid" format="jsonf")
  property(outname="facility" name="syslogfacility-text" format="jsonf")
  property(outname="severity" name="syslogseverity-text" format="jsonf")
  property(outname="message" name="msg" format="jsonf")
}"""

# Prompt batches; idempotence keeps the partition's order across produce retries (a plain retry of a
# refused first batch, e.g. on a just-created topic, lands behind the batches sent after it).
DEFAULT_CONF_PARAMS = ("queue.buffering.max.ms=10", "enable.idempotence=true")
MAX_MESSAGE_BYTES = 64 * 1024  # logger splits longer lines (default 1 KiB); rsyslog truncates (default 8 KiB)
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 15.0  # omkafka gives unsent messages closeTimeout (1 s), then rsyslogd exits


def missing() -> str | None:
    """Why a private rsyslog cannot run here (a ``pytest.skip`` reason), or None when it can."""
    absent = [
        name for name, path in (("rsyslogd", RSYSLOGD), ("omkafka", OMKAFKA), ("logger", LOGGER)) if not path
    ]
    return f"{', '.join(absent)} not found: {INSTALL_HINT}" if absent else None


class Rsyslog(Daemon):
    """``rsyslogd -n`` publishing every message its socket receives to ``topic`` on ``bootstrap``, with
    ``template``: None is omkafka's default (``RSYSLOG_FileFormat``), a name one defined in the config (an
    ``RSYSLOG_*`` built-in, ``JSON_TEMPLATE``, or one in ``extra_config``). ``hostname`` fixes the
    ``hostname`` property (default: the short host name). ``action_options`` go into the omkafka action:
    it writes only to partition 0 unless given ``partitions.auto="on"`` (librdkafka's partitioner) or
    ``partitions.number="N"`` (round robin). As a context manager: started, then stopped."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        tmp_dir: Path,
        template: str | None = None,
        *,
        hostname: str | None = None,
        conf_params: Sequence[str] = DEFAULT_CONF_PARAMS,
        extra_config: str = "",
        action_options: str = "",
    ) -> None:
        d = self.dir = Path(tmp_dir).resolve()
        self.socket, self.conf, self.pid_file = d / "log.sock", d / "rsyslog.conf", d / "rsyslogd.pid"
        super().__init__(d / "rsyslogd.stderr", d / "rsyslogd.log", STOP_TIMEOUT_S)
        params = ", ".join(f'"{p}"' for p in conf_params)
        # maxMessageSize before any input; rsyslogd's own messages would otherwise go to syslog(3), /dev/log.
        # Only the socket's messages reach Kafka: its own (start, exit, omkafka errors) go to own_log.
        self.config = f"""\
global(workDirectory="{d / "work"}" maxMessageSize="{2 * MAX_MESSAGE_BYTES}"
       processInternalMessages="on" {f'localHostname="{hostname}"' if hostname else ""})
module(load="imuxsock" SysSock.Use="off")
module(load="omkafka")
{JSON_TEMPLATE_DEFINITION}
{extra_config}
ruleset(name="to_kafka") {{
  action(type="omkafka" broker=["{bootstrap}"] topic="{topic}" confParam=[{params}]
         {f'template="{template}"' if template else ""} {action_options})
}}
input(type="imuxsock" Socket="{self.socket}" ruleset="to_kafka")
action(type="omfile" file="{self.own_log}")
"""

    def start(self) -> None:
        """Validate the config (``-N1``), start rsyslogd and return once its socket exists. RuntimeError
        with rsyslogd's words if the config is rejected, it exits, or no socket within ``START_TIMEOUT_S``."""
        if reason := missing():
            raise RuntimeError(reason)
        assert RSYSLOGD and OMKAFKA
        (self.dir / "work").mkdir(parents=True, exist_ok=True)
        self.conf.write_text(self.config)
        self.socket.unlink(missing_ok=True)  # a stale one would pass the readiness check
        # -M: load the modules from where omkafka was found, so the check and the load agree.
        argv = [RSYSLOGD, "-f", str(self.conf), "-M", str(OMKAFKA.parent)]
        # A bad action (say, an unknown template) is only disabled, and rsyslogd runs on: validate first.
        self.check_config([*argv, "-N1"], self.conf)
        proc = self.spawn([*argv, "-n", "-i", str(self.pid_file)])
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.socket.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                code = self.stop()
                raise RuntimeError(
                    f"rsyslogd did not open {self.socket} (exit {code}):\n{self.diagnostics()}"
                )
            time.sleep(0.02)

    def send(
        self, lines: Sequence[str], tag: str = "app", priority: str = "user.info", pid: int | None = None
    ) -> None:
        """One message per line (empty ones too), all from one ``logger`` in its local format, what syslog(3)
        sends: ``<PRI>Mmm dd hh:mm:ss tag[pid]: line``. Returns when logger has written them all to the
        socket, not when they reach Kafka. CalledProcessError if logger fails (e.g. no socket)."""
        assert LOGGER, INSTALL_HINT
        if any("\n" in line for line in lines):
            raise ValueError("a line must not contain a newline: logger would send two messages")
        argv = [LOGGER, "-u", str(self.socket), "-t", tag, "-p", priority, "--size", str(MAX_MESSAGE_BYTES)]
        argv += ["--socket-errors=on", *([f"--id={pid}"] if pid is not None else [])]
        data = "".join(line + "\n" for line in lines).encode()
        subprocess.run(argv, input=data, check=True, capture_output=True, timeout=60)
