"""The extender end to end over real HTTP: kube-scheduler's calls in, an API server's list/watch/binding out.

A stub API server (lists, streaming watches, Bindings that set ``spec.nodeName`` and copy the
Binding's annotations onto the pod, as the real one does) stands in for the cluster; the official
client reaches it through ``kubegpu.kubeapi``. The test posts ``ExtenderArgs`` and
``ExtenderBindingArgs`` exactly as kube-scheduler sends them and checks what a user sees: the pod
bound with its assignment annotation, shares kept apart, a deleted pod's share free again, and a
restarted extender rebuilding the same accounting from the API.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from kubegpu.extender.assignment import ANNOTATION, decode
from kubegpu.extender.cluster import ApiBinder, ClusterSync
from kubegpu.extender.handlers import Extender
from kubegpu.extender.ledger import Ledger
from kubegpu.extender.server import ExtenderServer
from kubegpu.extender.workload import default_typical
from kubegpu.kubeapi import KubeApi
from kubegpu.sim.policy import get_policy
from tests.unit.extender.conftest import gpu_pod

pytestmark = pytest.mark.integration


@dataclass
class Store:
    """The stub's objects and its event log (resource version = position in the log)."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # by namespace/name
    events: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # (collection, type, obj)
    bindings: list[dict[str, Any]] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def emit(self, collection: str, kind: str, obj: dict[str, Any]) -> None:
        with self.cond:
            obj = json.loads(json.dumps(obj))
            obj.setdefault("metadata", {})["resourceVersion"] = str(len(self.events) + 1)
            self.events.append((collection, kind, obj))
            self.cond.notify_all()

    def put_node(self, node: dict[str, Any]) -> None:
        self.nodes[node["metadata"]["name"]] = node
        self.emit("nodes", "ADDED", node)

    def put_pod(self, pod: dict[str, Any], kind: str = "ADDED") -> None:
        meta = pod["metadata"]
        self.pods[f"{meta['namespace']}/{meta['name']}"] = pod
        self.emit("pods", kind, pod)

    def delete_pod(self, key: str) -> None:
        self.emit("pods", "DELETED", self.pods.pop(key))


class StubApi(BaseHTTPRequestHandler):
    store: Store
    protocol_version = "HTTP/1.0"  # a watch body ends when the connection closes

    def log_message(self, format: str, *args: Any) -> None:
        del format, args

    def _send(self, code: int, body: Any) -> None:
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query)
        parts = url.path.strip("/").split("/")
        s = self.store
        if parts in (["api", "v1", "nodes"], ["api", "v1", "pods"]):
            collection = parts[2]
            if query.get("watch"):
                return self._watch(
                    collection, int(query["resourceVersion"][0]), int(query["timeoutSeconds"][0])
                )
            with s.cond:
                items = list((s.nodes if collection == "nodes" else s.pods).values())
                version = str(len(s.events))
            return self._send(200, {"metadata": {"resourceVersion": version}, "items": items})
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 6 and parts[4] == "pods":
            pod = s.pods.get(f"{parts[3]}/{parts[5]}")
            return self._send(200, pod) if pod else self._send(404, {"kind": "Status", "code": 404})
        return self._send(404, {"kind": "Status", "code": 404})

    def _watch(self, collection: str, since: int, timeout_s: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        deadline = time.monotonic() + min(timeout_s, 5)
        seen = since
        s = self.store
        while time.monotonic() < deadline:
            with s.cond:
                fresh = s.events[seen:]
                seen = len(s.events)
                if not fresh:
                    s.cond.wait(timeout=0.2)
            for coll, kind, obj in fresh:
                if coll == collection:
                    self.wfile.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                    self.wfile.flush()

    def do_POST(self) -> None:
        parts = urlparse(self.path).path.strip("/").split("/")
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if parts[:3] == ["api", "v1", "namespaces"] and parts[4:] == ["pods", parts[5], "binding"]:
            s = self.store
            key = f"{parts[3]}/{parts[5]}"
            pod = s.pods.get(key)
            if pod is None:
                return self._send(404, {"kind": "Status", "code": 404})
            if pod["spec"].get("nodeName") or body["metadata"].get("uid") != pod["metadata"]["uid"]:
                return self._send(409, {"kind": "Status", "code": 409, "message": "conflict"})
            s.bindings.append(body)
            pod = json.loads(json.dumps(pod))
            pod["spec"]["nodeName"] = body["target"]["name"]
            pod["metadata"].setdefault("annotations", {}).update(body["metadata"].get("annotations") or {})
            pod["status"] = {"phase": "Running"}
            s.put_pod(pod, "MODIFIED")
            return self._send(201, {"kind": "Status", "status": "Success"})
        return self._send(404, {"kind": "Status", "code": 404})


def node(name: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.count": str(gpus)}, "annotations": {}},
        "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": str(gpus)}},
    }


