"""Hostile nodes and pods, events out of order, and binds that fail every way, for a bounded number of
steps with a fixed seed (issue 55): nothing escapes the watch loop or the verbs, and no GPU that only
this extender's own filter hands out is ever promised more than 1000 milli.

The invariant is checked on the *clean* nodes: nodes no hostile event touches and no hostile pod is
bound to (on the others the API server may really show more than a GPU holds, and the ledger must
count it). There, after every step, no GPU has less than 0 milli free, and the milli counted equals
what this extender's live holdings ask for, exactly.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

from kubegpu.errors import ApiServerError
from kubegpu.extender.assignment import ANNOTATION
from kubegpu.extender.cluster import NODES, PODS, ClusterSync
from kubegpu.extender.handlers import Extender
from kubegpu.extender.ledger import HoldKind
from tests.unit.extender.conftest import Clock, gpu_pod, ledger
from tests.unit.extender.test_cluster_sync import OnePage

SEED = 55
STEPS = 1500
CLEAN = [f"clean-{i}" for i in range(3)]
DIRTY = [f"dirty-{i}" for i in range(3)]

QUANTITIES: list[Any] = [
    "10P", "9Ei", "1e999999", "1e18", "9999999999999", "-1", "abc", "", None, 5, 1.5, True, {"a": 1},
    [], "500m", "1", "2", "0", "1e3", "64Gi", "0.5", "NaN", "Infinity", "1e-999999",
]  # fmt: skip


def node_object(name: str, gpus: Any, *, label: Any = None, cpu: Any = "64", memory: Any = "256Gi") -> Any:
    labels = {} if label is None else {"nvidia.com/gpu.count": label}
    return {
        "metadata": {"name": name, "labels": labels, "resourceVersion": "7"},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpus}},
    }


def hostile_node(rng: random.Random) -> Any:
    name = rng.choice(DIRTY)
    pick = rng.random()
    if pick < 0.1:
        return rng.choice([[], "node", {"metadata": []}, {"metadata": {"name": 3}}, None])
    obj = node_object(
        name,
        rng.choice([*QUANTITIES, "4", "8"]),
        label=rng.choice([None, "9999999999999", "4", "x", 7, "2", "1025", "1024"]),
        cpu=rng.choice(QUANTITIES),
        memory=rng.choice(QUANTITIES),
    )
    if pick < 0.2:
        obj["status"] = rng.choice(["up", [], {"allocatable": "all"}])
    if pick < 0.25:
        obj["metadata"]["annotations"] = rng.choice(["a", {"kubegpu.io/gpu-uuids": "GPU-a,GPU-a,GPU-b"}])
    return obj


def forged_assignment(rng: random.Random, node: str) -> Any:
    if rng.random() < 0.2:
        return rng.choice(["{", "[]", "null", json.dumps({"node": node}), 12, None])
    gpus = [rng.choice([0, 1, 2, 3, 7, 2**40, -1]) for _ in range(rng.randint(0, 3))]
    doc = {
        "node": rng.choice([node, "elsewhere", "", 5]),
        "gpus": gpus,
        "uuids": rng.choice([[], ["GPU-a"] * len(gpus), [f"GPU-{g}" for g in gpus]]),
        "milli": rng.choice([1, 500, 1000, 1001, 0, "1000"]),
        "version": 1,
    }
    return json.dumps(doc)


def hostile_pod(rng: random.Random, i: int) -> Any:
    pick = rng.random()
    if pick < 0.05:
        return rng.choice([[], "pod", None, 3, {"metadata": "x"}])
    node = rng.choice([*DIRTY, "nowhere", ""])
    pod = gpu_pod(
        f"h{i}",
        gpus=rng.choice([0, 1, 2, 4, 8, 17]),
        node=node,
        phase=rng.choice(["Running", "Pending", "Succeeded", "Failed", "", "Weird"]),
    )
    pod["metadata"]["uid"] = rng.choice([f"h-{rng.randint(0, 60)}", f"h-{i}", "", 12])
    requests = pod["spec"]["containers"][0]["resources"]["requests"]
    for key in ("cpu", "memory", "nvidia.com/gpu", "kubegpu.io/gpu-milli"):
        if rng.random() < 0.3:
            requests[key] = rng.choice(QUANTITIES)
    if rng.random() < 0.5:
        pod["metadata"]["annotations"] = {ANNOTATION: forged_assignment(rng, node)}
    if pick < 0.15:
        pod["spec"]["containers"] = rng.choice(
            ["x", [1], [{"resources": []}], None, [{"resources": {"requests": 5}}]]
        )
    elif pick < 0.2:
        pod["spec"]["nodeName"] = rng.choice([5, ["dirty-0"], {"n": 1}])
    elif pick < 0.25:
        pod["spec"]["overhead"] = rng.choice([{"cpu": "1e999999"}, "x", {"memory": "9Ei"}])
    elif pick < 0.3:
        pod["spec"]["initContainers"] = [{"resources": {"limits": {"cpu": rng.choice(QUANTITIES)}}}]
    return pod


class Api:
    """The watch plays the batch it is given; the list is the test's view of the API."""

    def __init__(self) -> None:
        self.batch: list[Any] = []
        self.listed: dict[str, list[Any]] = {NODES: [], PODS: []}
        self.sync: ClusterSync | None = None

    def list_pages(self, path: str, **_: Any) -> OnePage:
        return OnePage(list(self.listed[path]), "1")

    def watch(self, path: str, *, resource_version: str, timeout_s: int) -> Iterator[Any]:
        batch, self.batch = self.batch, []
        if not batch and self.sync is not None:
            self.sync.stop()
        yield from batch


