"""What the ledger counts when objects are hostile or arrive out of order (issue 55, findings 1, 3, 4):
an object it cannot represent is refused alone, the order of lists and events does not change the
accounting, and a pod's own annotation never makes it count for less than it asks."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from kubegpu.errors import PlacementError
from kubegpu.extender import ask as asks
from kubegpu.extender.ask import ask_of
from kubegpu.extender.assignment import ANNOTATION, Assignment, encode
from kubegpu.extender.node import GpuNode, gpu_node_of
from tests.unit.extender.conftest import gpu_node, gpu_pod, ledger


def recorded(name: str, node: str, assignment: Assignment, **ask: int) -> dict[str, Any]:
    """A pod bound on ``node`` whose annotation says ``assignment`` (written by us, or forged)."""
    return gpu_pod(name, node=node, phase="Running", annotations={ANNOTATION: encode(assignment)}, **ask)


def node_object(
    name: str, *, count: str, gpus: str = "8", cpu: str = "64", memory: str = "256Gi"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.count": count}},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpus}},
    }


# -- finding 1: objects that cannot be represented ------------------------------------------------


def test_a_bound_pod_asking_ten_petacores_counts_as_taking_the_whole_node() -> None:
    """`cpu: 10P` overflowed the ledger's int64 arithmetic; now it is clamped: the node has no CPU
    left, and the ledger keeps working (a delete frees everything)."""
    book = ledger([gpu_node("n1", 2)])
    huge = gpu_pod("huge", gpus=1, node="n1", phase="Running")
    huge["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "10P"
    book.observe_pod(huge)
    use = book.snapshot()["n1"]
    assert use.cpu_left_milli < 0 and use.gpu_free_milli == (0, 1000)
    assert book.decide(gpu_pod("next", gpus=1), ["n1"]).node is None
    book.remove_pod("uid-huge")
    assert book.snapshot()["n1"].cpu_left_milli == 64_000
    assert book.decide(gpu_pod("next", gpus=1), ["n1"]).node == "n1"


@pytest.mark.parametrize(
    ("resource", "value"),
    [
        ("cpu", "10P"),
        ("memory", "9Ei"),
        ("cpu", "1e999999"),
        ("memory", "1e400Ei"),
        ("nvidia.com/gpu", "1e12"),
    ],
)
def test_a_pod_to_place_asking_beyond_any_node_is_refused_by_name(resource: str, value: str) -> None:
    pod = gpu_pod("huge", gpus=1)
    pod["spec"]["containers"][0]["resources"]["requests"][resource] = value
    pod["spec"]["containers"][0]["resources"]["limits"][resource] = value
    with pytest.raises(PlacementError):
        ask_of(pod)
    decision = ledger([gpu_node("n1", 2)]).decide(pod, ["n1"])
    assert decision.node is None and "n1" in decision.unresolvable
    bound = ask_of(pod, bound=True)  # the same pod bound already still counts, within the bounds
    assert bound.cpu_milli <= asks.MAX_CPU_MILLI and bound.num_gpu <= asks.MAX_GPUS_PER_NODE


def test_a_node_labelled_with_a_huge_gpu_count_is_not_believed() -> None:
    node = gpu_node_of(node_object("n1", count="9999999999999", gpus="8"))
    assert node.gpu_count == 8  # the label is ignored; the device plugin's count is used
    absurd = gpu_node_of(node_object("n2", count="9999999999999", gpus="9999999999999"))
    assert absurd.gpu_count == 0
    huge = gpu_node_of(node_object("n3", count="4", cpu="10P", memory="1e30Ei"))
    assert huge.cpu_milli == asks.MAX_CPU_MILLI
    book = ledger([node, absurd, huge])
    assert book.decide(gpu_pod("a", gpus=1), ["n2"]).node is None
    assert book.decide(gpu_pod("b", gpus=1), ["n1", "n2", "n3"]).node in ("n1", "n3")


@pytest.mark.parametrize(
    "obj",
    [
        {"metadata": []},
        {"metadata": {"name": 7}},
        {"metadata": {"name": "n", "labels": "x"}},
        {"metadata": {"name": "n"}, "status": {"allocatable": ["cpu"]}},
        [],
    ],
)
def test_a_node_object_of_the_wrong_shape_is_refused(obj: Any) -> None:
    with pytest.raises(PlacementError):
        gpu_node_of(obj)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p.update(spec={"containers": "x", "nodeName": "n1"}),
        lambda p: p["spec"]["containers"][0].update(resources=[1]),
        lambda p: p["spec"]["containers"][0]["resources"].update(requests={"cpu": None}),
        lambda p: p["spec"]["containers"][0]["resources"].update(requests={"cpu": {"a": 1}}),
        lambda p: p.update(metadata={"uid": "uid-w", "annotations": {ANNOTATION: "{"}}),
        lambda p: p.update(status="Running"),
        lambda p: p.update(spec={"nodeName": ["n1"]}),
    ],
)
def test_a_pod_of_the_wrong_shape_is_refused_alone(mutate: Any) -> None:
    book = ledger([gpu_node("n1", 2)])
    book.observe_pod(gpu_pod("good", gpus=1, node="n1", phase="Running"))
    bad = gpu_pod("w", gpus=1, node="n1", phase="Running")
    mutate(bad)
    book.observe_pod(bad)
    book.replace_pods([gpu_pod("good", gpus=1, node="n1", phase="Running"), bad])
    assert sorted(book.snapshot()["n1"].gpu_free_milli)[0] == 0  # "good" still counts
    assert book.decide(gpu_pod("next", gpus=1), ["n1"]).node in ("n1", None)


# -- finding 3: the order lists and events arrive in --------------------------------------------


def test_pods_listed_before_their_nodes_are_guessed_onto_gpus_with_room() -> None:
    """After a restart the pods list arrived first: pods another scheduler bound were all guessed onto
    GPU 0 and never guessed again. Now the guesses are made once the node is known, after the GPUs
    recorded by kubegpu's own assignments."""
    book = ledger([])
    ours = recorded("ours", "n1", Assignment(node="n1", gpus=(0,), uuids=(), milli=1000), gpus=1)
    others = [gpu_pod(f"other-{i}", gpus=1, node="n1", phase="Running") for i in range(2)]
    book.replace_pods([*others, ours])
    book.replace_nodes([gpu_node("n1", 4)])
    assert book.snapshot()["n1"].gpu_free_milli == (0, 0, 0, 1000)
    assert book.decide(gpu_pod("share", milli=500), ["n1"]).assignment.gpus == (3,)  # type: ignore[union-attr]