@dataclass
class Stack:
    ledger: Ledger
    sync: ClusterSync
    server: ExtenderServer

    def post(self, verb: str, body: dict[str, Any]) -> Any:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.server.port}/kubegpu/{verb}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
            return json.loads(resp.read())

    def get(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.server.port}{path}", timeout=5) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            exc.close()
            return int(exc.code)

    def schedule(self, pod: dict[str, Any], nodes: list[str]) -> str | None:
        """kube-scheduler's calls for one pod: filter, then bind to the one node left."""
        reply = self.post("filter", {"Pod": pod, "Nodes": None, "NodeNames": nodes})
        assert reply["Error"] == ""
        if not reply["NodeNames"]:
            return None
        assert len(reply["NodeNames"]) == 1
        meta = pod["metadata"]
        bound = self.post(
            "bind",
            {
                "PodName": meta["name"],
                "PodNamespace": meta["namespace"],
                "PodUID": meta["uid"],
                "Node": reply["NodeNames"][0],
            },
        )
        assert bound == {"Error": ""}
        return str(reply["NodeNames"][0])


def wait_until(what: str, check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def store() -> Store:
    s = Store()
    s.put_node(node("gpu-a", 2))
    s.put_node(node("gpu-b", 1))
    return s


@pytest.fixture
def kubeconfig(tmp_path: Path, store: Store) -> Iterator[Path]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (StubApi,), {"store": store}))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "stub", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}
                ],
                "users": [{"name": "x", "user": {"token": "not-a-secret"}}],
                "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "x"}}],
                "current-context": "stub",
            }
        )
    )
    yield path
    server.shutdown()
    server.server_close()


@pytest.fixture
def start(kubeconfig: Path) -> Iterator[Callable[[], Stack]]:
    stacks: list[Stack] = []

    def make() -> Stack:
        api = KubeApi(kubeconfig=str(kubeconfig))
        ledger = Ledger(policy=get_policy("kubegpu"), typical=default_typical())
        front = Extender(ledger, ApiBinder(api), ready=False)
        sync = ClusterSync(api, ledger, on_synced=lambda: setattr(front, "ready", True), watch_timeout_s=5)
        server = ExtenderServer(front, "127.0.0.1:0")
        server.start()
        stack = Stack(ledger, sync, server)
        assert stack.get("/readyz") == 503
        sync.start()
        wait_until("the first lists", lambda: stack.get("/readyz") == 200)
        stacks.append(stack)
        return stack

    yield make
    for s in stacks:
        s.sync.stop()
        s.server.stop()


