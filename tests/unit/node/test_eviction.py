"""PodEvictor, shared by the quarantine and the MIG manager's drain: Eviction API only, PDB refusals
retried with backoff, pods that are not ours or already going left alone."""

from __future__ import annotations

from typing import Any, cast

from kubegpu.errors import ApiServerError
from kubegpu.kubeapi import KubeApi
from kubegpu.node.eviction import PodEvictor


class Api:
    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.evicted: list[tuple[str, str]] = []
        self.refuse = 0

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods.get((namespace, name))

    def evict(self, namespace: str, name: str) -> None:
        if self.refuse:
            self.refuse -= 1
            raise ApiServerError(
                "Cannot evict pod as it would violate the pod's disruption budget.", status=429
            )
        self.evicted.append((namespace, name))


def pod(node: str = "n0", terminating: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"deletionTimestamp": "now"} if terminating else {}
    return {"metadata": meta, "spec": {"nodeName": node}}


def test_only_running_pods_of_this_node_are_evicted_once() -> None:
    api = Api()
    api.pods = {("a", "mine"): pod(), ("a", "elsewhere"): pod("n1"), ("a", "going"): pod(terminating=True)}
    ev = PodEvictor(cast(KubeApi, api), node_name="n0", clock=lambda: 0.0)
    targets = [("a", "mine"), ("a", "elsewhere"), ("a", "going"), ("a", "gone")]
    assert ev.evict(targets) == [("a", "mine")]
    assert ev.evict(targets) == [] and api.evicted == [("a", "mine")]
    assert not ev.pending


def test_a_pdb_refusal_is_retried_after_the_backoff_never_deleted() -> None:
    api = Api()
    api.pods = {("a", "p"): pod()}
    api.refuse = 1
    now = [0.0]
    ev = PodEvictor(cast(KubeApi, api), node_name="n0", clock=lambda: now[0])
    assert ev.evict([("a", "p")]) == [] and ev.pending
    now[0] = 0.5
    assert ev.evict([("a", "p")]) == []  # backoff (1 s) not over
    now[0] = 1.5
    assert ev.evict([("a", "p")]) == [("a", "p")] and not ev.pending


def test_a_pod_that_left_the_list_is_forgotten() -> None:
    api = Api()
    api.pods = {("a", "p"): pod()}
    api.refuse = 5
    ev = PodEvictor(cast(KubeApi, api), node_name="n0", clock=lambda: 0.0)
    ev.evict([("a", "p")])
    assert ev.pending
    ev.evict([])
    assert not ev.pending
