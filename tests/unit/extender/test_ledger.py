"""The ledger's promises: shares are honoured, a GPU is never promised twice, deletes free shares,
reservations lapse, and a restarted extender rebuilds the same accounting from the API's objects."""

from __future__ import annotations

import threading
from typing import Any

from kubegpu.extender.assignment import ANNOTATION, Assignment, decode, encode
from kubegpu.extender.ledger import HoldKind
from kubegpu.extender.node import GpuNode
from tests.unit.extender.conftest import Clock, gpu_node, gpu_pod, ledger, place


def bound_copy(pod: dict[str, Any], assignment: Assignment) -> dict[str, Any]:
    """The pod as the API serves it after the extender's Binding: node name and annotation set."""
    out = {**pod, "metadata": {**pod["metadata"], "annotations": {ANNOTATION: encode(assignment)}}}
    out["spec"] = {**pod["spec"], "nodeName": assignment.node}
    out["status"] = {"phase": "Running"}
    return out


def test_two_half_gpu_pods_share_one_gpu() -> None:
    book = ledger([gpu_node("n1", 2)])
    a, b = gpu_pod("a", milli=500), gpu_pod("b", milli=500)
    da, db = book.decide(a, ["n1"]), book.decide(b, ["n1"])
    assert da.assignment is not None and db.assignment is not None
    assert da.assignment.gpus == db.assignment.gpus
    assert sorted(book.snapshot()["n1"].gpu_free_milli) == [0, 1000]


def test_a_whole_gpu_pod_never_shares() -> None:
    book = ledger([gpu_node("n1", 1)])
    assert place(book, gpu_pod("half", milli=500), ["n1"]) == "n1"
    refused = book.decide(gpu_pod("whole", milli=1000), ["n1"])
    assert refused.node is None
    assert refused.failed["n1"] == "kubegpu: no GPU with 1000m free"
    book2 = ledger([gpu_node("n1", 1)])
    assert place(book2, gpu_pod("whole", gpus=1), ["n1"]) == "n1"
    assert book2.decide(gpu_pod("half", milli=100), ["n1"]).node is None


def test_only_the_candidates_kube_scheduler_passed_are_used() -> None:
    book = ledger([gpu_node("n1", 8), gpu_node("n2", 8)])
    decision = book.decide(gpu_pod("a", gpus=1), ["n2"])
    assert decision.node == "n2"
    assert dict(decision.failed) == {}
    assert book.decide(gpu_pod("b", gpus=1), ["n1", "n2"]).failed == {}  # the nodes left out need no reason


def test_refusals_name_one_reason_per_node_worded_alike_across_nodes() -> None:
    book = ledger([gpu_node("a1", 1), gpu_node("a2", 1), gpu_node("b", 8, cpu_milli=1000), gpu_node("c", 2)])
    place(book, gpu_pod("x1", gpus=1), ["a1"])
    place(book, gpu_pod("x2", gpus=1), ["a2"])
    assert book.decide(gpu_pod("big", gpus=2, cpu_milli=4000), ["a1", "a2", "b", "c"]).node == "c"
    refused = book.decide(gpu_pod("huge", gpus=4, cpu_milli=4000), ["a1", "a2", "b"]).failed
    assert refused == {
        "a1": "kubegpu: node has fewer than 4 GPUs",
        "a2": "kubegpu: node has fewer than 4 GPUs",
        "b": "kubegpu: less than the pod's 4000m CPU left",
    }


def test_concurrent_filters_and_binds_never_overcommit_a_gpu() -> None:
    book = ledger([gpu_node("n1", 4), gpu_node("n2", 2)])
    placed: list[Assignment] = []
    lock = threading.Lock()
    start = threading.Barrier(24)

    def worker(i: int) -> None:
        pod = gpu_pod(f"p{i}", milli=300)
        start.wait()
        decision = book.decide(pod, ["n1", "n2"])
        if decision.node is None:
            return
        assignment = book.begin_bind(pod["metadata"]["uid"], decision.node)
        assert assignment is not None
        book.end_bind(pod["metadata"]["uid"], ok=True)
        with lock:
            placed.append(assignment)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 6 GPUs hold three 300m shares each: exactly 18 pods fit, whatever the interleaving
    assert len(placed) == 18
    used: dict[tuple[str, int], int] = {}
    for a in placed:
        for g in a.gpus:
            used[a.node, g] = used.get((a.node, g), 0) + a.milli
    assert max(used.values()) <= 1000
    snap = book.snapshot()
    assert all(f >= 0 for use in snap.values() for f in use.gpu_free_milli)
    assert sum(sum(use.gpu_free_milli) for use in snap.values()) == 6000 - 18 * 300


def test_a_deleted_pod_frees_its_share() -> None:
    book = ledger([gpu_node("n1", 1)])
    pod = gpu_pod("a", milli=700)
    decision = book.decide(pod, ["n1"])
    assert decision.assignment is not None
    book.begin_bind("uid-a", "n1")
    book.end_bind("uid-a", ok=True)
    book.observe_pod(bound_copy(pod, decision.assignment))
    assert book.snapshot()["n1"].gpu_free_milli == (300,)
    book.remove_pod("uid-a")
    assert book.snapshot()["n1"].gpu_free_milli == (1000,)
    assert book.snapshot()["n1"].cpu_left_milli == 64_000


def test_a_finished_pod_frees_its_share() -> None:
    book = ledger([gpu_node("n1", 1)])
    pod = gpu_pod("a", milli=700)
    decision = book.decide(pod, ["n1"])
    assert decision.assignment is not None
    done = bound_copy(pod, decision.assignment)
    done["status"] = {"phase": "Succeeded"}
    book.observe_pod(done)
    assert book.snapshot()["n1"].gpu_free_milli == (1000,)


