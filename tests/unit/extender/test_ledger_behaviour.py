"""Ledger behaviours the mutation run found unpinned (issue 61): nodes added and deleted by the watch,
a relist forgetting pods that are gone (and only those), a re-filter giving back its earlier
reservation, recorded GPUs outside the node, guesses that never count a GPU twice, and the refusal
reasons users read in the pod's events."""

from __future__ import annotations

from typing import Any

import pytest

from kubegpu.extender.assignment import ANNOTATION, Assignment, encode
from kubegpu.extender.ledger import HoldKind
from kubegpu.extender.node import GpuNode
from tests.unit.extender.conftest import Clock, gpu_node, gpu_pod, ledger, place


def bound(
    name: str, node: str, *, gpus: tuple[int, ...] = (), milli: int = 1000, **ask: Any
) -> dict[str, Any]:
    """A running pod on ``node``; with ``gpus``, its annotation records them (``milli`` each)."""
    annotations = {}
    if gpus:
        annotations = {ANNOTATION: encode(Assignment(node=node, gpus=gpus, uuids=(), milli=milli))}
        ask = {"gpus": len(gpus)} if milli == 1000 else {"milli": milli}
    return gpu_pod(name, node=node, phase="Running", annotations=annotations, **ask)


# -- nodes from the watch -----------------------------------------------------------------------------


def test_a_node_added_by_the_watch_is_placed_on() -> None:
    book = ledger([gpu_node("n1", 1)])
    place(book, gpu_pod("a", gpus=1), ["n1"])
    book.upsert_node(gpu_node("n2", 2))
    decision = book.decide(gpu_pod("b", gpus=2), ["n1", "n2"])
    assert decision.node == "n2" and decision.assignment is not None
    assert decision.assignment.gpus == (0, 1)
    assert book.node_count() == 2
    assert book.snapshot()["n1"].gpu_free_milli == (0,)  # what n1 held survives the rebuild


def test_a_node_changed_by_the_watch_is_counted_as_it_is_now() -> None:
    book = ledger([gpu_node("n1", 1)])
    assert book.decide(gpu_pod("a", gpus=2), ["n1"]).node is None
    book.upsert_node(gpu_node("n1", 2))
    assert book.decide(gpu_pod("a", gpus=2), ["n1"]).node == "n1"
    assert book.snapshot()["n1"].gpu_free_milli == (0, 0)
    book.upsert_node(gpu_node("n1", 2))  # the same node again changes nothing
    assert book.snapshot()["n1"].gpu_free_milli == (0, 0)
    assert book.holding("uid-a") is not None


def test_a_deleted_node_is_no_longer_placed_on() -> None:
    book = ledger([gpu_node("n1", 8), gpu_node("n2", 1)])
    assert set(book.snapshot()) == {"n1", "n2"}  # the state is built: the removal must reach it
    book.remove_node("n1")
    decision = book.decide(gpu_pod("a", gpus=1), ["n1", "n2"])
    assert decision.node == "n2"
    assert dict(decision.unresolvable) == {"n1": "kubegpu: node not known to the extender yet"}
    assert set(book.snapshot()) == {"n2"} and book.node_count() == 1
    book.remove_node("n1")  # deleting it again changes nothing
    assert book.node_count() == 1
    refused = book.decide(gpu_pod("b", gpus=1), ["n1"])
    assert refused.node is None and dict(refused.unresolvable) == {
        "n1": "kubegpu: node not known to the extender yet"
    }


def test_a_node_replaced_by_a_list_with_the_same_nodes_keeps_every_holding() -> None:
    book = ledger([gpu_node("n1", 2)])
    place(book, gpu_pod("a", gpus=1), ["n1"])
    book.replace_nodes([gpu_node("n1", 2)])
    assert book.snapshot()["n1"].gpu_free_milli == (0, 1000)
    book.replace_nodes([gpu_node("n1", 2), gpu_node("n2", 1)])
    assert book.decide(gpu_pod("b", gpus=1), ["n2"]).node == "n2"


# -- pods from a relist -------------------------------------------------------------------------------


