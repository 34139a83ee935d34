"""A description of the machine and software a benchmark ran on, for the results file."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

from service.tools.harness.machine import cpu_model

POM = Path(__file__).resolve().parents[1] / "deploy" / "kafka-local" / "pom.xml"
AUTOGROUP = Path("/proc/sys/kernel/sched_autogroup_enabled")


def describe() -> dict[str, Any]:
    """CPU model, cores, memory, OS, Python, client libraries, ONNX Runtime, the local broker's version,
    the load average when the run started (other work on the machine skews every figure), and whether the
    kernel shares CPU time per session (see :func:`autogroup`)."""
    import confluent_kafka
    import onnxruntime
    import psutil  # the bench extra

    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "confluent_kafka": _version(confluent_kafka.version()),
        "librdkafka": confluent_kafka.libversion()[0],
        "onnxruntime": onnxruntime.__version__,
        "onnxruntime_providers": onnxruntime.get_available_providers(),
        "kafka_broker": broker_version(POM),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "sched_autogroup": autogroup(AUTOGROUP),
    }


def _version(value: str | tuple) -> str:
    """confluent-kafka's ``version()`` is a (string, int) pair in some releases and a string in others."""
    return value[0] if isinstance(value, tuple) else value


def autogroup(path: Path) -> bool | None:
    """Whether Linux shares CPU time per session before per thread (``kernel.sched_autogroup_enabled``);
    None where the kernel has no such setting.

    It matters to a benchmark that runs its broker on the same machine: ``kafka.sh`` starts the broker in
    a session of its own, so with autogroup on, its threads compete for CPU as one group against the
    group of the bench and the system under test. On two cores, a broker GC pause that needed 20 ms of
    CPU then took up to 200 ms of wall time, stalling every client (docs/BENCHMARKS.md)."""
    try:
        return path.read_text().strip() == "1"
    except OSError:
        return None


def broker_version(pom: Path) -> str | None:
    """The Apache Kafka version the local broker is built from (``kafka.version`` in its pom)."""
    try:
        match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom.read_text())
    except OSError:
        return None
    return match.group(1).strip() if match else None
