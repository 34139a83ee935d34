"""The machine a measurement ran on, for its results: what the sweep's report names (the bench's results
describe more: ``bench/machine.py``)."""

from __future__ import annotations

import platform
import re
import subprocess
from pathlib import Path


def cpu_model() -> str | None:
    """From ``lscpu``, else /proc/cpuinfo, else what Python's platform module knows."""
    try:
        out = subprocess.run(
            ["lscpu"], capture_output=True, text=True, timeout=10, env={"LC_ALL": "C"}, check=False
        ).stdout
        match = re.search(r"^Model name:\s*(.+)$", out, re.MULTILINE)
        if match:
            return match.group(1).strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        match = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
        if match:
            return match.group(1).strip()
    except OSError:
        pass
    return platform.processor() or None