def test_a_relist_forgets_bound_pods_no_longer_there_and_keeps_the_others() -> None:
    book = ledger([gpu_node("n1", 4)])
    kept, gone = bound("kept", "n1", gpus=(0,)), bound("gone", "n1", gpus=(1,))
    book.replace_pods([kept, gone])
    assert book.snapshot()["n1"].gpu_free_milli == (0, 0, 1000, 1000)
    book.replace_pods([kept])
    assert book.snapshot()["n1"].gpu_free_milli == (0, 1000, 1000, 1000)
    assert book.holding("uid-gone") is None and book.holding("uid-kept") is not None


def test_a_relist_keeps_the_reservations_and_binds_of_this_extender() -> None:
    book = ledger([gpu_node("n1", 4)])
    reserved = book.decide(gpu_pod("r", gpus=1), ["n1"])
    binding = book.decide(gpu_pod("b", gpus=1), ["n1"])
    assert reserved.node == binding.node == "n1"
    assert book.begin_bind("uid-b", "n1") is not None
    book.replace_pods([bound("other", "n1", gpus=(3,))])
    holding_r, holding_b = book.holding("uid-r"), book.holding("uid-b")
    assert holding_r is not None and holding_r.kind is HoldKind.RESERVED
    assert holding_b is not None and holding_b.kind is HoldKind.BINDING
    assert sorted(book.snapshot()["n1"].gpu_free_milli) == [0, 0, 0, 1000]


def test_a_relist_resolves_an_unknown_bind_of_a_pod_that_is_gone() -> None:
    book = ledger([gpu_node("n1", 1)])
    assert book.decide(gpu_pod("a", gpus=1), ["n1"]).node == "n1"
    assert book.begin_bind("uid-a", "n1") is not None
    book.end_bind("uid-a", ok=False, certain=False)
    holding = book.holding("uid-a")
    assert holding is not None and holding.kind is HoldKind.UNCERTAIN
    book.replace_pods([])
    assert book.holding("uid-a") is None and book.snapshot()["n1"].gpu_free_milli == (1000,)


def test_a_relist_with_pods_finished_or_unbound_counts_only_the_bound_live_ones() -> None:
    book = ledger([gpu_node("n1", 3)])
    done = bound("done", "n1", gpus=(0,))
    done["status"] = {"phase": "Succeeded"}
    book.replace_pods([done, gpu_pod("pending", gpus=1), bound("live", "n1", gpus=(2,))])
    assert book.snapshot()["n1"].gpu_free_milli == (1000, 1000, 0)
    assert book.holding("uid-done") is None and book.holding("uid-pending") is None


# -- re-filtering -------------------------------------------------------------------------------------


def test_filtering_a_pod_again_gives_back_its_earlier_reservation_on_the_same_node() -> None:
    book = ledger([gpu_node("n1", 2)])
    first = book.decide(gpu_pod("a", gpus=2), ["n1"])
    again = book.decide(gpu_pod("a", gpus=2), ["n1"])  # kube-scheduler retried the pod
    assert first.node == again.node == "n1"
    assert book.snapshot()["n1"].gpu_free_milli == (0, 0)
    assert book.decide(gpu_pod("b", gpus=1), ["n1"]).node is None
    holding = book.holding("uid-a")
    assert holding is not None and holding.kind is HoldKind.RESERVED


def test_a_bound_pod_filtered_again_is_answered_with_its_node_and_gpus() -> None:
    book = ledger([gpu_node("n1", 2), gpu_node("n2", 2)])
    book.observe_pod(bound("a", "n2", gpus=(1,)))
    decision = book.decide(gpu_pod("a", gpus=1), ["n1", "n2"])
    assert decision.node == "n2" and decision.assignment is not None and decision.assignment.gpus == (1,)
    assert dict(decision.failed) == {"n1": "kubegpu: pod is placed on n2"}
    elsewhere = book.decide(gpu_pod("a", gpus=1), ["n1"])
    assert elsewhere.node is None and elsewhere.assignment is None


# -- recorded GPUs and guesses ------------------------------------------------------------------------


def test_a_recorded_gpu_index_equal_to_the_gpu_count_is_not_accounted_but_guessed() -> None:
    book = ledger([gpu_node("n1", 8)])
    book.observe_pod(bound("a", "n1", gpus=(8,)))
    free = book.snapshot()["n1"].gpu_free_milli
    assert len(free) == 8 and free == (0, *([1000] * 7))


def test_the_last_gpu_recorded_by_index_is_accounted_there() -> None:
    book = ledger([gpu_node("n1", 8)])
    book.observe_pod(bound("a", "n1", gpus=(7,)))
    assert book.snapshot()["n1"].gpu_free_milli == (*([1000] * 7), 0)