class Binder:
    """Binding outcomes: ``ok``; ``refused`` (409); ``lands`` (504, written); ``lost`` (timeout, not
    written); ``late`` (504, written later: ``land`` within the TTL, as an API server's write does)."""

    def __init__(self, rng: random.Random, clock: Clock) -> None:
        self.rng = rng
        self.clock = clock
        self.pods: dict[str, dict[str, Any]] = {}
        self.outcome = "ok"
        self.bound: list[str] = []
        self.late: list[tuple[float, str, str, dict[str, str]]] = []

    def land(self) -> list[dict[str, Any]]:
        """Writes still in flight land now (those younger than the TTL); the pods they bound."""
        landed = []
        for when, key, node, written in self.late:
            pod = self.pods.get(key)
            if pod is not None and self.clock.now - when < 30 and not pod["spec"].get("nodeName"):
                pod["spec"]["nodeName"] = node
                pod["metadata"]["annotations"] = written
                pod["status"] = {"phase": "Running"}
                landed.append(json.loads(json.dumps(pod)))
        self.late = []
        return landed

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        if self.rng.random() < 0.1:
            raise ApiServerError("not reachable", status=0)
        return self.pods.get(f"{namespace}/{name}")

    def bind(self, namespace: str, name: str, *, uid: str, node: str, annotations: Any) -> None:
        pod = self.pods[f"{namespace}/{name}"]
        if self.outcome in ("ok", "lands"):
            pod["spec"]["nodeName"] = node
            pod["metadata"]["annotations"] = dict(annotations)
            pod["status"] = {"phase": "Running"}
            self.bound.append(uid)
        if self.outcome == "refused":
            raise ApiServerError("HTTP 409", status=409)
        if self.outcome == "lands":
            raise ApiServerError("HTTP 504", status=504)
        if self.outcome == "lost":
            raise ApiServerError("not reachable: read timed out", status=0)
        if self.outcome == "late":
            self.late.append((self.clock.now, f"{namespace}/{name}", node, dict(annotations)))
            raise ApiServerError("HTTP 504: the write is still in progress", status=504)


def check_clean_nodes(book: Any, ours: list[str]) -> None:
    snap = book.snapshot()
    held = dict.fromkeys(CLEAN, 0)
    for uid in set(ours):
        h = book.holding(uid)
        if h is not None and h.node in held:
            held[h.node] += h.ask.num_gpu * h.ask.gpu_milli
    for name in CLEAN:
        free = snap[name].gpu_free_milli
        assert min(free) >= 0, (name, free)
        assert 4000 - sum(free) == held[name], (name, free, held[name])