def test_pods_are_bound_with_their_gpus_and_shares_follow_the_rules(
    store: Store, start: Callable[[], Stack]
) -> None:
    ext = start()
    assert ext.get("/healthz") == 200
    nodes = ["gpu-a", "gpu-b"]
    halves = [gpu_pod(f"half-{i}", milli=500) for i in range(2)]
    for p in halves:
        store.put_pod(p)
        assert ext.schedule(p, nodes) is not None
    got = [
        decode(store.pods[f"default/{p['metadata']['name']}"]["metadata"]["annotations"][ANNOTATION])
        for p in halves
    ]
    assert got[0].node == got[1].node and got[0].gpus == got[1].gpus, "two 500m pods share one GPU"
    assert all(
        store.pods[f"default/{p['metadata']['name']}"]["spec"]["nodeName"] == got[0].node for p in halves
    )
    whole = [gpu_pod(f"whole-{i}", milli=1000) for i in range(3)]
    placed = []
    for p in whole:
        store.put_pod(p)
        placed.append(ext.schedule(p, nodes))
    assert placed.count(None) == 1, (
        "3 GPUs, one shared by the halves: two 1000m pods fit, never on the shared GPU"
    )
    taken = {(a.node, a.gpus) for a in got}
    for p, where in zip(whole, placed, strict=True):
        if where is not None:
            a = decode(store.pods[f"default/{p['metadata']['name']}"]["metadata"]["annotations"][ANNOTATION])
            assert (a.node, a.gpus) not in taken
            taken.add((a.node, a.gpus))
    assert len(store.bindings) == 4

    # the last pod's filter answer says why each node was refused
    last = gpu_pod("late", milli=1000)
    store.put_pod(last)
    reply = ext.post("filter", {"Pod": last, "Nodes": None, "NodeNames": nodes})
    assert reply["NodeNames"] == []
    assert set(reply["FailedNodes"]) == set(nodes)

    # deleting a share frees it once the watch reports it: then the 1000m pod fits
    for p in halves:
        store.delete_pod(f"default/{p['metadata']['name']}")
    wait_until(
        "the deletes", lambda: sum(sum(u.gpu_free_milli) for u in ext.ledger.snapshot().values()) == 1000
    )
    assert ext.schedule(last, nodes) is not None


def test_a_restarted_extender_rebuilds_the_same_state_and_binds_only_what_it_filtered(
    store: Store, start: Callable[[], Stack]
) -> None:
    first = start()
    pods = [gpu_pod(f"p{i}", milli=m) for i, m in enumerate((300, 470, 810, 1000))]
    for p in pods:
        store.put_pod(p)
        first.schedule(p, ["gpu-a", "gpu-b"])
    wait_until(
        "the bindings",
        lambda: all(
            h is not None and h.kind == "bound"
            for h in (first.ledger.holding(p["metadata"]["uid"]) for p in pods)
        ),
    )
    second = start()
    assert second.ledger.snapshot() == first.ledger.snapshot()

    # a bind whose filter went to another (restarted) instance is refused: /bind binds only what this
    # extender's own filter placed there (kube-scheduler retries the pod: filter, then bind, here)
    late = gpu_pod("late", milli=200)
    store.put_pod(late)
    wait_until("the new pod", lambda: "default/late" in store.pods)
    reply = second.post(
        "bind", {"PodName": "late", "PodNamespace": "default", "PodUID": "uid-late", "Node": "gpu-b"}
    )
    assert "no filter of this extender" in reply["Error"]
    assert not store.pods["default/late"]["spec"].get("nodeName")
    where = second.schedule(late, ["gpu-a", "gpu-b"])
    assert where is not None
    assert decode(store.pods["default/late"]["metadata"]["annotations"][ANNOTATION]).node == where


def test_bad_requests_get_a_clear_answer(start: Callable[[], Stack]) -> None:
    ext = start()
    bad = gpu_pod("both", milli=500, gpus=1)
    reply = ext.post("filter", {"Pod": bad, "Nodes": None, "NodeNames": ["gpu-a"]})
    assert reply["NodeNames"] == []
    assert "not both" in reply["FailedAndUnresolvableNodes"]["gpu-a"]
    req = urllib.request.Request(f"http://127.0.0.1:{ext.server.port}/kubegpu/filter", data=b"{nope")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    assert err.value.code == 400
    err.value.close()
