"""A small API server on 127.0.0.1 for tests and benchmarks: collections served as paginated lists
(``limit``/``continue``) and watch streams (``watch=1`` from a ``resourceVersion``, 410 once the
history is gone), every request and byte counted.

Objects are kept as whatever renders them: a list of dicts (tests), or a count and a function of the
index giving its JSON bytes (``bench/scale.py`` renders 450,000 realistic pods on demand instead of
holding gigabytes). Standard library only; one thread per connection.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["Request", "StubApiServer", "kubeconfig"]

MAX_WATCH_S = 600.0  # a watch stream is ended after at most this long


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]

    @property
    def watch(self) -> bool:
        return self.query.get("watch") in ("1", "true")


@dataclass
class _Collection:
    count: int
    render: Callable[[int], bytes]
    version: int = 1
    oldest: int = 0  # watches from a version below this get 410 Gone
    events: list[tuple[int, bytes]] = field(default_factory=list)
    objects: list[dict[str, Any]] | None = None  # a collection of dicts follows its pushed events


class StubApiServer:
    """``serve`` a collection, ``start``, point a ``KubeApi`` at ``url`` (``kubeconfig``), ``push``
    watch events; ``requests`` and ``bytes_sent`` say what was asked and answered. ``before_page``
    (path, page index) runs before each list page is answered (tests use it to see the order)."""

    def __init__(self) -> None:
        self._collections: dict[str, _Collection] = {}
        self._cond = threading.Condition()
        self._stopping = False
        self.requests: list[Request] = []
        self.bytes_sent = 0
        self.before_page: Callable[[str, int], None] = lambda path, index: None
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    # -- content ---------------------------------------------------------------------------------

    def serve(
        self,
        path: str,
        objects: list[dict[str, Any]] | None = None,
        *,
        count: int = 0,
        render: Callable[[int], bytes] | None = None,
    ) -> None:
        if objects is not None:
            items = list(objects)
            self._collections[path] = _Collection(
                len(items), lambda i: json.dumps(items[i]).encode(), objects=items
            )
        else:
            assert render is not None
            self._collections[path] = _Collection(count, render)

    def push(self, path: str, kind: str, obj: dict[str, Any]) -> int:
        """A watch event on ``path``; its resource version (also set on the object)."""
        with self._cond:
            c = self._collections[path]
            c.version += 1
            obj = {**obj, "metadata": {**obj.get("metadata", {}), "resourceVersion": str(c.version)}}
            c.events.append((c.version, json.dumps({"type": kind, "object": obj}).encode() + b"\n"))
            if c.objects is not None:  # a later list shows the change
                key = _identity(obj)
                c.objects[:] = [o for o in c.objects if _identity(o) != key]
                if kind != "DELETED":
                    c.objects.append(obj)
                c.count = len(c.objects)
            self._cond.notify_all()
            return c.version

    def push_raw(self, path: str, line: bytes) -> None:
        """A watch line that is no event object at all (hostile-input tests; ``push`` takes objects)."""
        with self._cond:
            c = self._collections[path]
            c.version += 1
            c.events.append((c.version, line + b"\n"))
            self._cond.notify_all()

    def expire(self, path: str) -> None:
        """Forget the history: a watch from any version before now answers 410 Gone."""
        with self._cond:
            c = self._collections[path]
            c.version += 1
            c.oldest, c.events = c.version, []
            self._cond.notify_all()

    def end_watches(self) -> None:
        """End every open watch stream now (the server's timeout, early)."""
        with self._cond:
            for c in self._collections.values():
                c.events.append((-1, b""))  # a marker: streams open now end
            self._cond.notify_all()

    def lists(self, path: str | None = None) -> list[Request]:
        return [r for r in self.requests if not r.watch and r.method == "GET" and path in (None, r.path)]

    def watches(self, path: str | None = None) -> list[Request]:
        return [r for r in self.requests if r.watch and path in (None, r.path)]

    # -- serving ---------------------------------------------------------------------------------

    def start(self) -> str:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                stub._get(self)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                if not isinstance(sys.exc_info()[1], OSError):  # a client gone is not an error
                    super().handle_error(request, client_address)

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="stub-apiserver", daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        return self.url

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _send(self, h: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
        with self._cond:
            self.bytes_sent += len(body)

    def _get(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        request = Request("GET", parts.path, query)
        with self._cond:
            self.requests.append(request)
        c = self._collections.get(parts.path)
        if c is None:
            self._send(h, 404, b'{"kind":"Status","code":404,"message":"not found"}')
        elif request.watch:
            self._watch(h, parts.path, c, query)
        else:
            self._list(h, parts.path, c, query)

    def _list(self, h: BaseHTTPRequestHandler, path: str, c: _Collection, query: dict[str, str]) -> None:
        limit = int(query.get("limit") or 0) or c.count or 1
        start, version = 0, c.version
        token = query.get("continue")
        if token:
            offset, _, listed = token.partition(":")
            start, version = int(offset), int(listed)
        self.before_page(path, start // limit)
        end = min(c.count, start + limit)
        meta: dict[str, str] = {"resourceVersion": str(version)}
        if end < c.count:
            meta["continue"] = f"{end}:{version}"
        head = b'{"kind":"List","apiVersion":"v1","metadata":' + json.dumps(meta).encode() + b',"items":['
        body = head + b",".join(c.render(i) for i in range(start, end)) + b"]}"
        self._send(h, 200, body)

    def _watch(self, h: BaseHTTPRequestHandler, path: str, c: _Collection, query: dict[str, str]) -> None:
        since = int(query.get("resourceVersion") or 0)
        deadline = time.monotonic() + min(float(query.get("timeoutSeconds") or 60), MAX_WATCH_S)
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def chunk(data: bytes) -> None:
            h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            h.wfile.flush()
            with self._cond:
                self.bytes_sent += len(data)

        try:
            if since < c.oldest:
                gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
                chunk(json.dumps(gone).encode() + b"\n")
            else:
                with self._cond:  # what happened since the version asked for, then what comes
                    backlog = [line for version, line in c.events if version > since]
                    seen = len(c.events)
                for line in backlog:
                    chunk(line)
                ended = False
                while not ended:
                    with self._cond:
                        while len(c.events) <= seen and not self._stopping and time.monotonic() < deadline:
                            self._cond.wait(max(0.0, min(1.0, deadline - time.monotonic())))
                        fresh, seen = c.events[seen:], len(c.events)
                        ended = self._stopping or time.monotonic() >= deadline
                    for version, line in fresh:
                        if version == -1:
                            ended = True
                            break
                        if version > since:
                            chunk(line)
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except OSError:  # the client went away
            h.close_connection = True


def _identity(obj: dict[str, Any]) -> tuple[str, ...]:
    """What names an object across events: its uid, else (nodes and test objects) namespace and name."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    if meta.get("uid"):
        return ("uid", str(meta["uid"]))
    return ("name", str(meta.get("namespace", "")), str(meta.get("name", "")))


def kubeconfig(path: Path, url: str) -> Path:
    """A kubeconfig naming the stub (no credentials)."""
    path.write_text(
        json.dumps(
            {
                "current-context": "c",
                "clusters": [{"name": "s", "cluster": {"server": url}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "c", "context": {"cluster": "s", "user": "u"}}],
            }
        )
    )
    return path