def test_a_guess_never_counts_one_gpu_twice() -> None:
    book = ledger([gpu_node("n1", 2)])
    book.observe_pod(_half("n1"))
    book.observe_pod(gpu_pod("other", gpus=2, node="n1", phase="Running"))  # another scheduler's pod
    free = book.snapshot()["n1"].gpu_free_milli
    # GPU 1 has room, GPU 0 is what is left: both counted once (GPU 0 over-committed by 500)
    assert free == (-500, 0)


def _half(node: str) -> dict[str, Any]:
    pod = gpu_pod("half", milli=500, node=node, phase="Running")
    pod["metadata"]["annotations"] = {
        ANNOTATION: encode(Assignment(node=node, gpus=(0,), uuids=(), milli=500))
    }
    return pod


def test_guesses_take_the_lowest_gpus_with_room_then_those_with_most_left() -> None:
    book = ledger([gpu_node("n1", 4)])
    book.observe_pod(_half("n1"))
    book.observe_pod(gpu_pod("x", gpus=3, node="n1", phase="Running"))
    assert book.snapshot()["n1"].gpu_free_milli == (500, 0, 0, 0)
    book2 = ledger([gpu_node("n1", 2)])
    book2.observe_pod(_half("n1"))
    book2.observe_pod(gpu_pod("share", milli=500, node="n1", phase="Running"))  # fits next to it
    assert book2.snapshot()["n1"].gpu_free_milli == (0, 1000)


# -- refusal reasons ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ask", "reason"),
    [
        ({"gpus": 3}, "kubegpu: node has fewer than 3 GPUs"),
        ({"gpus": 2}, "kubegpu: fewer than 2 free GPUs"),
        ({"milli": 600}, "kubegpu: no GPU with 600m free"),
        ({"gpus": 1}, "kubegpu: no GPU with 1000m free"),
        ({"milli": 100, "cpu_milli": 7000}, "kubegpu: less than the pod's 7000m CPU left"),
        ({"milli": 100, "memory_mib": 9000}, "kubegpu: less than the pod's 9000 MiB memory left"),
    ],
)
def test_each_refusal_names_the_first_reason_that_applies(ask: dict[str, int], reason: str) -> None:
    node = GpuNode(name="n1", cpu_milli=8000, memory_mib=8192, gpu_count=2, uuids=())
    book = ledger([node])
    book.observe_pod(_half("n1"))  # GPU 0: 500m left, GPU 1 whole
    book.observe_pod(gpu_pod("g1", gpus=1, node="n1", phase="Running"))  # GPU 1 taken
    decision = book.decide(gpu_pod("p", **ask), ["n1"])
    assert decision.node is None and dict(decision.failed) == {"n1": reason}
    assert dict(decision.unresolvable) == {}


def test_a_pod_fitting_exactly_what_is_left_is_placed() -> None:
    node = GpuNode(name="n1", cpu_milli=8000, memory_mib=8192, gpu_count=2, uuids=())
    book = ledger([node])
    book.observe_pod(_half("n1"))
    assert (
        book.decide(gpu_pod("p", milli=500, cpu_milli=8000 - 1000, memory_mib=8192 - 1024), ["n1"]).node
        == "n1"
    )


def test_a_pod_without_a_uid_is_refused_as_unresolvable_on_every_candidate() -> None:
    book = ledger([gpu_node("n1", 1), gpu_node("n2", 1)])
    pod = gpu_pod("a", gpus=1)
    pod["metadata"]["uid"] = ""
    decision = book.decide(pod, ["n1", "n2"])
    assert decision.node is None and dict(decision.failed) == {}
    assert dict(decision.unresolvable) == dict.fromkeys(["n1", "n2"], "kubegpu: the pod has no metadata.uid")


def test_a_reservation_lapses_exactly_at_its_deadline_and_not_before() -> None:
    clock = Clock()
    book = ledger([gpu_node("n1", 1)], clock=clock)
    assert book.decide(gpu_pod("a", gpus=1), ["n1"]).node == "n1"
    clock.now += 29.999
    assert book.decide(gpu_pod("b", gpus=1), ["n1"]).node is None
    clock.now = 1000.0 + 30.0
    assert book.decide(gpu_pod("b", gpus=1), ["n1"]).node == "n1"
    assert book.holding("uid-a") is None


