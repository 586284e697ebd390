"""KubeApi's own transport against a stub API server over real HTTP: credentials (token, rotating
token file, an exec plugin through the official client's loader), retries, 404, error messages and
the watch stream."""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from kubegpu.errors import ApiServerError
from kubegpu.kubeapi import KubeApi

pytestmark = pytest.mark.integration


class Stub(BaseHTTPRequestHandler):
    """Answers from ``script`` (path → (status, body) list, the last repeating); records what it saw."""

    script: ClassVar[dict[str, list[tuple[int, bytes | list[bytes]]]]] = {}
    seen: ClassVar[list[tuple[str, str, str]]] = []  # method, path, Authorization

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        path = self.path.split("?", 1)[0]
        self.seen.append((self.command, self.path, self.headers.get("Authorization", "")))
        answers = self.script.get(path, [(404, b'{"message": "not found"}')])
        status, body = answers.pop(0) if len(answers) > 1 else answers[0]
        self.send_response(status)
        if isinstance(body, list):  # a watch: chunks, split anywhere
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in body:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer


@pytest.fixture
def server() -> Iterator[str]:
    Stub.script, Stub.seen = {}, []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def kubeconfig(tmp_path: Path, server: str, user: dict[str, Any]) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "current-context": "c",
                "clusters": [{"name": "s", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "c", "context": {"cluster": "s", "user": "u"}}],
            }
        )
    )
    return path


def test_calls_carry_the_token_and_retry_only_what_is_idempotent(tmp_path: Path, server: str) -> None:
    api = KubeApi(kubeconfig=str(kubeconfig(tmp_path, server, {"token": "t0"})), sleep=lambda s: None)
    Stub.script["/api/v1/nodes/n0"] = [(503, b"busy"), (503, b"busy"), (200, b'{"kind": "Node"}')]
    assert api.get_node("n0") == {"kind": "Node"}
    assert [s[2] for s in Stub.seen] == ["Bearer t0"] * 3
    assert api.get_pod("default", "gone") is None, "404 is None"
    Stub.script["/api/v1/namespaces/d/events"] = [(503, b'{"message": "etcd is slow"}')]
    with pytest.raises(ApiServerError) as err:
        api.create_event("d", {"kind": "Event"})
    assert err.value.status == 503
    assert str(err.value) == f"{server}: POST /api/v1/namespaces/d/events: HTTP 503: etcd is slow"
    assert sum(1 for s in Stub.seen if s[1].startswith("/api/v1/namespaces/d/events")) == 1, "tried once"


def test_an_unreachable_server_is_status_0(tmp_path: Path) -> None:
    api = KubeApi(kubeconfig=str(kubeconfig(tmp_path, "http://127.0.0.1:9", {})), sleep=lambda s: None)
    with pytest.raises(ApiServerError) as err:
        api.get_node("n0", quick=True)
    assert err.value.status == 0 and "not reachable" in str(err.value)


def test_the_token_file_is_reread_each_minute(tmp_path: Path, server: str) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    now = [0.0]
    api = KubeApi(kubeconfig=str(kubeconfig(tmp_path, server, {"tokenFile": "token"})), clock=lambda: now[0])
    api.get_node("n0")
    token.write_text("second\n")
    now[0] = 30.0
    api.get_node("n0")
    now[0] = 61.0
    api.get_node("n0")
    token.unlink()  # a failed re-read keeps the last token
    now[0] = 200.0
    api.get_node("n0")
    assert [s[2] for s in Stub.seen] == ["Bearer first", "Bearer first", "Bearer second", "Bearer second"]


