"""The agent's HTTP health endpoint for kubelet's probes: ``/healthz`` (alive) and ``/readyz`` (ready),
and ``EndpointServer``, the small HTTP server it shares with ``/metrics`` and the scheduler extender.

Why: as a DaemonSet the agent needs liveness and readiness probes that say something true.
``/healthz`` answers 200 while the process's serving loop runs (a wedged or crashed agent stops
answering, and kubelet restarts it); ``/readyz`` answers 200 only when every resource's gRPC server is
serving and registered with kubelet, and 503 with the reason otherwise (GPUs not readable yet under
``--fail-on-init-error=false``, a server down, a registration pending). Both bodies are one JSON object.

``EndpointServer`` keeps a hostile or broken client from starving the endpoint (docs/extender.md,
"Hostile clients and authentication"): a connection must send its request within
``request_timeout_s`` and a kept-alive one is closed after ``idle_timeout_s`` without a request; at
most ``max_connections`` are served at once, and at the cap a new connection evicts the oldest one
still waiting for (or trickling in) its request, so a probe always gets in; only when every
connection is busy answering is the new one refused at once (503, no thread). TLS, when given, is
negotiated in the connection's own thread, under the same timeout, never in the accept loop.

Standard library only (``http.server``, one daemon thread per connection); the checks are callables,
so tests drive the real server with fake agents.
"""

from __future__ import annotations

import contextlib
import enum
import io
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

from kubegpu.errors import InputError

__all__ = [
    "Check",
    "ConnectionLimits",
    "EndpointServer",
    "ProbeServer",
    "QuietHandler",
    "Reply",
    "get_handler",
    "parse_address",
]

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


@dataclass(frozen=True, kw_only=True)
class ConnectionLimits:
    """How long and how many: the defaults suit kubelet's probes, Prometheus and kube-scheduler
    (docs/extender.md explains each number)."""

    max_connections: int = 64
    request_timeout_s: float = 10.0  # to start a request once connected, and to send all of it
    idle_timeout_s: float = 120.0  # a kept-alive connection without a new request (Go's client: 90 s)

    def __post_init__(self) -> None:
        if self.max_connections < 1 or self.request_timeout_s <= 0 or self.idle_timeout_s <= 0:
            raise ValueError(f"connection limits must be positive: {self}")


@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    body: bytes


class _Phase(enum.Enum):
    WAITING = "waiting"  # TLS handshake, or no byte of the next request yet
    READING = "reading"  # the request line, headers or body are arriving
    BUSY = "busy"  # the request is in; the handler is answering


@dataclass(eq=False)
class _Connection:
    sock: socket.socket
    phase: _Phase
    deadline: float  # monotonic; only WAITING and READING have one that the reaper enforces
    since: float
    requests: int = 0
    evicted: bool = False
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)


_current = threading.local()  # the _Connection that this handler thread serves


def _connection() -> _Connection | None:
    conn: _Connection | None = getattr(_current, "conn", None)
    return conn


def _hard_close(sock: socket.socket) -> None:
    """Wake the thread blocked reading ``sock`` (any thread may call this): its read sees the end."""
    with contextlib.suppress(OSError):  # already closed
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the raw shutdown, also under an SSLSocket


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing (probes and scrapers ask every few seconds). Under an
    ``EndpointServer`` each request must arrive within the connection limits; a handler that reads a
    request body says so with ``expects_body`` and calls ``request_read()`` once it has it."""

    def log_message(self, format: str, *args: object) -> None:
        del format, args

    def expects_body(self) -> bool:
        """True while a body is still to be read after the headers (the request's deadline holds)."""
        return False

    def request_read(self) -> None:
        """The whole request is in: the handler may take its time to answer."""
        conn = _connection()
        if conn is not None:
            _enter(conn, _Phase.BUSY, None)

    def handle_one_request(self) -> None:
        conn = _connection()
        if conn is None:  # not under EndpointServer (a test's own server): the stdlib's behaviour
            super().handle_one_request()
            return
        limits = conn.limits
        wait_s = limits.request_timeout_s if conn.requests == 0 else limits.idle_timeout_s
        _enter(conn, _Phase.WAITING, wait_s)
        try:
            self.connection.settimeout(wait_s)
            started = cast(io.BufferedReader, self.rfile).peek(1)  # rbufsize -1: a BufferedReader
        except OSError:  # timed out, reset, or evicted
            started = b""
        if not started:
            self.close_connection = True
            return
        _enter(conn, _Phase.READING, limits.request_timeout_s)
        self.connection.settimeout(limits.request_timeout_s)  # each read; the reaper bounds the sum
        conn.requests += 1
        try:
            super().handle_one_request()
        except OSError:  # the client went away or was too slow: nobody to answer
            self.close_connection = True

    def parse_request(self) -> bool:
        ok = super().parse_request()
        if ok and not self.expects_body():
            self.request_read()
        return ok


def _enter(conn: _Connection, phase: _Phase, within_s: float | None) -> None:
    now = time.monotonic()
    # the deadline first: the reaper, reading without a lock, never pairs the new phase with an old one
    conn.deadline = now + within_s if within_s is not None else float("inf")
    conn.since = now
    conn.phase = phase


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


_BUSY_BODY = b"busy: every connection is being answered; try again\n"
_BUSY_REPLY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 1\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)


