"""The verbs answer in kube-scheduler's JSON shapes, and a refused Binding gives the GPUs back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubegpu.errors import ApiServerError
from kubegpu.extender.assignment import ANNOTATION, decode
from kubegpu.extender.handlers import MAX_PRIORITY, Extender
from tests.unit.extender.conftest import gpu_node, gpu_pod, ledger


class FakeBinder:
    def __init__(self, pods: dict[str, dict[str, Any]] | None = None, *, refuse: bool = False) -> None:
        self.pods = pods or {}
        self.refuse = refuse
        self.bound: list[tuple[str, str, dict[str, str]]] = []

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods.get(f"{namespace}/{name}")

    def bind(self, namespace: str, name: str, *, uid: str, node: str, annotations: Mapping[str, str]) -> None:
        if self.refuse:
            raise ApiServerError("HTTP 409: conflict", status=409)
        self.bound.append((f"{namespace}/{name}", node, dict(annotations)))


def bind_args(pod: dict[str, Any], node: str) -> dict[str, str]:
    meta = pod["metadata"]
    return {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}


def test_filter_with_node_objects_returns_the_chosen_node_object() -> None:
    ext = Extender(ledger([gpu_node("n1", 1), gpu_node("n2", 1)]), FakeBinder())
    items = [{"metadata": {"name": "n1"}}, {"metadata": {"name": "n2"}}]
    reply = ext.filter({"Pod": gpu_pod("a", gpus=1), "Nodes": {"items": items}, "NodeNames": None})
    assert reply["NodeNames"] is None
    assert len(reply["Nodes"]["items"]) == 1
    chosen = reply["Nodes"]["items"][0]["metadata"]["name"]
    assert chosen in ("n1", "n2")
    assert reply["FailedNodes"] == {}


def test_a_not_synced_extender_errors_rather_than_guessing() -> None:
    ext = Extender(ledger([gpu_node("n1", 1)]), FakeBinder(), ready=False)
    reply = ext.filter({"Pod": gpu_pod("a", gpus=1), "NodeNames": ["n1"]})
    assert "not synced" in reply["Error"]


def test_prioritize_gives_the_policy_node_the_top_score_and_reserves_nothing() -> None:
    book = ledger([gpu_node("n1", 1), gpu_node("n2", 1)])
    ext = Extender(book, FakeBinder())
    scores = ext.prioritize({"Pod": gpu_pod("a", gpus=1), "NodeNames": ["n1", "n2"]})
    assert sorted(s["Score"] for s in scores) == [0, MAX_PRIORITY]
    assert book.holding("uid-a") is None


def test_bind_writes_the_assignment_in_the_binding() -> None:
    binder = FakeBinder()
    ext = Extender(ledger([gpu_node("n1", 2)]), binder)
    pod = gpu_pod("a", milli=250)
    ext.filter({"Pod": pod, "NodeNames": ["n1"]})
    assert ext.bind(bind_args(pod, "n1")) == {"Error": ""}
    ((name, node, annotations),) = binder.bound
    assert (name, node) == ("default/a", "n1")
    assert decode(annotations[ANNOTATION]).milli == 250


def test_a_cpu_only_pod_is_bound_without_an_assignment() -> None:
    """With an empty managedResources list CPU-only pods reach the extender too; their Binding carries
    no GPU assignment (one with no GPUs would not decode on the node or after a restart)."""
    binder = FakeBinder()
    ext = Extender(ledger([gpu_node("n1", 1)]), binder)
    pod = gpu_pod("cpu", cpu_milli=500)
    ext.filter({"Pod": pod, "NodeNames": ["n1"]})
    assert ext.bind(bind_args(pod, "n1")) == {"Error": ""}
    assert binder.bound == [("default/cpu", "n1", {})]


def test_a_refused_binding_frees_the_gpus_and_reports_the_error() -> None:
    book = ledger([gpu_node("n1", 1)])
    ext = Extender(book, FakeBinder(refuse=True))
    pod = gpu_pod("a", gpus=1)
    ext.filter({"Pod": pod, "NodeNames": ["n1"]})
    assert "409" in ext.bind(bind_args(pod, "n1"))["Error"]
    assert book.snapshot()["n1"].gpu_free_milli == (1000,)


def test_bind_without_a_reservation_decides_on_the_given_node_or_refuses() -> None:
    pod = gpu_pod("a", gpus=1)
    binder = FakeBinder({"default/a": pod})
    ext = Extender(ledger([gpu_node("n1", 1), gpu_node("n2", 1)]), binder)
    assert ext.bind(bind_args(pod, "n2")) == {"Error": ""}
    assert binder.bound[0][1] == "n2"
    other = gpu_pod("b", gpus=1)
    binder.pods["default/b"] = other
    assert "no GPU with 1000m free" in ext.bind(bind_args(other, "n2"))["Error"]
    assert "gone" in ext.bind(bind_args(gpu_pod("c", gpus=1), "n1"))["Error"]