def test_an_index_only_assignment_on_a_node_publishing_uuids_counts_where_it_says() -> None:
    node = GpuNode(name="n1", cpu_milli=8000, memory_mib=1 << 16, gpu_count=2, uuids=("GPU-aaa", "GPU-bbb"))
    book = ledger([node])
    book.observe_pod(bound("a", "n1", gpus=(1,)))
    assert book.snapshot()["n1"].gpu_free_milli == (1000, 0)


def test_a_bound_pod_whose_annotation_changes_is_counted_where_it_says_now() -> None:
    book = ledger([gpu_node("n1", 2)])
    book.observe_pod(bound("a", "n1", gpus=(0,)))
    assert book.snapshot()["n1"].gpu_free_milli == (0, 1000)
    book.observe_pod(bound("a", "n1", gpus=(1,)))
    assert book.snapshot()["n1"].gpu_free_milli == (1000, 0)
    book.observe_pod(bound("a", "n1", gpus=(1,)))  # a status update: nothing changes
    assert book.snapshot()["n1"].gpu_free_milli == (1000, 0)


def test_settling_a_pod_the_ledger_does_not_hold_as_unknown_changes_nothing() -> None:
    clock = Clock()
    book = ledger([gpu_node("n1", 1)], clock=clock)
    book.settle(gpu_pod("stranger", gpus=1))  # never seen: nothing to resolve
    assert book.decide(gpu_pod("a", gpus=1), ["n1"]).node == "n1"
    clock.now += 10
    book.settle(gpu_pod("a", gpus=1))  # reserved, not bound yet: the reservation stays
    holding = book.holding("uid-a")
    assert holding is not None and holding.kind is HoldKind.RESERVED
    assert book.snapshot()["n1"].gpu_free_milli == (0,)


@pytest.mark.parametrize(
    ("ask", "gpus"),
    [({"milli": 500}, 2), ({"gpus": 16}, 16)],
)
def test_a_cpu_only_pod_counts_in_no_gpu_class_for_the_clustering_policy(
    ask: dict[str, int], gpus: int
) -> None:
    book = ledger([gpu_node("a", gpus), gpu_node("b", gpus)], policy="clustering")
    book.observe_pod(gpu_pod("cpu", node="b", phase="Running"))
    # both nodes idle for GPUs: a tie, broken by node order
    assert book.decide(gpu_pod("p", **ask), ["a", "b"]).node == "a"


def test_a_one_gpu_pod_counts_in_the_one_gpu_class_for_the_clustering_policy() -> None:
    book = ledger([gpu_node("a", 4), gpu_node("b", 4)], policy="clustering")
    book.observe_pod(bound("one", "b", gpus=(0,)))
    assert book.decide(gpu_pod("p", gpus=1), ["a", "b"]).node == "b"


def test_a_pod_of_another_scheduler_filtered_again_is_answered_with_its_guessed_gpus() -> None:
    book = ledger([gpu_node("n1", 2)])
    book.observe_pod(bound("first", "n1", gpus=(0,)))
    book.observe_pod(gpu_pod("other", gpus=1, node="n1", phase="Running"))  # no assignment: guessed
    assert book.snapshot()["n1"].gpu_free_milli == (0, 0)
    decision = book.decide(gpu_pod("other", gpus=1), ["n1"])
    assert decision.node == "n1" and decision.assignment is not None
    assert decision.assignment.gpus == (1,)


def test_a_guessed_pod_filtered_again_before_anything_built_the_state_gets_its_guessed_gpus() -> None:
    """The answer is read from the counted state: it is built first, so a pod of another scheduler
    whose GPUs are a guess is answered with them, not with the empty claim it came with."""
    book = ledger([gpu_node("n1", 2)])
    book.observe_pod(bound("first", "n1", gpus=(0,)))
    book.observe_pod(gpu_pod("other", gpus=1, node="n1", phase="Running"))  # no assignment: guessed
    decision = book.decide(gpu_pod("other", gpus=1), ["n1"])  # nothing read the state before
    assert decision.node == "n1" and decision.assignment is not None
    assert decision.assignment.gpus == (1,)