class _GuardedServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with the connection limits, the reaper and TLS in the connection's thread."""

    daemon_threads = True
    request_queue_size = 128  # the accept loop is quick; a burst of connects waits in the backlog

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        limits: ConnectionLimits,
        tls: ssl.SSLContext | None,
    ) -> None:
        self.limits, self.tls = limits, tls
        self._lock = threading.Lock()
        self._live: set[_Connection] = set()
        super().__init__(address, handler)

    def connection_count(self) -> int:
        with self._lock:
            return sum(1 for c in self._live if not c.evicted)

    def process_request(self, request: Any, client_address: Any) -> None:
        """In the accept loop: admit (evicting the oldest waiting connection at the cap) or refuse."""
        now = time.monotonic()
        limits = self.limits
        conn = _Connection(request, _Phase.WAITING, now + limits.request_timeout_s, now, limits=limits)
        admitted = True
        with self._lock:
            live = [c for c in self._live if not c.evicted]
            if len(live) >= limits.max_connections:
                idle = [c for c in live if c.phase is not _Phase.BUSY]
                if idle:  # the oldest that has not (fully) asked yet makes room
                    victim = min(idle, key=lambda c: c.since)
                    victim.evicted = True
                    _hard_close(victim.sock)
                else:
                    admitted = False
            if admitted:
                self._live.add(conn)
        if not admitted:
            self._refuse(request)
            return
        thread = threading.Thread(target=self._serve, args=(conn, request, client_address), daemon=True)
        thread.start()

    def _refuse(self, request: socket.socket) -> None:
        if self.tls is None:  # a TLS client cannot read plain text: it just sees the close
            try:
                request.setblocking(False)
                request.send(_BUSY_REPLY)  # fits the socket buffer: never blocks the accept loop
            except OSError:
                pass
        self.shutdown_request(request)

    def _serve(self, conn: _Connection, request: socket.socket, client_address: Any) -> None:
        _current.conn = conn
        try:
            request.settimeout(self.limits.request_timeout_s)
            if self.tls is not None:
                request = self.tls.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
                with self._lock:
                    conn.sock = request
                    if conn.evicted:
                        return
                request.do_handshake()
            self.finish_request(request, client_address)
        except (OSError, ValueError) as exc:  # a refused handshake, a reset: nothing to answer
            log.debug("connection from %s dropped: %s", client_address, exc)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            _current.conn = None
            with self._lock:
                self._live.discard(conn)
            self.shutdown_request(request)

    def service_actions(self) -> None:
        """Between accepts (every poll interval): close connections past their deadline (a request
        trickled in a byte at a time outlives each read's timeout, not this)."""
        now = time.monotonic()
        with self._lock:
            for c in self._live:
                if not c.evicted and c.phase is not _Phase.BUSY and now > c.deadline:
                    c.evicted = True
                    _hard_close(c.sock)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.exception("request from %s failed", client_address)


class EndpointServer:
    """A small HTTP server on a daemon thread, shared by the health endpoint, ``/metrics`` and the
    scheduler extender. ``handler`` is the request handler class (``get_handler(respond)`` for a GET
    responder; subclass ``QuietHandler`` so requests are not logged and the limits apply). ``tls``
    serves HTTPS with that context. A port that cannot be bound is one ``InputError`` naming ``flag``."""

    def __init__(
        self,
        address: str,
        *,
        flag: str,
        name: str,
        handler: type[BaseHTTPRequestHandler],
        limits: ConnectionLimits | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._host, self._port = parse_address(address, flag=flag)
        self._flag, self._name, self._handler = flag, name, handler
        self._limits = limits or ConnectionLimits()
        self._tls = tls
        self._server: _GuardedServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def address(self) -> str:
        return f"{self._host}:{self._port}"

    @property
    def limits(self) -> ConnectionLimits:
        return self._limits

    def connection_count(self) -> int:
        """Connections being served now (each has a thread)."""
        return self._server.connection_count() if self._server is not None else 0

    def start(self) -> None:
        try:
            self._server = _GuardedServer(
                (self._host, self._port), self._handler, limits=self._limits, tls=self._tls
            )
        except OSError as exc:
            raise InputError(
                f"{self._flag} {self._host}:{self._port}: cannot listen: {exc.strerror or exc}"
            ) from exc
        # poll_interval: how often the reaper looks (a trickled request lives at most this longer)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.25}, name=self._name, daemon=True
        )
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

    def __init__(
        self, address: str, *, healthz: Check, readyz: Check, limits: ConnectionLimits | None = None
    ) -> None:
        self._checks = {"/healthz": healthz, "/readyz": readyz}
        self._address = address
        self._endpoint = EndpointServer(
            address, flag="--health-address", name="probes", handler=get_handler(self._respond), limits=limits
        )

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return self._endpoint.port

    def connection_count(self) -> int:
        """Connections being served now."""
        return self._endpoint.connection_count()

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
