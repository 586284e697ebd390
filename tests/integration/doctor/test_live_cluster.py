"""The live client path: LiveCluster talks HTTP to a stub API server that serves the recorded objects.

This runs the official ``kubernetes`` client end to end (kubeconfig loading, requests, field selectors,
404s, logs) and checks that the doctor reaches the same findings as from the recorded objects.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from kubegpu.doctor import LiveCluster, RecordedCluster, Status, cluster_report, pod_report
from kubegpu.doctor.clusterprobe import dig

pytestmark = pytest.mark.integration

RECORDED = Path(__file__).parents[2] / "unit" / "doctor" / "recorded" / "healthy"


def _selector(query: dict[str, list[str]]) -> dict[str, str]:
    raw = query.get("fieldSelector", [""])[0]
    return dict(part.split("=", 1) for part in raw.split(",") if "=" in part)


class StubApi(BaseHTTPRequestHandler):
    """Just enough of the core/v1 read API for the doctor, backed by a RecordedCluster."""

    data: RecordedCluster

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        del format, args

    def _send(self, code: int, body: Any, content_type: str = "application/json") -> None:
        raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _list(self, kind: str, items: list[dict[str, Any]]) -> None:
        # the API leaves kind/apiVersion out of list items
        stripped = [{k: v for k, v in i.items() if k not in ("kind", "apiVersion")} for i in items]
        self._send(200, {"kind": kind, "apiVersion": "v1", "metadata": {}, "items": stripped})

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query)
        parts = url.path.strip("/").split("/")
        sel = _selector(query)
        if parts == ["api", "v1", "nodes"]:
            return self._list("NodeList", self.data.list_nodes())
        if parts == ["api", "v1", "pods"]:
            return self._list("PodList", self.data.list_pods(node_name=sel.get("spec.nodeName")))
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) >= 5:
            ns, resource = parts[3], parts[4]
            if resource == "events":
                events = self.data.list_events(
                    namespace=ns, kind=sel["involvedObject.kind"], name=sel["involvedObject.name"]
                )
                return self._list("EventList", events)
            if resource == "pods" and len(parts) == 5:
                return self._list(
                    "PodList", self.data.list_pods(namespace=ns, node_name=sel.get("spec.nodeName"))
                )
            if resource == "pods" and len(parts) == 6:
                pod = self.data.get_pod(ns, parts[5])
                if pod is None:
                    return self._send(
                        404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}
                    )
                return self._send(200, pod)
            if resource == "pods" and parts[6:] == ["log"]:
                text = self.data.read_log(
                    ns,
                    parts[5],
                    query["container"][0],
                    previous=query.get("previous", ["false"])[0] == "true",
                    tail_lines=int(query.get("tailLines", ["200"])[0]),
                )
                if text is None:
                    return self._send(400, {"kind": "Status", "status": "Failure", "code": 400})
                return self._send(200, text, "text/plain")
        return self._send(404, {"kind": "Status", "status": "Failure", "code": 404})


@pytest.fixture
def recorded() -> RecordedCluster:
    return RecordedCluster.from_dir(RECORDED)


@pytest.fixture
def kubeconfig(tmp_path: Path, recorded: RecordedCluster) -> Iterator[Path]:
    handler = type("Handler", (StubApi,), {"data": recorded})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path = tmp_path / "kubeconfig"
    path.write_text(_kubeconfig(f"http://127.0.0.1:{server.server_address[1]}"))
    try:
        yield path
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _kubeconfig(server: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "stub", "cluster": {"server": server}}],
            "users": [{"name": "doctor", "user": {"token": "not-a-secret"}}],
            "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "doctor"}}],
            "current-context": "stub",
        }
    )


def test_live_client_reads_the_same_objects_as_the_recording(
    kubeconfig: Path, recorded: RecordedCluster
) -> None:
    live = LiveCluster(kubeconfig=str(kubeconfig))
    assert [dig(n, "metadata", "name") for n in live.list_nodes()] == [
        dig(n, "metadata", "name") for n in recorded.list_nodes()
    ]
    assert {dig(p, "metadata", "name") for p in live.list_pods(node_name="gpu-node-1")} == {
        "nvidia-device-plugin-ds-x7k2p",
        "train-a",
    }
    assert live.get_pod("ml", "absent") is None
    log = live.read_log("kube-system", "nvidia-device-plugin-ds-x7k2p", "nvidia-device-plugin-ctr")
    assert log is not None and "Registered device plugin" in log
    assert live.read_log("ml", "train-a", "trainer", previous=True) is None


def test_live_and_recorded_reports_agree_on_a_broken_cluster(
    kubeconfig: Path, recorded: RecordedCluster
) -> None:
    del recorded.nodes[1]["spec"]["taints"]
    recorded.logs["kube-system/nvidia-device-plugin-ds-x7k2p/nvidia-device-plugin-ctr"] += (
        "\nNo devices found."
    )
    del recorded.nodes[0]["status"]["allocatable"]["nvidia.com/gpu"]
    live = cluster_report(lambda: LiveCluster(kubeconfig=str(kubeconfig)))
    offline = cluster_report(lambda: recorded)
    assert live.findings == offline.findings
    assert live.by_id("plugin.pod").status is Status.FAIL
    assert live.by_id("cluster.allocatable").status is Status.FAIL
    assert live.by_id("cluster.taints").status is Status.WARN


def test_live_pod_report_matches_the_recorded_one(kubeconfig: Path, recorded: RecordedCluster) -> None:
    live = pod_report(lambda: LiveCluster(kubeconfig=str(kubeconfig)), "ml", "train-a")
    assert live.findings == pod_report(lambda: recorded, "ml", "train-a").findings
    assert live.exit_code == 0


def test_api_server_that_refuses_connections_fails_fast(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "kubeconfig"
    path.write_text(_kubeconfig(f"http://127.0.0.1:{port}"))
    start = time.monotonic()
    report = cluster_report(lambda: LiveCluster(kubeconfig=str(path)))
    assert time.monotonic() - start < 10
    api = report.by_id("cluster.api")
    assert api.status is Status.FAIL
    assert f"127.0.0.1:{port}" in api.summary
