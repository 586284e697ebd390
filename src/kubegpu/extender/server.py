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
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kubegpu.errors import InputError
from kubegpu.extender.handlers import Extender
from kubegpu.probes import parse_address

__all__ = ["MAX_BODY_BYTES", "ExtenderServer"]

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 256 << 20  # full Node objects of a few thousand nodes (nodeCacheCapable: false)


class ExtenderServer:
    """Serves ``extender``'s verbs on ``address`` (``HOST:PORT``; port 0 picks one) from a daemon thread."""

    def __init__(self, extender: Extender, address: str) -> None:
        self._extender = extender
        self._host, self._port = parse_address(address, flag="--listen")
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def _verbs(self) -> dict[str, Callable[[Any], object]]:
        e = self._extender
        return {"filter": e.filter, "prioritize": e.prioritize, "bind": e.bind}

    def start(self) -> None:
        verbs = self._verbs()
        extender = self._extender

        class Handler(BaseHTTPRequestHandler):
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

            def log_message(self, format: str, *args: object) -> None:
                del format, args

        try:
            self._server = ThreadingHTTPServer((self._host, self._port), Handler)
        except OSError as exc:
            raise InputError(
                f"--listen {self._host}:{self._port}: cannot listen: {exc.strerror or exc}"
            ) from exc
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="extender-http", daemon=True)
        self._thread.start()
        log.info("extender serving on %s:%s", self._host, self.port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
