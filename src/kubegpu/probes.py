"""The agent's HTTP health endpoint for kubelet's probes: ``/healthz`` (alive) and ``/readyz`` (ready).

Why: as a DaemonSet the agent needs liveness and readiness probes that say something true.
``/healthz`` answers 200 while the process's serving loop runs (a wedged or crashed agent stops
answering, and kubelet restarts it); ``/readyz`` answers 200 only when every resource's gRPC server is
serving and registered with kubelet, and 503 with the reason otherwise (GPUs not readable yet under
``--fail-on-init-error=false``, a server down, a registration pending). Both bodies are one JSON object.

Standard library only (``http.server`` in a daemon thread); the checks are callables, so tests drive
the real server with fake agents.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kubegpu.errors import InputError

__all__ = ["Check", "EndpointServer", "ProbeServer", "QuietHandler", "Reply", "get_handler", "parse_address"]

log = logging.getLogger(__name__)

# A check returns (ok, details); details become the JSON body next to "ok".
Check = Callable[[], tuple[bool, Mapping[str, object]]]


def parse_address(address: str, *, flag: str = "--health-address") -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` (all interfaces) or ``[V6]:PORT`` -> (host, port); ``flag`` names
    the option in the error."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise InputError(f"{flag} {address!r}: give HOST:PORT or :PORT, e.g. :8080")
    return host.strip("[]") or "0.0.0.0", int(port_text)


@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    body: bytes


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing (probes and scrapers ask every few seconds)."""

    def log_message(self, format: str, *args: object) -> None:
        del format, args


def get_handler(respond: Callable[[str], Reply]) -> type[BaseHTTPRequestHandler]:
    """A handler answering every GET with ``respond(path)`` (the query string dropped)."""

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            reply = respond(self.path.split("?", 1)[0])
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

    return Handler


class EndpointServer:
    """A small HTTP server on a daemon thread, shared by the health endpoint, ``/metrics`` and the
    scheduler extender. ``handler`` is the request handler class (``get_handler(respond)`` for a GET
    responder; subclass ``QuietHandler`` so requests are not logged). A port that cannot be bound is
    one ``InputError`` naming ``flag``."""

    def __init__(self, address: str, *, flag: str, name: str, handler: type[BaseHTTPRequestHandler]) -> None:
        self._host, self._port = parse_address(address, flag=flag)
        self._flag, self._name, self._handler = flag, name, handler
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def address(self) -> str:
        return f"{self._host}:{self._port}"

    def start(self) -> None:
        try:
            self._server = ThreadingHTTPServer((self._host, self._port), self._handler)
        except OSError as exc:
            raise InputError(
                f"{self._flag} {self._host}:{self._port}: cannot listen: {exc.strerror or exc}"
            ) from exc
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None


def _json(status: int, body: Mapping[str, object]) -> Reply:
    data = (json.dumps(body, default=str, sort_keys=True) + "\n").encode()
    return Reply(status, "application/json", data)


class ProbeServer:
    """Serves ``/healthz`` and ``/readyz`` on ``address`` from a daemon thread."""

    def __init__(self, address: str, *, healthz: Check, readyz: Check) -> None:
        self._checks = {"/healthz": healthz, "/readyz": readyz}
        self._address = address
        self._endpoint = EndpointServer(
            address, flag="--health-address", name="probes", handler=get_handler(self._respond)
        )

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return self._endpoint.port

    def _respond(self, path: str) -> Reply:
        check = self._checks.get(path)
        if check is None:
            return _json(404, {"ok": False, "error": f"no such endpoint {path[:100]}"})
        try:
            ok, details = check()
        except Exception as exc:
            log.warning("health check failed", extra={"path": path, "error": str(exc)})
            ok, details = False, {"error": str(exc)}
        return _json(200 if ok else 503, {"ok": ok, **details})

    def start(self) -> None:
        self._endpoint.start()
        log.info("health endpoint serving", extra={"address": f"{self._address} (port {self.port})"})

    def stop(self) -> None:
        self._endpoint.stop()