def test_hostile_objects_and_failing_binds_never_stop_the_watch_or_overcommit_a_gpu() -> None:
    rng = random.Random(SEED)
    clock = Clock()
    book = ledger([], clock=clock)
    api = Api()
    sync = ClusterSync(api, book, on_synced=lambda: None, wait=lambda stop, s: stop.is_set())  # type: ignore[arg-type]
    api.sync = sync
    binder = Binder(rng, clock)
    ext = Extender(book, binder)
    api.listed[NODES] = [node_object(n, "4", label="4") for n in CLEAN + DIRTY]
    api.batch = []
    sync._run(NODES)  # the first list; the empty watch stops the loop
    assert set(book.snapshot()) == set(CLEAN + DIRTY)

    ours: list[str] = []
    for step in range(STEPS):
        pick = rng.random()
        if pick < 0.25:  # hostile node events
            api.batch = [
                {
                    "type": rng.choice(["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "?"]),
                    "object": hostile_node(rng),
                }
                for _ in range(rng.randint(1, 4))
            ]
            sync._watch(NODES, "1")
        elif pick < 0.55:  # hostile pod events, deletes of unknown pods, garbage events
            batch: list[Any] = []
            for j in range(rng.randint(1, 5)):
                obj = hostile_pod(rng, step * 10 + j)
                batch.append(
                    {"type": rng.choice(["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]), "object": obj}
                )
            if rng.random() < 0.1:
                batch.append(rng.choice(["junk", None, {"type": "ADDED"}, {"type": "ADDED", "object": 5}]))
            api.batch = batch
            sync._watch(PODS, "1")
        elif pick < 0.62:  # hostile verbs: filter of garbage, binds of pods no filter placed
            junk = hostile_pod(rng, step)
            chosen = ext.filter({"Pod": junk, "NodeNames": rng.sample(CLEAN + DIRTY, 3)})["NodeNames"]
            if chosen:  # a reservation of our filter: it counts like any other
                ours.append(junk["metadata"]["uid"])
            before = len(binder.bound)
            reply = ext.bind(
                {
                    "PodName": f"h{step}",
                    "PodNamespace": "default",
                    "PodUID": f"h-{step}",
                    "Node": rng.choice(CLEAN),
                }
            )
            assert reply["Error"] and len(binder.bound) == before
        elif pick < 0.67:  # a relist of the pods: the test's view of the API
            api.listed[PODS] = [*binder.pods.values(), *(hostile_pod(rng, step * 7 + k) for k in range(3))]
            book.replace_pods(api.listed[PODS])
        elif pick < 0.7:
            clock.now += rng.choice([1, 10, 40])
        elif pick < 0.75:  # Bindings answered 504 land now
            api.batch = [{"type": "MODIFIED", "object": p} for p in binder.land()]
            sync._watch(PODS, "1")
        else:  # one of our pods: filter, bind with some outcome, events in any order, deletes
            pending = [p for p in binder.pods.values() if not p["spec"].get("nodeName")]
            if pending and rng.random() < 0.4:  # kube-scheduler retries a pod not bound yet
                pod = rng.choice(pending)
            else:
                k = len(ours)
                shape = rng.choice([{"milli": 300}, {"milli": 500}, {"milli": 810}, {"gpus": 1}, {"gpus": 2}])
                pod = gpu_pod(f"o{k}", **shape)
                pod["metadata"]["uid"] = f"ours-{k}"
                binder.pods[f"default/o{k}"] = pod
                ours.append(pod["metadata"]["uid"])
            reply = ext.filter({"Pod": pod, "NodeNames": rng.sample(CLEAN + DIRTY, rng.randint(1, 6))})
            check_clean_nodes(book, ours)
            if reply["NodeNames"]:
                node = reply["NodeNames"][0]
                binder.outcome = rng.choice(["ok", "ok", "refused", "lands", "lost", "late"])
                if rng.random() < 0.2:  # the watch shows an earlier version after the bind
                    api.batch = [{"type": "MODIFIED", "object": json.loads(json.dumps(pod))}]
                meta = pod["metadata"]
                ext.bind(
                    {"PodName": meta["name"], "PodNamespace": "default", "PodUID": meta["uid"], "Node": node}
                )
                if binder.outcome in ("ok", "lands"):
                    api.batch = [*api.batch, {"type": "MODIFIED", "object": json.loads(json.dumps(pod))}]
                sync._watch(PODS, "1")
            if binder.pods and rng.random() < 0.5:  # a pod of ours deleted (the pending ones too)
                doc = binder.pods.pop(rng.choice(sorted(binder.pods)))
                api.batch = [{"type": "DELETED", "object": doc}]
                sync._watch(PODS, "1")
        check_clean_nodes(book, ours)

    # the real loop over what is left: a list, hostile events, no exception, no relist
    api.listed[PODS] = [*binder.pods.values(), *(hostile_pod(rng, k) for k in range(50))]
    api.batch = [{"type": "ADDED", "object": hostile_pod(rng, 10_000 + k)} for k in range(50)]
    calls: list[str] = []
    real_list = api.list_pages

    def counted(path: str, **_: Any) -> OnePage:
        calls.append(path)
        return real_list(path)

    api.list_pages = counted  # type: ignore[method-assign]
    sync._stop.clear()
    sync._run(PODS)
    assert calls == [PODS]  # listed once: no exception sent it back to a relist
    assert all(h.failing_s == 0 for h in sync.health())
    check_clean_nodes(book, ours)
    assert len(binder.bound) > 50  # the run did place and bind pods
    kinds = {h.kind for h in (book.holding(u) for u in set(ours)) if h is not None}
    assert HoldKind.BOUND in kinds
