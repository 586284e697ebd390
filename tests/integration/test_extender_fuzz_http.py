"""The extender as kube-scheduler and the API server see it, under hostile input for a bounded number of
steps with a fixed seed (issue 55): its real HTTP server takes filter and bind calls and garbage
requests, and its real list/watch code reads a stub API server over HTTP that streams hostile nodes,
pods and raw garbage lines, ends its watches early and forgets its history. Afterwards no thread has
died, /healthz and /readyz answer 200, and no GPU of the clean nodes (the ones no hostile object
names) was ever handed out past 1000 milli by the extender's own binds."""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import socket
import time
from pathlib import Path
from typing import Any

from kubegpu.extender.assignment import ANNOTATION
from kubegpu.extender.cluster import NODES, PODS, ClusterSync
from kubegpu.extender.handlers import Extender
from kubegpu.extender.ledger import Ledger
from kubegpu.extender.server import ExtenderServer
from kubegpu.extender.workload import default_typical
from kubegpu.kubeapi import KubeApi
from kubegpu.model.assignment import decode
from kubegpu.sim.policy import get_policy
from tests.stub_apiserver import StubApiServer, kubeconfig
from tests.unit.extender.conftest import gpu_pod
from tests.unit.extender.test_fuzz import CLEAN, DIRTY, hostile_node, hostile_pod, node_object

SEED = 5555
STEPS = 250
GPUS = 4


class Binder:
    """The API side of bind: the pods the test created; a bind is written and shown on the watch."""

    def __init__(self, stub: StubApiServer) -> None:
        self.stub = stub
        self.pods: dict[str, dict[str, Any]] = {}
        self.placed: dict[str, tuple[str, tuple[int, ...], int]] = {}  # uid -> node, GPUs, milli

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        pod = self.pods.get(f"{namespace}/{name}")
        return json.loads(json.dumps(pod)) if pod is not None else None

    def bind(self, namespace: str, name: str, *, uid: str, node: str, annotations: Any) -> None:
        pod = self.pods[f"{namespace}/{name}"]
        pod["spec"]["nodeName"] = node
        pod["metadata"]["annotations"] = dict(annotations)
        pod["status"] = {"phase": "Running"}
        if ANNOTATION in annotations:
            a = decode(annotations[ANNOTATION])
            self.placed[uid] = (node, a.gpus, a.milli)
        self.stub.push(PODS, "MODIFIED", pod)


def post(port: int, verb: str, body: object) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(
            "POST", f"/kubegpu/{verb}", body=json.dumps(body), headers={"Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


def get(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def garbage(port: int, rng: random.Random) -> None:
    """A request the server must refuse, or a client that goes away; the answer is not checked here."""
    payloads = [
        b"POST /kubegpu/filter HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}",
        b"POST /kubegpu/bind HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        b"POST /kubegpu/filter HTTP/1.1\r\nHost: x\r\nContent-Length: 20000\r\n\r\n" + b"[" * 20000,
        b"POST /kubegpu/filter HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nnull!",
        b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /kubegpu/filter HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",  # then gone
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS hello on plain HTTP
    ]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(rng.choice(payloads))
        s.settimeout(2)
        with contextlib.suppress(OSError):
            s.recv(4096)


def wait(what: str, check: Any, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_hostile_http_and_watch_input_never_kill_a_thread_or_overcommit_a_gpu(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    stub = StubApiServer()
    stub.serve(NODES, [node_object(n, str(GPUS)) for n in CLEAN + DIRTY])
    stub.serve(PODS, [])
    url = stub.start()
    api = KubeApi(kubeconfig=str(kubeconfig(tmp_path / "kubeconfig", url)))
    ledger = Ledger(policy=get_policy("kubegpu"), typical=default_typical(), reservation_ttl_s=30.0)
    sync = ClusterSync(api, ledger, watch_timeout_s=5)
    binder = Binder(stub)
    front = Extender(ledger, binder, readiness=sync.ready, liveness=sync.alive, scheduler_names=["kubegpu"])
    server = ExtenderServer(front, "127.0.0.1:0")
    server.start()
    sync.start()
    try:
        wait("the first lists", sync.ready)
        port = server.port
        for step in range(STEPS):
            action = rng.random()
            if action < 0.25:  # a pod kubegpu's profile places: filter, then maybe bind
                name = f"p{step}"
                pod = gpu_pod(name, milli=rng.choice([0, 250, 500, 700, 1000]), gpus=0)
                if not pod["spec"]["containers"][0]["resources"]["requests"].get("kubegpu.io/gpu-milli"):
                    pod = gpu_pod(name, gpus=rng.choice([1, 2]))
                binder.pods[f"default/{name}"] = pod
                stub.push(PODS, "ADDED", pod)
                candidates = rng.sample(CLEAN, k=rng.randint(1, len(CLEAN)))
                status, answer = post(port, "filter", {"Pod": pod, "NodeNames": candidates})
                assert status == 200, answer
                chosen = answer.get("NodeNames") or []
                if chosen and rng.random() < 0.8:
                    post(port, "bind", {"PodName": name, "PodNamespace": "default",
                                        "PodUID": pod["metadata"]["uid"], "Node": chosen[0]})  # fmt: skip
            elif action < 0.35 and binder.placed:  # a bound pod deleted
                uid = rng.choice(sorted(binder.placed))
                pod = next(p for p in binder.pods.values() if p["metadata"]["uid"] == uid)
                del binder.placed[uid]
                stub.push(PODS, "DELETED", pod)
            elif action < 0.55:  # a hostile pod on a dirty node, or a line that is no event
                obj = hostile_pod(rng, step)
                if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
                    stub.push(PODS, rng.choice(["ADDED", "MODIFIED", "DELETED"]), obj)
                else:
                    stub.push_raw(PODS, json.dumps({"type": "ADDED", "object": obj}).encode())
            elif action < 0.7:  # a hostile node (dirty names only)
                obj = hostile_node(rng)
                if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
                    stub.push(NODES, rng.choice(["ADDED", "MODIFIED"]), obj)
                else:
                    stub.push_raw(NODES, rng.choice([b"{", b"[]", b'{"type": 5}', b'"x"']))
            elif action < 0.8:  # garbage for the HTTP server, and garbage verbs
                garbage(port, rng)
                post(port, rng.choice(["filter", "bind", "prioritize"]), rng.choice([[], {"Pod": 3}, {}]))
            elif action < 0.88:
                stub.end_watches()  # watches resume from their version
            elif action < 0.93:
                stub.expire(rng.choice([NODES, PODS]))  # 410 Gone: relist
            else:  # a pod still pending is filtered again (its earlier reservation is replaced)
                pending = [p for p in binder.pods.values() if not p["spec"].get("nodeName")]
                if pending:
                    pod = rng.choice(pending)
                    post(port, "filter", {"Pod": pod, "NodeNames": CLEAN})
            # the extender's own binds never put a clean GPU past 1000 milli
            held: dict[tuple[str, int], int] = {}
            for node, gpus, milli in binder.placed.values():
                for g in gpus:
                    held[(node, g)] = held.get((node, g), 0) + milli
            assert max(held.values(), default=0) <= 1000, held
        assert sync.alive(), [h for h in sync.health() if not h.alive]
        assert get(port, "/healthz") == 200
        wait("/readyz once the watches caught up", lambda: get(port, "/readyz") == 200)
        snapshot = ledger.snapshot()
        for name in CLEAN:
            assert min(snapshot[name].gpu_free_milli) >= 0, (name, snapshot[name])
        assert binder.placed, "the run bound no pod: it tested nothing"
    finally:
        sync.stop()
        server.stop()
        stub.stop()