def test_the_accounting_is_the_same_whatever_order_nodes_pods_and_events_arrive_in() -> None:
    nodes = [gpu_node("n1", 4), gpu_node("n2", 2)]
    pods = [
        recorded("r1", "n1", Assignment(node="n1", gpus=(1,), uuids=(), milli=500), milli=500),
        recorded("r2", "n1", Assignment(node="n1", gpus=(2, 3), uuids=(), milli=1000), gpus=2),
        gpu_pod("o1", gpus=1, node="n1", phase="Running"),
        gpu_pod("o2", milli=300, node="n2", phase="Running"),
        gpu_pod("o3", gpus=1, node="n2", phase="Running"),
    ]
    want = None
    for order in itertools.permutations(range(len(pods)), 3):
        for nodes_first in (True, False):
            book = ledger([] if not nodes_first else nodes)
            for i in order:
                book.observe_pod(pods[i])
            for i in (j for j in range(len(pods)) if j not in order):
                book.observe_pod(pods[i])
            if not nodes_first:
                for n in nodes:
                    book.upsert_node(n)
            got = book.snapshot()
            want = want or got
            assert got == want, (order, nodes_first)
    assert want is not None and want["n1"].gpu_free_milli == (0, 500, 0, 0)


# -- finding 4: a pod's annotation never makes it count for less ----------------------------------


@pytest.mark.parametrize(
    ("assignment", "ask"),
    [
        (Assignment(node="n1", gpus=(7,), uuids=(), milli=1000), {"gpus": 1}),  # index out of range
        (Assignment(node="n1", gpus=(0,), uuids=(), milli=1000), {"gpus": 2}),  # fewer GPUs than asked
        (Assignment(node="n1", gpus=(0, 1), uuids=(), milli=1000), {"gpus": 1}),  # more than asked
        (Assignment(node="n1", gpus=(0,), uuids=(), milli=10), {"milli": 900}),  # milli below the ask
        (Assignment(node="n9", gpus=(0,), uuids=(), milli=1000), {"gpus": 1}),  # another node
    ],
)
def test_a_forged_assignment_counts_the_pods_own_request(assignment: Assignment, ask: dict[str, int]) -> None:
    book = ledger([gpu_node("n1", 2)])
    book.observe_pod(recorded("forged", "n1", assignment, **ask))
    milli = 1000 * ask.get("gpus", 0) + ask.get("milli", 0)
    assert 2000 - sum(book.snapshot()["n1"].gpu_free_milli) == milli


def test_a_duplicated_uuid_counts_every_gpu_the_pod_asks_for() -> None:
    node = GpuNode(name="n1", cpu_milli=8000, memory_mib=1 << 16, gpu_count=2, uuids=("GPU-a", "GPU-b"))
    book = ledger([node])
    forged = Assignment(node="n1", gpus=(0, 1), uuids=("GPU-a", "GPU-a"), milli=1000)
    book.observe_pod(recorded("dup", "n1", forged, gpus=2))
    assert book.snapshot()["n1"].gpu_free_milli == (0, 0)


def test_a_node_shrinking_below_a_recorded_index_counts_the_pod_conservatively() -> None:
    book = ledger([gpu_node("n1", 4)])
    book.observe_pod(recorded("p", "n1", Assignment(node="n1", gpus=(3,), uuids=(), milli=1000), gpus=1))
    book.upsert_node(gpu_node("n1", 2))  # GPUs 2 and 3 gone (a failed GPU, a relabel)
    assert sorted(book.snapshot()["n1"].gpu_free_milli) == [0, 1000]
    big = gpu_pod("big", gpus=4, node="n1", phase="Running")
    book.observe_pod(big)  # more GPUs than the node has: every GPU counts
    assert book.snapshot()["n1"].gpu_free_milli[0] <= 0 and book.snapshot()["n1"].gpu_free_milli[1] <= 0
