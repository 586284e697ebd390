"""The extender's HTTP server: kube-scheduler POSTs ``<urlPrefix>/<verb>``; probes GET ``/healthz``.

Standard library only (``http.server``, one thread per connection; the ledger's lock orders the
decisions). Any path ending in ``/filter``, ``/prioritize`` or ``/bind`` is that verb, so the
``urlPrefix`` is free (``http://HOST:PORT/kubegpu``). Answers are HTTP 200 with JSON, as the
scheduler requires; a body that is not JSON gets 400 and a one-line reason. ``/healthz`` answers
200 while serving, ``/readyz`` 200 once the first list of nodes and pods is in (503 before).
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable
from typing import Any

from kubegpu.extender.handlers import Extender
from kubegpu.probes import EndpointServer, QuietHandler

__all__ = ["MAX_BODY_BYTES", "ExtenderServer"]

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 256 << 20  # full Node objects of a few thousand nodes (nodeCacheCapable: false)


class ExtenderServer:
    """Serves ``extender``'s verbs on ``address`` (``HOST:PORT``; port 0 picks one) from a daemon thread."""

    def __init__(self, extender: Extender, address: str) -> None:
        self._extender = extender
        self._endpoint = EndpointServer(
            address, flag="--listen", name="extender-http", handler=self._handler()
        )

    @property
    def port(self) -> int:
        return self._endpoint.port

    def _verbs(self) -> dict[str, Callable[[Any], object]]:
        e = self._extender
        return {"filter": e.filter, "prioritize": e.prioritize, "bind": e.bind}

    def _handler(self) -> type[QuietHandler]:
        verbs = self._verbs()
        extender = self._extender

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: kube-scheduler reuses its connection

            def setup(self) -> None:
                super().setup()
                # headers and body leave in two writes: without this, Nagle's algorithm holds the body
                # back until the client's delayed ACK (about 40 ms) on every kept-alive request
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _send(self, status: int, body: object) -> None:
                data = json.dumps(body, separators=(",", ":")).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
                    self._send(200, {"ok": True})
                elif path == "/readyz":
                    ready = extender.ready
                    self._send(200 if ready else 503, {"ok": ready, "nodes": extender.ledger.node_count()})
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self) -> None:
                verb = verbs.get(self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1])
                length = int(self.headers.get("Content-Length") or 0)
                if verb is None or length > MAX_BODY_BYTES:
                    self.rfile.read(min(length, MAX_BODY_BYTES))
                    self._send(
                        404 if verb is None else 413, {"Error": f"kubegpu: no such verb {self.path[:80]}"}
                    )
                    return
                try:
                    args = json.loads(self.rfile.read(length) or b"{}")
                    if not isinstance(args, dict):
                        raise ValueError("the body must be a JSON object")
                except ValueError as exc:
                    self._send(400, {"Error": f"kubegpu: request body is not JSON: {exc}"})
                    return
                try:
                    self._send(200, verb(args))
                except Exception as exc:  # a bug must still answer, or the scheduler waits for its timeout
                    log.exception("extender verb failed: %s", self.path[:80])
                    self._send(200, {"Error": f"kubegpu: internal error: {exc}"})

        return Handler

    def start(self) -> None:
        self._endpoint.start()
        log.info("extender serving on %s (port %s)", self._endpoint.address, self.port)

    def stop(self) -> None:
        self._endpoint.stop()
