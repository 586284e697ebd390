"""The extender's HTTP server: kube-scheduler POSTs ``<urlPrefix>/<verb>``; probes GET ``/healthz``.

Standard library only (``http.server`` under ``kubegpu.probes.EndpointServer``: one thread per
connection, request and idle timeouts, a connection cap; the ledger's lock orders the decisions). Any
path ending in ``/filter``, ``/prioritize`` or ``/bind`` is that verb, so the ``urlPrefix`` is free
(``http://HOST:PORT/kubegpu``). Answers are HTTP 200 with JSON, as the scheduler requires; a request
that is not one gets a 4xx and a one-line reason: no or a bad ``Content-Length`` (411, 400), a body over
``MAX_BODY_BYTES`` (413, unread), a body that is not a JSON object, is nested deeper than
``MAX_JSON_DEPTH`` or holds more than ``MAX_JSON_VALUES`` values (400). At most ``BODY_BUDGET_BYTES``
of request bodies are held at once (others wait, then 503), so memory stays bounded whatever clients
send. ``/healthz`` answers 200 while serving and ``Extender.alive`` (503 once a watch thread is dead),
``/readyz`` 200 once the first list of nodes and pods is in (503 before).

With ``TlsSettings`` it serves HTTPS; with a client CA it asks every client for a certificate and
answers the verbs only to one that presented a certificate that CA signed (403 otherwise); the probes
need none (kubelet's HTTPS probes present no certificate). docs/extender.md, "Hostile clients and
authentication", gives the numbers' reasons.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubegpu.errors import InputError
from kubegpu.extender.handlers import Extender
from kubegpu.probes import ConnectionLimits, EndpointServer, QuietHandler

__all__ = [
    "BODY_BUDGET_BYTES",
    "MAX_BODY_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_JSON_VALUES",
    "ExtenderServer",
    "TlsSettings",
    "parse_body",
]

log = logging.getLogger(__name__)

# kube-scheduler with nodeCacheCapable: true sends node names: 15,000 names of up to 253 characters,
# quoted and comma-separated, are 15,000 x 256 = 3.7 MiB; a Pod is at most 1.5 MiB in etcd, and as JSON
# (Go escapes <, > and & as \u003c: 6 bytes each) at worst about 6 x 1.5 = 9 MiB. 3.7 + 9 = 12.7 MiB,
# rounded up with margin. Full Node objects (nodeCacheCapable: false) of that many nodes are not served.
MAX_BODY_BYTES = 16 << 20
# A Pod's deepest field (a volume's claim template's selector's expression's values, or managedFields)
# is under 20 levels; much deeper is not a Pod.
MAX_JSON_DEPTH = 64
# Every JSON value costs Python 50-250 bytes whatever its size in the body ("{}," is 3 bytes and a
# 64-byte dict), so the body cap alone does not bound memory: counting the separators (',', '{', '[')
# before parsing does. 15,000 names plus a large Pod are well under 100,000.
MAX_JSON_VALUES = 400_000
# Bodies held at once (parsed or not): two of the largest, any number of small ones (binds).
BODY_BUDGET_BYTES = 2 * MAX_BODY_BYTES

_LENGTH = re.compile(r"[0-9]{1,12}")


class BadBody(ValueError):
    """A request body that is not an ``ExtenderArgs``-like JSON object (the reason, for a 400)."""


def parse_body(body: bytes) -> dict[str, Any]:
    """The JSON object in ``body``, or ``BadBody``: not JSON, not an object, nested deeper than
    ``MAX_JSON_DEPTH`` or more than ``MAX_JSON_VALUES`` values. Checked before and while parsing, so
    no input makes it recurse without bound or build more than a bounded number of objects."""
    values = body.count(b",") + body.count(b"{") + body.count(b"[")  # an upper bound, in C
    if values > MAX_JSON_VALUES:
        raise BadBody(f"more than {MAX_JSON_VALUES} JSON values")
    try:
        doc = json.loads(body)
    except RecursionError:  # the C decoder guards its own recursion; past ~1,000 levels it stops here
        raise BadBody(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise BadBody(f"request body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadBody("the body must be a JSON object")
    _check_depth(doc)
    return doc


def _check_depth(doc: dict[str, Any]) -> None:
    stack: list[tuple[dict[str, Any] | list[Any], int]] = [(doc, 1)]
    while stack:  # an explicit stack: no recursion, one visit per container
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise BadBody(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        children = value.values() if isinstance(value, dict) else value
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))


class _BodyBudget:
    """Bytes of request bodies held at once; a request waits for room, up to a timeout."""

    def __init__(self, limit: int) -> None:
        self._limit, self._used = limit, 0
        self._cond = threading.Condition()

    def acquire(self, n: int, timeout_s: float) -> bool:
        with self._cond:
            if not self._cond.wait_for(lambda: self._used + n <= self._limit, timeout=timeout_s):
                return False
            self._used += n
            return True

    def release(self, n: int) -> None:
        with self._cond:
            self._used -= n
            self._cond.notify_all()


@dataclass(frozen=True, kw_only=True)
class TlsSettings:
    """HTTPS for the extender: its certificate and key (PEM), and the CA bundle (PEM) whose client
    certificates may call the verbs (None: any client, TLS only encrypts). The flags name them in errors."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None

    def context(self) -> ssl.SSLContext:
        """The server's context, or one ``InputError`` naming the file that cannot be used."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise InputError(
                f"--tls-cert-file {self.cert_file} / --tls-private-key-file {self.key_file}: "
                f"cannot use them: {exc}"
            ) from exc
        if self.client_ca_file is not None:
            try:
                ctx.load_verify_locations(cafile=self.client_ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise InputError(f"--client-ca-file {self.client_ca_file}: cannot use it: {exc}") from exc
            # OPTIONAL, not REQUIRED: a certificate offered must verify (or the handshake fails), but
            # kubelet's probes offer none; the verbs check that one was verified (403 otherwise)
            ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx


class ExtenderServer:
    """Serves ``extender``'s verbs on ``address`` (``HOST:PORT``; port 0 picks one) from a daemon thread,
    over HTTPS with client certificates when ``tls`` is given."""

    def __init__(
        self,
        extender: Extender,
        address: str,
        *,
        tls: TlsSettings | None = None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        self._extender = extender
        self._require_client_cert = tls is not None and tls.client_ca_file is not None
        self._budget = _BodyBudget(BODY_BUDGET_BYTES)
        self._limits = limits or ConnectionLimits()
        self._endpoint = EndpointServer(
            address,
            flag="--listen",
            name="extender-http",
            handler=self._handler(),
            limits=self._limits,
            tls=tls.context() if tls is not None else None,
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
        budget = self._budget
        require_client_cert = self._require_client_cert
        request_timeout_s = self._limits.request_timeout_s

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: kube-scheduler reuses its connection

            def setup(self) -> None:
                super().setup()
                # headers and body leave in two writes: without this, Nagle's algorithm holds the body
                # back until the client's delayed ACK (about 40 ms) on every kept-alive request
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def expects_body(self) -> bool:
                return self.command == "POST"

            def _send(self, status: int, body: object, *, close: bool = False) -> None:
                data = json.dumps(body, separators=(",", ":")).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if close:  # the body was not read: the connection cannot carry another request
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)

            def _refuse(self, status: int, reason: str) -> None:
                self._send(status, {"Error": f"kubegpu: {reason}"}, close=True)

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/healthz":  # 503: kubelet restarts the pod
                    alive = extender.alive
                    self._send(200 if alive else 503, {"ok": alive})
                elif path == "/readyz":
                    ready = extender.ready
                    self._send(200 if ready else 503, {"ok": ready, "nodes": extender.ledger.node_count()})
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self) -> None:
                verb = verbs.get(self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1])
                if require_client_cert and not self._verified_client():
                    return self._refuse(
                        403, "a client certificate signed by the extender's client CA is required"
                    )
                if verb is None:
                    return self._refuse(404, f"no such verb {self.path[:80]}")
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    return self._refuse(411, "send the body with a Content-Length, not chunked")
                raw = self.headers.get("Content-Length")
                if raw is None:
                    return self._refuse(411, "Content-Length is required")
                if not _LENGTH.fullmatch(raw.strip()):
                    return self._refuse(400, f"bad Content-Length {raw[:40]!r}")
                length = int(raw)
                if length > MAX_BODY_BYTES:
                    return self._refuse(413, f"request body of {length} bytes is over {MAX_BODY_BYTES}")
                if not budget.acquire(length, request_timeout_s):
                    return self._refuse(503, "too many large requests at once; try again")
                try:
                    body = self.rfile.read(length)
                    if len(body) < length:  # the client went away (or was cut off as too slow)
                        self.close_connection = True
                        return None
                    self.request_read()
                    try:
                        args = parse_body(body or b"{}")
                    except BadBody as exc:
                        return self._send(400, {"Error": f"kubegpu: {exc}"})
                    del body
                    try:
                        reply = verb(args)
                    except (
                        Exception
                    ) as exc:  # a bug must still answer, or the scheduler waits for its timeout
                        log.exception("extender verb failed: %s", self.path[:80])
                        reply = {"Error": f"kubegpu: internal error: {exc}"}
                    del args
                    return self._send(200, reply)
                finally:
                    budget.release(length)

            def _verified_client(self) -> bool:
                conn = self.connection
                return isinstance(conn, ssl.SSLSocket) and bool(conn.getpeercert())

        return Handler

    def start(self) -> None:
        self._endpoint.start()
        log.info("extender serving on %s (port %s)", self._endpoint.address, self.port)

    def stop(self) -> None:
        self._endpoint.stop()
