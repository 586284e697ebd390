"""The verbs answer in kube-scheduler's JSON shapes; a refused Binding gives the GPUs back, one whose
outcome is unknown keeps them; bind binds only what this extender's filter placed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from kubegpu.errors import ApiServerError
from kubegpu.extender.assignment import ANNOTATION, decode
from kubegpu.extender.handlers import MAX_PRIORITY, Extender
from kubegpu.extender.ledger import HoldKind
from tests.unit.extender.conftest import Clock, gpu_node, gpu_pod, ledger


class FakeBinder:
    """The API's pods by namespace/name; ``fail``: what a Binding's write raises; ``lands``: whether
    that failed write reached the pod all the same (a 504 whose write landed)."""

    def __init__(
        self,
        pods: dict[str, dict[str, Any]] | None = None,
        *,
        refuse: bool = False,
        fail: Exception | None = None,
        lands: bool = False,
    ) -> None:
        self.pods = pods or {}
        self.fail = ApiServerError("HTTP 409: conflict", status=409) if refuse else fail
        self.lands = lands
        self.bound: list[tuple[str, str, dict[str, str]]] = []

    def add(self, *pods: dict[str, Any]) -> FakeBinder:
        for pod in pods:
            self.pods[f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"] = pod
        return self

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods.get(f"{namespace}/{name}")

    def bind(self, namespace: str, name: str, *, uid: str, node: str, annotations: Mapping[str, str]) -> None:
        if self.fail is None or self.lands:
            pod = self.pods[f"{namespace}/{name}"]
            pod["spec"]["nodeName"] = node
            pod["metadata"]["annotations"] = {**pod["metadata"]["annotations"], **annotations}
            self.bound.append((f"{namespace}/{name}", node, dict(annotations)))
        if self.fail is not None:
            raise self.fail


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
    pod = gpu_pod("a", milli=250)
    binder = FakeBinder().add(pod)
    ext = Extender(ledger([gpu_node("n1", 2)]), binder)
    ext.filter({"Pod": pod, "NodeNames": ["n1"]})
    assert ext.bind(bind_args(pod, "n1")) == {"Error": ""}
    ((name, node, annotations),) = binder.bound
    assert (name, node) == ("default/a", "n1")
    assert decode(annotations[ANNOTATION]).milli == 250


def test_a_cpu_only_pod_is_bound_without_an_assignment() -> None:
    """With an empty managedResources list CPU-only pods reach the extender too; their Binding carries
    no GPU assignment (one with no GPUs would not decode on the node or after a restart)."""
    pod = gpu_pod("cpu", cpu_milli=500)
    binder = FakeBinder().add(pod)
    ext = Extender(ledger([gpu_node("n1", 1)]), binder)
    ext.filter({"Pod": pod, "NodeNames": ["n1"]})
    assert ext.bind(bind_args(pod, "n1")) == {"Error": ""}
    assert binder.bound == [("default/cpu", "n1", {})]


def test_a_refused_binding_frees_the_gpus_and_reports_the_error() -> None:
    book = ledger([gpu_node("n1", 1)])
    pod = gpu_pod("a", gpus=1)
    ext = Extender(book, FakeBinder(refuse=True).add(pod))
    ext.filter({"Pod": pod, "NodeNames": ["n1"]})
    assert "409" in ext.bind(bind_args(pod, "n1"))["Error"]
    assert book.snapshot()["n1"].gpu_free_milli == (1000,)


# -- bind binds only what this extender's filter placed (issue 55, finding 7) ------------------------


def test_bind_without_a_reservation_of_this_extender_is_refused_and_writes_nothing() -> None:
    """An anonymous POST /bind, or a bind after a restart lost the filter's choice: refused, so that
    kube-scheduler retries the pod through filter; nothing is written, nothing is reserved."""
    pod = gpu_pod("a", gpus=1)
    binder = FakeBinder().add(pod)
    book = ledger([gpu_node("n1", 1), gpu_node("n2", 1)])
    ext = Extender(book, binder)
    error = ext.bind(bind_args(pod, "n2"))["Error"]
    assert "no filter of this extender placed the pod on that node" in error
    assert binder.bound == []
    assert book.holding("uid-a") is None
    assert book.snapshot()["n2"].gpu_free_milli == (1000,)


def test_bind_to_another_node_than_the_filter_chose_is_refused_and_the_reservation_kept() -> None:
    pod = gpu_pod("a", gpus=1)
    binder = FakeBinder().add(pod)
    book = ledger([gpu_node("n1", 1), gpu_node("n2", 1)])
    ext = Extender(book, binder)
    assert ext.filter({"Pod": pod, "NodeNames": ["n1"]})["NodeNames"] == ["n1"]
    assert "no filter of this extender" in ext.bind(bind_args(pod, "n2"))["Error"]
    assert binder.bound == []
    assert book.snapshot()["n1"].gpu_free_milli == (0,)
    assert ext.bind(bind_args(pod, "n1")) == {"Error": ""}  # kube-scheduler's own bind still works


def test_bind_of_a_pod_of_another_scheduler_is_refused_even_with_a_reservation() -> None:
    """A default-scheduler pod run through filter by hand (or a forged filter call) is not bound."""
    pod = gpu_pod("a", gpus=1)
    pod["spec"]["schedulerName"] = "default-scheduler"
    binder = FakeBinder().add(pod)
    ext = Extender(ledger([gpu_node("n1", 1)]), binder)
    ext.filter({"Pod": pod, "NodeNames": ["n1"]})
    error = ext.bind(bind_args(pod, "n1"))["Error"]
    assert "schedulerName 'default-scheduler' is not one this extender serves (kubegpu)" in error
    assert binder.bound == []
    served = Extender(ledger([gpu_node("n1", 1)]), binder, scheduler_names=["kubegpu", "default-scheduler"])
    served.filter({"Pod": pod, "NodeNames": ["n1"]})
    assert served.bind(bind_args(pod, "n1")) == {"Error": ""}


def test_bind_of_a_pod_whose_uid_is_not_the_reserved_ones_is_refused() -> None:
    pod = gpu_pod("a", gpus=1)
    binder = FakeBinder().add(pod)
    ext = Extender(ledger([gpu_node("n1", 1)]), binder)
    ext.filter({"Pod": pod, "NodeNames": ["n1"]})
    forged = {**bind_args(pod, "n1"), "PodName": "other"}  # the reservation's uid, another pod's name
    assert "is gone" in ext.bind(forged)["Error"]
    assert binder.bound == []


# -- a Binding whose outcome is unknown keeps its GPUs (issue 55, finding 2) -------------------------


@pytest.mark.parametrize("status", [0, 500, 503, 504, 408])
def test_an_ambiguous_binding_failure_keeps_the_gpus_until_the_pod_is_seen_bound(status: int) -> None:
    """A 504 (or a timeout, status 0) whose write lands later: the next pod must not get the GPU."""
    book = ledger([gpu_node("n1", 1)])
    pod, nxt = gpu_pod("a", milli=1000), gpu_pod("b", milli=1000)
    binder = FakeBinder(fail=ApiServerError(f"HTTP {status}", status=status)).add(pod, nxt)
    ext = Extender(book, binder)
    ext.filter({"Pod": pod, "NodeNames": ["n1"]})
    assert str(status) in ext.bind(bind_args(pod, "n1"))["Error"]
    assert book.snapshot()["n1"].gpu_free_milli == (0,)
    assert ext.filter({"Pod": nxt, "NodeNames": ["n1"]})["NodeNames"] == []
    # the write lands: the watch shows the pod bound with the GPUs the filter chose
    landed = {**pod, "spec": {**pod["spec"], "nodeName": "n1"}, "status": {"phase": "Running"}}
    book.observe_pod(landed)
    assert book.snapshot()["n1"].gpu_free_milli == (0,)
    book.remove_pod("uid-a")  # and gone: given back
    assert book.snapshot()["n1"].gpu_free_milli == (1000,)


def test_an_ambiguous_binding_failure_is_given_back_when_a_list_shows_the_pod_gone() -> None:
    book = ledger([gpu_node("n1", 1)])
    pod = gpu_pod("a", milli=600)
    ext = Extender(book, FakeBinder(fail=ApiServerError("HTTP 504", status=504)).add(pod))
    ext.filter({"Pod": pod, "NodeNames": ["n1"]})
    ext.bind(bind_args(pod, "n1"))
    book.replace_pods([gpu_pod("x", milli=100)])  # still pending elsewhere: nothing; "a" is gone
    assert book.snapshot()["n1"].gpu_free_milli == (1000,)


@pytest.mark.parametrize("status", [409, 404, 422, 403])
def test_a_definite_binding_refusal_gives_the_gpus_back_at_once(status: int) -> None:
    book = ledger([gpu_node("n1", 1)])
    pod = gpu_pod("a", gpus=1)
    ext = Extender(book, FakeBinder(fail=ApiServerError(f"HTTP {status}", status=status)).add(pod))
    ext.filter({"Pod": pod, "NodeNames": ["n1"]})
    assert str(status) in ext.bind(bind_args(pod, "n1"))["Error"]
    assert book.snapshot()["n1"].gpu_free_milli == (1000,)
    assert book.holding("uid-a") is None


def test_a_failed_binding_whose_write_landed_is_a_successful_bind() -> None:
    """A 504 whose write landed at once: reading the pod back shows it bound; the bind succeeded."""
    book = ledger([gpu_node("n1", 1)])
    pod = gpu_pod("a", gpus=1)
    binder = FakeBinder(fail=ApiServerError("HTTP 504", status=504), lands=True).add(pod)
    ext = Extender(book, binder)
    ext.filter({"Pod": pod, "NodeNames": ["n1"]})
    assert ext.bind(bind_args(pod, "n1")) == {"Error": ""}
    held = book.holding("uid-a")
    assert held is not None and held.kind is HoldKind.BOUND


def test_an_unexpected_binder_error_keeps_the_gpus_and_answers_an_error() -> None:
    book = ledger([gpu_node("n1", 1)])
    pod = gpu_pod("a", gpus=1)
    ext = Extender(book, FakeBinder(fail=RuntimeError("socket exploded")).add(pod))
    ext.filter({"Pod": pod, "NodeNames": ["n1"]})
    assert "socket exploded" in ext.bind(bind_args(pod, "n1"))["Error"]
    assert book.snapshot()["n1"].gpu_free_milli == (0,)


def test_a_pod_filtered_again_after_an_unknown_bind_is_settled_by_reading_it() -> None:
    """kube-scheduler retries the pod: a bind that never landed is given back once the API server
    would have shown it (the reservation TTL), and the pod is placed anew; a retried bind on the
    same node that finds the first write landed is a success."""
    clock = Clock()
    book = ledger([gpu_node("n1", 1), gpu_node("n2", 1)], clock=clock)
    pod = gpu_pod("a", gpus=1)
    binder = FakeBinder(fail=ApiServerError("HTTP 504", status=504)).add(pod)
    ext = Extender(book, binder)
    first = ext.filter({"Pod": pod, "NodeNames": ["n1", "n2"]})["NodeNames"][0]
    other = "n2" if first == "n1" else "n1"
    ext.bind(bind_args(pod, first))
    assert ext.filter({"Pod": pod, "NodeNames": [other]})["NodeNames"] == []  # it may be on `first`
    clock.now += 31
    assert ext.filter({"Pod": pod, "NodeNames": [other]})["NodeNames"] == [other]
    assert book.snapshot()[first].gpu_free_milli == (1000,)


def test_a_retried_bind_after_an_unknown_outcome_binds() -> None:
    book = ledger([gpu_node("n1", 1)])
    pod = gpu_pod("a", gpus=1)
    binder = FakeBinder(fail=ApiServerError("HTTP 503", status=503)).add(pod)
    ext = Extender(book, binder)
    ext.filter({"Pod": pod, "NodeNames": ["n1"]})
    assert ext.bind(bind_args(pod, "n1"))["Error"]
    binder.fail = None
    assert ext.filter({"Pod": pod, "NodeNames": ["n1"]})["NodeNames"] == ["n1"]
    assert ext.bind(bind_args(pod, "n1")) == {"Error": ""}
    assert [b[1] for b in binder.bound] == ["n1"]


# -- readiness and liveness (issue 55, finding 1) ---------------------------------------------------


def test_ready_and_alive_follow_the_api_watches() -> None:
    """``ready`` is the synced flag and the watches' readiness; ``alive`` their liveness: a stale
    watch makes filter answer an error instead of deciding on an old ledger."""
    state = {"ready": True, "alive": True}
    ext = Extender(
        ledger([gpu_node("n1", 1)]),
        FakeBinder(),
        readiness=lambda: state["ready"],
        liveness=lambda: state["alive"],
    )
    assert ext.ready and ext.alive
    state["ready"] = False
    assert not ext.ready
    assert "not synced" in ext.filter({"Pod": gpu_pod("a", gpus=1), "NodeNames": ["n1"]})["Error"]
    state["alive"] = False
    assert not ext.alive
    ext.ready = False
    state["ready"] = True
    assert not ext.ready  # the flag (first lists not in) still counts
