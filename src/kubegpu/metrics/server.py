"""The ``/metrics`` HTTP endpoint: Prometheus' text format (0.0.4), from a daemon thread.

Standard library ``http.server``, as the health endpoint (``probes.py``): the agent owns its stop. A
scrape whose collection fails answers 500 with the reason and logs one line; the next one tries again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kubegpu.errors import InputError
from kubegpu.probes import parse_address

__all__ = ["CONTENT_TYPE", "MetricsServer"]

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # what dcgm-exporter answers


class MetricsServer:
    """Serves ``body()`` on ``http://address/metrics``."""

    def __init__(self, address: str, body: Callable[[], bytes]) -> None:
        self._host, self._port = parse_address(address, flag="--metrics-address")
        self._body = body
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def start(self) -> None:
        make_body = self._body

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self._reply(404, b"only /metrics is served here\n", "text/plain; charset=utf-8")
                    return
                try:
                    body = make_body()
                except Exception as exc:
                    log.warning("metrics collection failed", extra={"error": f"{type(exc).__name__}: {exc}"})
                    log.debug("metrics collection failure", exc_info=True)
                    self._reply(500, f"collection failed: {exc}\n".encode(), "text/plain; charset=utf-8")
                    return
                self._reply(200, body, CONTENT_TYPE)

            def _reply(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                del format, args  # Prometheus scrapes every few seconds; don't log each one

        try:
            self._server = ThreadingHTTPServer((self._host, self._port), Handler)
        except OSError as exc:
            raise InputError(
                f"--metrics-address {self._host}:{self._port}: cannot listen: {exc.strerror or exc}"
            ) from exc
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics", daemon=True)
        self._thread.start()
        log.info(
            "metrics endpoint serving", extra={"address": f"{self._host}:{self.port}", "path": "/metrics"}
        )

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
