"""The extender's HTTP server against hostile and broken clients (issue 55, findings 6 and 7).

Real HTTP(S) on a loopback port in front of a stand-in extender (the verbs echo what they were
given), so what is checked is the server: a malformed request gets its 4xx and the server keeps
serving; a body too large, too deep or too many values is refused before it costs memory; an idle
kept-alive connection is closed; over TLS with a client CA only a client with a certificate that CA
signed reaches the verbs, while kubelet's certificate-less probes still get their answer. The
certificates are made for each test with the ``openssl`` command.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from kubegpu.extender.handlers import Extender
from kubegpu.extender.server import MAX_BODY_BYTES, MAX_JSON_DEPTH, ExtenderServer, TlsSettings
from kubegpu.probes import ConnectionLimits

pytestmark = pytest.mark.integration


class _Ledger:
    def node_count(self) -> int:
        return 0


class EchoExtender:
    """What ExtenderServer calls: filter keeps every node, bind succeeds; each call is recorded."""

    ready = True
    alive = True
    ledger = _Ledger()

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def filter(self, args: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("filter", args))
        return {"NodeNames": args.get("NodeNames"), "FailedNodes": {}, "Error": ""}

    def prioritize(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        self.calls.append(("prioritize", args))
        return []

    def bind(self, args: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("bind", args))
        return {"Error": ""}


FILTER = json.dumps({"Pod": {"metadata": {"name": "p"}}, "Nodes": None, "NodeNames": ["a", "b"]}).encode()


def serve(
    tls: TlsSettings | None = None, limits: ConnectionLimits | None = None
) -> tuple[ExtenderServer, EchoExtender]:
    fake = EchoExtender()
    server = ExtenderServer(cast(Extender, fake), "127.0.0.1:0", tls=tls, limits=limits)
    server.start()
    return server, fake


@pytest.fixture
def plain() -> Iterator[tuple[ExtenderServer, EchoExtender]]:
    server, fake = serve()
    yield server, fake
    server.stop()


def raw(port: int, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """Send exactly these bytes; the status and body of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head + body)
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        with resp:
            return resp.status, resp.read()


def post(port: int, body: bytes, verb: str = "filter") -> tuple[int, bytes]:
    head = f"POST /kubegpu/{verb} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    return raw(port, head, body)


def still_serving(port: int) -> bool:
    status, body = post(port, FILTER)
    return status == 200 and json.loads(body)["NodeNames"] == ["a", "b"]


@pytest.mark.parametrize(
    ("length_header", "want"),
    [
        (b"Content-Length: -1\r\n", 400),
        (b"Content-Length: abc\r\n", 400),
        (b"Content-Length: 1e3\r\n", 400),
        (b"Content-Length: 99999999999999999999\r\n", 400),
        (b"", 411),
        (b"Transfer-Encoding: chunked\r\n", 411),
        (f"Content-Length: {MAX_BODY_BYTES + 1}\r\n".encode(), 413),
    ],
    ids=["negative", "not-a-number", "float", "absurd", "missing", "chunked", "over-the-cap"],
)
def test_a_bad_content_length_gets_its_4xx_at_once_and_the_server_keeps_serving(
    plain: tuple[ExtenderServer, EchoExtender], length_header: bytes, want: int
) -> None:
    server, fake = plain
    head = b"POST /kubegpu/filter HTTP/1.1\r\nHost: x\r\n" + length_header + b"\r\n"
    status, body = raw(server.port, head)  # no body follows: the answer must not wait for one
    assert status == want
    assert json.loads(body)["Error"].startswith("kubegpu: ")
    assert fake.calls == []
    assert still_serving(server.port)


@pytest.mark.parametrize(
    "body",
    [
        b'{"Pod": ' + b"[" * (MAX_JSON_DEPTH + 10) + b"]" * (MAX_JSON_DEPTH + 10) + b"}",
        b'{"Pod": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
        b'{"Pod": ' + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"}",
    ],
    ids=["past-the-bound", "200k-arrays", "100k-objects"],
)
def test_json_nested_too_deep_is_a_400_not_a_dropped_connection(
    plain: tuple[ExtenderServer, EchoExtender], body: bytes
) -> None:
    server, fake = plain
    status, answer = post(server.port, body)
    assert status == 400
    assert "nested deeper" in json.loads(answer)["Error"]
    assert fake.calls == []
    assert still_serving(server.port)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"[1, 2]", "JSON object"),
        (b"{nope", "not JSON"),
        (b'{"Pod": "\xff\xfe"}', "not JSON"),
        (b'{"NodeNames": [' + b"{}," * 500_000 + b"{}]}", "JSON values"),
    ],
    ids=["array", "broken", "not-utf8", "too-many-values"],
)
def test_a_body_that_is_not_a_bounded_json_object_is_a_400(
    plain: tuple[ExtenderServer, EchoExtender], body: bytes, says: str
) -> None:
    server, fake = plain
    status, answer = post(server.port, body)
    assert status == 400
    assert says in json.loads(answer)["Error"]
    assert fake.calls == []
    assert still_serving(server.port)