def test_watch_yields_one_event_per_line_and_errors_carry_the_status(tmp_path: Path, server: str) -> None:
    api = KubeApi(kubeconfig=str(kubeconfig(tmp_path, server, {})))
    events = [{"type": "ADDED", "object": {"metadata": {"name": f"p{i}"}}} for i in range(3)]
    stream = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    Stub.script["/api/v1/pods"] = [(200, [stream[:7], stream[7:50], stream[50:]])]
    assert list(api.watch("/api/v1/pods", resource_version="5")) == events
    assert "resourceVersion=5" in Stub.seen[-1][1] and "watch=1" in Stub.seen[-1][1]
    Stub.script["/api/v1/pods"] = [(403, b'{"message": "forbidden: no"}')]
    with pytest.raises(ApiServerError) as err:
        list(api.watch("/api/v1/pods", resource_version="5"))
    assert err.value.status == 403 and "forbidden: no" in str(err.value)


def test_an_exec_plugin_goes_through_the_official_loader(tmp_path: Path, server: str) -> None:
    pytest.importorskip("kubernetes")
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": "from-exec"},
    }
    plugin = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
            "args": ["-c", f"print({json.dumps(json.dumps(credential))})"],
        }
    }
    api = KubeApi(kubeconfig=str(kubeconfig(tmp_path, server, plugin)))
    api.get_node("n0")
    assert Stub.seen[-1][2] == "Bearer from-exec"


def test_without_the_official_client_an_exec_plugin_is_one_clear_error(
    tmp_path: Path, server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes", None)
    path = kubeconfig(tmp_path, server, {"exec": {"command": "aws"}})
    with pytest.raises(ApiServerError) as err:
        KubeApi(kubeconfig=str(path))
    assert str(path) in str(err.value) and "users[u].user.exec" in str(err.value)
    assert "kubernetes Python client" in str(err.value)


def test_missing_or_broken_kubeconfigs(tmp_path: Path) -> None:
    with pytest.raises(ApiServerError, match="no usable kubeconfig"):
        KubeApi(kubeconfig=str(tmp_path / "missing"))
    bad = tmp_path / "bad"
    bad.write_text("clusters: [unclosed\n")
    with pytest.raises(ApiServerError, match=f"bad kubeconfig {bad}: not YAML"):
        KubeApi(kubeconfig=str(bad))
    bad.write_text(json.dumps({"current-context": "c", "contexts": [{"name": "c", "context": {}}]}))
    with pytest.raises(ApiServerError, match=r"contexts\[c\]\.context\.cluster"):
        KubeApi(kubeconfig=str(bad))


def _pki(tmp: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (CN me), by openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=tmp, check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        "-subj", "/CN=test-ca")  # fmt: skip
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={'me' if name == 'client' else '127.0.0.1'}")  # fmt: skip
        (tmp / f"{name}.ext").write_text(ext + "\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-out", f"{name}.crt", "-extfile", f"{name}.ext")  # fmt: skip
    return {n: tmp / n for n in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")}


def test_tls_with_inline_ca_and_client_certificate(tmp_path: Path) -> None:
    pki = _pki(tmp_path)
    Stub.script, Stub.seen = {"/api/v1/nodes/n0": [(200, b"{}")]}, []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki["ca.crt"]))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_cert_chain(pki["server.crt"], pki["server.key"])
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"https://127.0.0.1:{srv.server_address[1]}"

        def data(name: str) -> str:
            return base64.b64encode(pki[name].read_bytes()).decode()

        path = kubeconfig(
            tmp_path, url, {"client-certificate-data": data("client.crt"), "client-key": "client.key"}
        )
        doc = json.loads(path.read_text())
        doc["clusters"][0]["cluster"]["certificate-authority-data"] = data("ca.crt")
        path.write_text(json.dumps(doc))
        assert KubeApi(kubeconfig=str(path)).get_node("n0") == {}
        # the server's certificate signed by another CA: refused, and said so
        doc["clusters"][0]["cluster"]["certificate-authority-data"] = data("client.crt")
        path.write_text(json.dumps(doc))
        with pytest.raises(ApiServerError) as err:
            KubeApi(kubeconfig=str(path)).get_node("n0", quick=True)
        assert err.value.status == 0 and "CERTIFICATE_VERIFY_FAILED" in str(err.value)
    finally:
        srv.shutdown()
        srv.server_close()