def test_an_unbound_reservation_lapses_and_a_refused_bind_gives_back() -> None:
    clock = Clock()
    book = ledger([gpu_node("n1", 1)], clock=clock)
    assert book.decide(gpu_pod("a", milli=1000), ["n1"]).node == "n1"
    assert book.decide(gpu_pod("b", milli=1000), ["n1"]).node is None
    clock.now += 31
    assert book.decide(gpu_pod("b", milli=1000), ["n1"]).node == "n1"
    assert book.holding("uid-a") is None
    assert book.begin_bind("uid-b", "n1") is not None
    clock.now += 3600  # a bind in flight does not lapse
    assert book.holding("uid-b") is not None
    book.end_bind("uid-b", ok=False)
    assert book.snapshot()["n1"].gpu_free_milli == (1000,)


def test_filtering_a_pod_again_replaces_its_earlier_choice() -> None:
    book = ledger([gpu_node("n1", 1), gpu_node("n2", 1)])
    pod = gpu_pod("a", gpus=1)
    first = book.decide(pod, ["n1", "n2"]).node
    other = "n2" if first == "n1" else "n1"
    assert book.decide(pod, [other]).node == other
    assert book.snapshot()[str(first)].gpu_free_milli == (1000,)


def test_a_restarted_ledger_rebuilds_the_same_state_from_the_api_objects() -> None:
    nodes = [gpu_node(f"n{i}", g) for i, g in enumerate((8, 8, 4, 2, 1))]
    names = [n.name for n in nodes]
    book = ledger(nodes)
    asks: list[dict[str, int]] = [{"milli": 500}, {"gpus": 2}, {"milli": 300}, {"gpus": 1}, {"milli": 810}]
    objects: list[dict[str, Any]] = []
    for i in range(40):
        pod = gpu_pod(f"p{i}", cpu_milli=500 + 700 * (i % 5), **asks[i % len(asks)])
        decision = book.decide(pod, names)
        if decision.assignment is None:
            continue
        book.begin_bind(pod["metadata"]["uid"], decision.node or "")
        book.end_bind(pod["metadata"]["uid"], ok=True)
        objects.append(bound_copy(pod, decision.assignment))
    objects.append(gpu_pod("cpu-only", cpu_milli=2000, node="n3", phase="Running"))
    book.observe_pod(objects[-1])
    assert len(objects) > 20

    restarted = ledger(list(reversed(nodes)))
    restarted.replace_pods(reversed(objects))
    assert restarted.snapshot() == book.snapshot()
    nxt = gpu_pod("next", milli=470)
    assert restarted.decide(nxt, names) == book.decide(nxt, names)


def test_assignments_name_the_gpus_by_uuid_when_the_node_publishes_them() -> None:
    node = GpuNode(name="n1", cpu_milli=8000, memory_mib=1 << 16, gpu_count=2, uuids=("GPU-aaa", "GPU-bbb"))
    book = ledger([node])
    decision = book.decide(gpu_pod("a", gpus=2), ["n1"])
    assert decision.assignment is not None
    assert set(decision.assignment.uuids) == {"GPU-aaa", "GPU-bbb"}
    # rebuilt from UUIDs, not indices: the annotation's indices are ignored when its UUIDs resolve
    wrong = Assignment(node="n1", gpus=(1,), uuids=("GPU-aaa",), milli=500)
    pod = bound_copy(gpu_pod("b", milli=500), wrong)
    other = ledger([node])
    other.observe_pod(pod)
    assert other.snapshot()["n1"].gpu_free_milli == (500, 1000)
    assert decode(pod["metadata"]["annotations"][ANNOTATION]).gpus == (1,)


def test_pods_another_scheduler_bound_count_on_the_lowest_gpus_with_room() -> None:
    book = ledger([gpu_node("n1", 4)])
    book.observe_pod(gpu_pod("other", gpus=2, node="n1", phase="Running"))
    assert book.snapshot()["n1"].gpu_free_milli == (0, 0, 1000, 1000)
    holding = book.holding("uid-other")
    assert holding is not None and holding.kind is HoldKind.BOUND


def test_a_watch_seeing_the_binding_first_keeps_the_chosen_gpus() -> None:
    book = ledger([gpu_node("n1", 2)])
    pod = gpu_pod("a", milli=500)
    decision = book.decide(pod, ["n1"])
    assert decision.assignment is not None
    book.begin_bind("uid-a", "n1")
    book.observe_pod(bound_copy(pod, decision.assignment))  # the watch event beats the bind's reply
    book.end_bind("uid-a", ok=False)  # a reply lost in transit must not free a bound pod's GPU
    assert sorted(book.snapshot()["n1"].gpu_free_milli) == [500, 1000]


def test_filtering_a_pod_whose_bind_is_in_flight_keeps_its_gpus() -> None:
    book = ledger([gpu_node("n1", 1), gpu_node("n2", 1)])
    pod = gpu_pod("a", gpus=1)
    first = book.decide(pod, ["n1", "n2"]).node
    assert first is not None
    assert book.begin_bind("uid-a", first) is not None
    other = "n2" if first == "n1" else "n1"
    assert book.decide(pod, [other]).node is None
    assert book.snapshot()[first].gpu_free_milli == (0,)


def test_warming_up_reserves_nothing() -> None:
    book = ledger([gpu_node("n1", 8), gpu_node("n2", 2)])
    before = book.snapshot()
    book.warm_up()
    assert book.snapshot() == before
    assert book.decide(gpu_pod("a", gpus=8), ["n1", "n2"]).node == "n1"