def test_what_kube_scheduler_sends_for_15000_nodes_and_a_large_pod_is_served(
    plain: tuple[ExtenderServer, EchoExtender],
) -> None:
    """The caps leave room for the largest real filter call (docs/extender.md has the arithmetic)."""
    server, fake = plain
    names = [f"{i:05d}-" + "n" * 247 for i in range(15_000)]  # 253 characters each
    env = [{"name": f"VAR_{i}", "value": "v" * 40} for i in range(10_000)]
    pod = {
        "metadata": {"name": "big", "annotations": {"note": "<&>" * 480_000}},  # 1.4 MiB in etcd
        "spec": {"containers": [{"name": "c", "env": env}]},
    }
    body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()
    for char in b"<&>":  # Go's encoding/json writes these as \u003c, \u0026, \u003e: 6 bytes each
        body = body.replace(bytes([char]), f"\\u{char:04x}".encode())
    assert len(body) > 12 << 20
    status, answer = post(server.port, body)
    assert status == 200
    assert len(json.loads(answer)["NodeNames"]) == 15_000
    assert [verb for verb, _ in fake.calls] == ["filter"]


def test_an_idle_kept_alive_connection_is_closed_after_the_idle_timeout() -> None:
    server, _ = serve(limits=ConnectionLimits(idle_timeout_s=0.2))
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            resp = http.client.HTTPResponse(sock)
            resp.begin()
            assert resp.status == 200 and resp.getheader("Connection") != "close"
            resp.read()
            resp.close()
            sock.settimeout(10)  # a bound for the test, not a speed: the server closes after 0.2 s
            try:
                closed = sock.recv(1) == b""
            except ConnectionResetError:
                closed = True
            except TimeoutError:
                closed = False
            assert closed, "the server keeps an idle connection (and its thread) forever"
        assert still_serving(server.port)
    finally:
        server.stop()


# --- TLS and client certificates (finding 7) -----------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "1", "-subj", f"/CN={name}",
        cwd=d,
    )  # fmt: skip


def _signed(d: Path, name: str, ca: str, ext: str) -> None:
    (d / f"{name}.ext").write_text(ext + "\n")
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
        cwd=d,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", "1", "-extfile", f"{name}.ext",
        cwd=d,
    )  # fmt: skip


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA with a server and a client certificate, and a stranger's CA with its own client."""
    d = tmp_path_factory.mktemp("certs")
    _ca(d, "ca")
    _signed(d, "server", "ca", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth")
    _signed(d, "client", "ca", "extendedKeyUsage=clientAuth")
    _ca(d, "stranger-ca")
    _signed(d, "stranger", "stranger-ca", "extendedKeyUsage=clientAuth")
    return d


@pytest.fixture
def tls_server(certs: Path) -> Iterator[tuple[ExtenderServer, EchoExtender]]:
    tls = TlsSettings(
        cert_file=certs / "server.crt", key_file=certs / "server.key", client_ca_file=certs / "ca.crt"
    )
    server, fake = serve(tls=tls, limits=ConnectionLimits(request_timeout_s=5))
    yield server, fake
    server.stop()


def https(port: int, certs: Path, client: str | None, method: str, path: str) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    if client is not None:
        ctx.load_cert_chain(certs / f"{client}.crt", certs / f"{client}.key")
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request(method, path, body=FILTER if method == "POST" else None)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_over_tls_only_a_client_certificate_from_the_client_ca_reaches_the_verbs(
    tls_server: tuple[ExtenderServer, EchoExtender], certs: Path
) -> None:
    server, fake = tls_server
    status, body = https(server.port, certs, None, "POST", "/kubegpu/bind")
    assert status == 403, "no client certificate: refused"
    assert "client certificate" in json.loads(body)["Error"]
    with pytest.raises(OSError):  # a certificate from another CA fails the handshake
        https(server.port, certs, "stranger", "POST", "/kubegpu/bind")
    assert fake.calls == []
    status, body = https(server.port, certs, "client", "POST", "/kubegpu/filter")
    assert status == 200 and json.loads(body)["NodeNames"] == ["a", "b"]
    assert [verb for verb, _ in fake.calls] == ["filter"]


def test_over_tls_kubelets_probes_need_no_client_certificate(
    tls_server: tuple[ExtenderServer, EchoExtender], certs: Path
) -> None:
    server, _ = tls_server
    assert https(server.port, certs, None, "GET", "/healthz")[0] == 200
    assert https(server.port, certs, None, "GET", "/readyz")[0] == 200


def test_a_client_that_never_finishes_its_handshake_blocks_nobody(
    tls_server: tuple[ExtenderServer, EchoExtender], certs: Path
) -> None:
    server, _ = tls_server
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as silent,
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as plaintext,
    ):
        plaintext.sendall(b"POST /kubegpu/bind HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
        assert https(server.port, certs, "client", "POST", "/kubegpu/filter")[0] == 200
        try:
            answer = plaintext.recv(100)
        except ConnectionResetError:
            answer = b""
        assert not answer.startswith(b"HTTP/"), "plain HTTP is not served on the TLS port"
        del silent
