"""The ``/metrics`` HTTP endpoint: Prometheus' text format (0.0.4), from a daemon thread.

Standard library ``http.server``, as the health endpoint (``probes.py``): the agent owns its stop. A
scrape whose collection fails answers 500 with the reason and logs one line; the next one tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kubegpu.probes import EndpointServer, Reply, get_handler

__all__ = ["CONTENT_TYPE", "MetricsServer"]

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # what dcgm-exporter answers
TEXT = "text/plain; charset=utf-8"


class MetricsServer:
    """Serves ``body()`` on ``http://address/metrics``."""

    def __init__(self, address: str, body: Callable[[], bytes]) -> None:
        self._body = body
        self._address = address
        self._endpoint = EndpointServer(
            address, flag="--metrics-address", name="metrics", handler=get_handler(self._respond)
        )

    @property
    def port(self) -> int:
        return self._endpoint.port

    def _respond(self, path: str) -> Reply:
        if path != "/metrics":
            return Reply(404, TEXT, b"only /metrics is served here\n")
        try:
            return Reply(200, CONTENT_TYPE, self._body())
        except Exception as exc:
            log.warning("metrics collection failed", extra={"error": f"{type(exc).__name__}: {exc}"})
            log.debug("metrics collection failure", exc_info=True)
            return Reply(500, TEXT, f"collection failed: {exc}\n".encode())

    def start(self) -> None:
        self._endpoint.start()
        log.info(
            "metrics endpoint serving",
            extra={"address": f"{self._address} (port {self.port})", "path": "/metrics"},
        )

    def stop(self) -> None:
        self._endpoint.stop()