def test_a_bind_starts_only_from_this_extender_s_reservation_on_that_node() -> None:
    book = ledger([gpu_node("n1", 1), gpu_node("n2", 1)])
    assert book.begin_bind("uid-nobody", "n1") is None
    assert book.decide(gpu_pod("a", gpus=1), ["n1"]).node == "n1"
    assert book.begin_bind("uid-a", "n2") is None
    holding = book.holding("uid-a")
    assert holding is not None and holding.kind is HoldKind.RESERVED
    started = book.begin_bind("uid-a", "n1")
    assert started is not None and started.node == "n1" and started.gpus == (0,)
    assert book.begin_bind("uid-a", "n1") is None  # a bind of it is already in flight


def test_a_reservation_lapses_on_time_after_an_earlier_one_was_bound() -> None:
    clock = Clock()
    book = ledger([gpu_node("n1", 3)], clock=clock)
    assert book.decide(gpu_pod("a", gpus=1), ["n1"]).node == "n1"  # lapses at 1030
    clock.now = 1010.0
    assert book.decide(gpu_pod("c", gpus=1), ["n1"]).node == "n1"  # lapses at 1040
    assert book.begin_bind("uid-a", "n1") is not None  # a's reservation no longer lapses
    clock.now = 1031.0
    assert book.decide(gpu_pod("d", gpus=1), ["n1"]).node == "n1"  # the third GPU
    clock.now = 1045.0
    assert book.decide(gpu_pod("e", gpus=1), ["n1"]).node == "n1"  # c's GPU, c lapsed at 1040
    assert book.holding("uid-c") is None


def test_a_reserved_pod_seen_bound_on_another_node_is_counted_there() -> None:
    book = ledger([gpu_node("n1", 1), gpu_node("n2", 1)])
    assert book.decide(gpu_pod("a", gpus=1), ["n1"]).node == "n1"
    book.observe_pod(gpu_pod("a", gpus=1, node="n2", phase="Running"))  # bound elsewhere, by someone else
    snapshot = book.snapshot()
    assert (snapshot["n1"].gpu_free_milli, snapshot["n2"].gpu_free_milli) == ((1000,), (0,))
    holding = book.holding("uid-a")
    assert holding is not None and (holding.node, holding.kind) == ("n2", HoldKind.BOUND)


def test_an_unknown_bind_is_given_back_exactly_one_ttl_after_it_failed() -> None:
    clock = Clock()
    book = ledger([gpu_node("n1", 1)], clock=clock)
    assert book.decide(gpu_pod("a", gpus=1), ["n1"]).node == "n1"
    assert book.begin_bind("uid-a", "n1") is not None
    book.end_bind("uid-a", ok=False, certain=False)  # at 1000
    clock.now = 1029.5
    book.settle(gpu_pod("a", gpus=1))  # still not bound: it may yet land
    assert book.holding("uid-a") is not None
    clock.now = 1030.0
    book.settle(gpu_pod("a", gpus=1))
    assert book.holding("uid-a") is None and book.snapshot()["n1"].gpu_free_milli == (1000,)


@pytest.mark.parametrize("policy", ["kubegpu", "clustering"])
def test_nodes_joining_and_leaving_break_ties_as_a_fresh_ledger_of_the_same_nodes(policy: str) -> None:
    names = ["b", "d", "f"]
    book = ledger([gpu_node(n, 2) for n in names], policy=policy)
    assert book.snapshot()  # the state is built: joins and removals change it row by row
    for step, name in enumerate(["a", "e", "c", "g", "0"]):
        book.upsert_node(gpu_node(name, 2))
        names.append(name)
        if step % 2:
            book.remove_node(names.pop(0))
        fresh = ledger([gpu_node(n, 2) for n in names], policy=policy)
        pod = gpu_pod(f"p{step}", gpus=1)
        # every idle node scores alike: the tie is broken by the node order, whatever the arrivals
        assert book.preview(pod, sorted(names)) == fresh.preview(pod, sorted(names))


def test_up_to_the_listing_bound_every_node_is_named_with_its_own_reason() -> None:
    from kubegpu.extender.ledger import FAILED_NODES_LISTED

    nodes = [gpu_node(f"n{i:05d}", 2) for i in range(FAILED_NODES_LISTED)]
    book = ledger(nodes)
    failed = dict(book.decide(gpu_pod("big", gpus=4), [n.name for n in nodes]).failed)
    assert failed == {n.name: "kubegpu: node has fewer than 4 GPUs" for n in nodes}
