"""A private Prometheus server (Debian's ``prometheus``) scraping a service on this machine with the compose
stack's own configuration, and the dashboard's and the docs' queries as an operator's Grafana sends them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.harness import free_port, http_get, wait_for

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus") or shutil.which("prometheus", path="/usr/bin:/usr/local/bin")
INSTALL_HINT = "apt-get install prometheus"
COMPOSE_CONFIG = ROOT / "deploy" / "compose" / "prometheus.yml"
DASHBOARD = ROOT / "deploy" / "compose" / "grafana" / "dashboards" / "microbatch.json"
DEPLOY_DOC = ROOT / "docs" / "DEPLOY.md"
SCRAPE_S = 1


def missing() -> str | None:
    """Why the real-Prometheus tests cannot run here (with the install line), or None."""
    return None if PROMETHEUS else f"prometheus not found: {INSTALL_HINT}"


def config_for(port: int) -> dict[str, Any]:
    """The compose stack's configuration (deploy/compose/prometheus.yml) with the service found at
    127.0.0.1:``port`` instead of through Docker's DNS, every second: the same job, the same relabeling
    (the ``service`` label the dashboard filters on comes from the name discovery found, given here as
    the DNS discovery gives it), and the same rule files, read from the repository."""
    config = yaml.safe_load(COMPOSE_CONFIG.read_text())
    config["global"] = {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"}
    (job,) = config["scrape_configs"]
    names = [name for sd in job.pop("dns_sd_configs") for name in sd["names"]]
    assert names[0] == "microbatch", names
    job["static_configs"] = [{"targets": [f"127.0.0.1:{port}"], "labels": {"__meta_dns_name": names[0]}}]
    compose_dir = COMPOSE_CONFIG.parent
    config["rule_files"] = [str(compose_dir / Path(path).name) for path in config.get("rule_files", [])]
    return config


class Prometheus:
    """``prometheus`` started on a free port with ``config`` and its data under ``workdir``; stopped (by
    its PID) on exit."""

    def __init__(self, config: dict[str, Any], workdir: Path) -> None:
        assert PROMETHEUS, INSTALL_HINT
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.log = workdir / "prometheus.log"
        self._argv = [
            PROMETHEUS,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Prometheus:
        with self.log.open("wb") as log:
            self._proc = subprocess.Popen(self._argv, stdout=log, stderr=subprocess.STDOUT)
        wait_for(lambda: http_get(self.port, "/-/ready")[0] == 200, 60, f"prometheus ready ({self.log})")
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; the ``data`` of a successful answer (an error answer fails the test)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as exc:
            body = json.load(exc)
        assert body["status"] == "success", f"{path} {params}: {body}"
        return body["data"]

    def query(self, expr: str, at: float) -> Result:
        """An instant query at Unix time ``at``."""
        data = self.api("query", query=expr, time=f"{at:.3f}")
        if data["resultType"] == "scalar":
            return Result(expr, [({}, float(data["result"][1]))])
        return Result(expr, [(s["metric"], float(s["value"][1])) for s in data["result"]])

    def last_scrape_ok(self) -> bool:
        targets = self.api("targets")["activeTargets"]
        return bool(targets) and all(t["health"] == "up" for t in targets)


@dataclass(frozen=True)
class Result:
    expr: str
    series: list[tuple[dict[str, str], float]]

    def value(self) -> float:
        """The one value of a query that must give one series."""
        assert len(self.series) == 1, f"{self.expr}: {self.series}"
        return self.series[0][1]

    def by(self, label: str) -> dict[str, float]:
        return {labels[label]: value for labels, value in self.series}


@dataclass(frozen=True)
class Panel:
    title: str
    legend: str
    expr: str


def dashboard_queries() -> list[Panel]:
    """Every query of every panel of the Grafana dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        Panel(panel["title"], target.get("legendFormat", ""), target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


def dashboard_variables() -> dict[str, str]:
    """Each template variable's query (``label_values(metric, label)``)."""
    dashboard = json.loads(DASHBOARD.read_text())
    return {v["name"]: v["definition"] for v in dashboard["templating"]["list"]}


def grafana(expr: str, service: str, rate_interval_s: int) -> str:
    """``expr`` as Grafana sends it: ``$service`` (a multi-value variable: a regex) and
    ``$__rate_interval`` substituted."""
    return expr.replace("$service", re.escape(service)).replace("$__rate_interval", f"{rate_interval_s}s")


def documented_queries() -> list[str]:
    """The PromQL lines of docs/DEPLOY.md's ``promql`` blocks, their trailing comments taken off."""
    blocks = re.findall(r"```promql\n(.*?)```", DEPLOY_DOC.read_text(), re.DOTALL)
    lines = [line.split("#", 1)[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line]
