"""The HTTP port: ``/metrics`` (Prometheus text format), ``/healthz`` and ``/readyz`` (200 or 503 with a
one-line reason). A small threaded WSGI server from the standard library on daemon threads: it never
delays the loop, and it dies with the process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from service.observability.health import Health

_Check = Callable[[], tuple[bool, str]]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes every few seconds would flood the log; failures show in the probes' own status."""


def application(registry: CollectorRegistry, health: Health) -> Callable[..., Iterable[bytes]]:
    """The WSGI app: the three paths, 404 for anything else."""
    metrics = make_wsgi_app(registry)
    probes: dict[str, _Check] = {"/healthz": health.live, "/readyz": health.ready}

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            body: Iterable[bytes] = metrics(environ, start_response)
            return body
        check = probes.get(path)
        if check is None:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: try /metrics, /healthz or /readyz\n"]
        ok, why = check()
        status = "200 OK" if ok else "503 Service Unavailable"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
        return [why.encode() + b"\n"]

    return app


class MetricsServer:
    """Listening from construction until :meth:`close`. ``port`` is the bound port (useful with 0).
    Raises OSError when the address cannot be bound (the caller names the setting)."""

    def __init__(self, host: str, port: int, registry: CollectorRegistry, health: Health) -> None:
        self._httpd = make_server(
            host, port, application(registry, health), server_class=_Server, handler_class=_QuietHandler
        )
        self.port: int = self._httpd.server_port
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="metrics-http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
