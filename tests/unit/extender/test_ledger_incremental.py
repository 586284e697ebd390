"""The ledger follows node events row by row (issue 57, item 2): a node joining, leaving or changing
makes that node's row again and no other, and whatever sequence of node and pod events came before,
the accounting and the decisions equal those of a fresh ledger built from the final nodes and pods.
A pod that fits nowhere on a large cluster gets a bounded answer that still counts nodes per reason."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kubegpu.extender.assignment import ANNOTATION, Assignment, encode
from kubegpu.extender.ledger import FAILED_NODES_LISTED, Ledger
from kubegpu.extender.node import GpuNode
from tests.unit.extender.conftest import gpu_node, gpu_pod, ledger

NODE_NAMES = ("n3", "a7", "z2", "m5")  # not in name order: joins land between rows
WIDE = GpuNode(name="m5", cpu_milli=64_000, memory_mib=1 << 17, gpu_count=8, uuids=(), gpu_model="")
POD_UIDS = tuple(f"p{i}" for i in range(5))


def _claimed(node: str, ask: dict[str, int], first: int | None) -> tuple[int, ...] | None:
    """The GPUs a pod's annotation records: ``first`` on (fits the node or not), ``None``: none."""
    if first is None or not (ask.get("gpus") or ask.get("milli")):
        return None
    return tuple(range(first, first + ask.get("gpus", 1)))


def _bound(uid: str, node: str, ask: dict[str, int], gpus: tuple[int, ...] | None) -> dict[str, Any]:
    """A pod bound on ``node``; ``gpus`` recorded in its annotation (``None``: another scheduler's)."""
    pod = gpu_pod(uid, node=node, phase="Running", milli=ask.get("milli", 0), gpus=ask.get("gpus", 0))
    pod["metadata"]["uid"] = uid
    if gpus is not None:
        milli = ask.get("milli") or 1000
        pod["metadata"]["annotations"] = {
            ANNOTATION: encode(Assignment(node=node, gpus=gpus, uuids=(), milli=milli))
        }
    return pod


_node = st.builds(
    lambda name, gpus, cpu: GpuNode(
        name=name, cpu_milli=cpu, memory_mib=1 << 17, gpu_count=gpus, uuids=(), gpu_model=""
    ),
    st.sampled_from(NODE_NAMES),
    st.sampled_from((0, 1, 2, 4, 8)),
    st.sampled_from((4_000, 16_000, 64_000)),
)
_ask = st.one_of(
    st.builds(lambda g: {"gpus": g}, st.integers(1, 3)),
    st.builds(lambda m: {"milli": m}, st.sampled_from((250, 500, 700))),
    st.just({}),
)
_event = st.one_of(
    st.tuples(st.just("upsert"), _node),
    st.tuples(st.just("remove"), st.sampled_from(NODE_NAMES)),
    st.tuples(st.just("relist"), st.lists(_node, max_size=6)),
    st.tuples(
        st.just("pod"),
        st.sampled_from(POD_UIDS),
        st.sampled_from(NODE_NAMES),
        _ask,
        st.one_of(st.none(), st.integers(0, 3)),
    ),
    st.tuples(st.just("delete"), st.sampled_from(POD_UIDS)),
    st.tuples(st.just("place"), st.sampled_from(POD_UIDS), _ask),
)


def _probes() -> list[dict[str, Any]]:
    return [
        gpu_pod("probe-a", gpus=1),
        gpu_pod("probe-b", milli=500),
        gpu_pod("probe-c", gpus=2, cpu_milli=8000),
        gpu_pod("probe-d", cpu_milli=2000),
    ]


def _replay(book: Ledger, events: list[tuple[Any, ...]]) -> tuple[dict[str, GpuNode], dict[str, Any]]:
    """Apply ``events``; the final nodes and the final pods (as the API server would list them)."""
    nodes: dict[str, GpuNode] = {}
    pods: dict[str, Any] = {}
    for event in events:
        kind = event[0]
        if kind == "upsert":
            nodes[event[1].name] = event[1]
            book.upsert_node(event[1])
        elif kind == "remove":
            nodes.pop(event[1], None)
            book.remove_node(event[1])
        elif kind == "relist":
            nodes = {n.name: n for n in event[1]}
            book.replace_nodes(nodes.values())
        elif kind == "pod":
            pods[event[1]] = _bound(event[1], event[2], event[3], _claimed(event[2], event[3], event[4]))
            book.observe_pod(pods[event[1]])
        elif kind == "delete":
            pods.pop(event[1], None)
            book.remove_pod(event[1])
        else:  # our filter places a pending pod, and its bind lands (the annotation we wrote)
            pending = gpu_pod(event[1], milli=event[2].get("milli", 0), gpus=event[2].get("gpus", 0))
            pending["metadata"]["uid"] = event[1]
            if event[1] in pods:
                continue
            decision = book.decide(pending, sorted(nodes))
            if decision.node is not None and decision.assignment is not None:
                gpus = decision.assignment.gpus if event[2].get("gpus") or event[2].get("milli") else None
                pods[event[1]] = _bound(event[1], decision.node, event[2], gpus)
                book.observe_pod(pods[event[1]])
    return nodes, pods


@settings(max_examples=200, deadline=None)
@given(
    start=st.lists(_node, max_size=4),
    events=st.lists(_event, min_size=5, max_size=30),
    policy=st.sampled_from(("kubegpu", "bestfit", "kubegpu-plan")),
)
def test_incremental_updates_equal_a_fresh_ledger_of_the_final_nodes_and_pods(
    start: list[GpuNode], events: list[tuple[Any, ...]], policy: str
) -> None:
    start = list({n.name: n for n in [WIDE, *start]}.values())
    book = ledger(start, policy=policy)
    book.snapshot()  # the state exists from here on: every later event goes through the rows
    nodes, pods = _replay(book, [("relist", start), *events])
    fresh = ledger(list(nodes.values()), policy=policy)
    fresh.replace_pods(list(pods.values()))
    assert book.snapshot() == fresh.snapshot()
    # kube-scheduler's order is its own: ties still go by the node order (names), on either ledger
    names, shuffled = sorted(nodes), sorted(nodes, key=lambda n: n[::-1])
    for probe in _probes():
        assert book.preview(probe, shuffled) == fresh.preview(probe, names)
        mine, theirs = book.decide(probe, shuffled), fresh.decide(probe, names)
        assert (mine.node, mine.assignment, dict(mine.failed)) == (
            theirs.node,
            theirs.assignment,
            dict(theirs.failed),
        )
    assert book.snapshot() == fresh.snapshot()


def _state_rows(book: Ledger) -> dict[str, tuple[Any, ...]]:
    return {name: (use.gpu_free_milli, use.cpu_left_milli) for name, use in book.snapshot().items()}


def test_a_node_event_makes_only_that_nodes_row_again() -> None:
    book = ledger([gpu_node(f"n{i:02d}", 8) for i in range(40)])
    for i in range(40):
        book.observe_pod(_bound(f"p{i}", f"n{i:02d}", {"gpus": 1 + i % 3}, tuple(range(1 + i % 3))))
    before = _state_rows(book)
    builds, derived = book.builds, book.rows_derived
    assert builds == 1

    book.upsert_node(gpu_node("n07", 8, cpu_milli=32_000))  # changed
    book.upsert_node(gpu_node("n07", 8, cpu_milli=32_000))  # the same again: nothing to do
    book.remove_node("n12")  # left
    book.upsert_node(gpu_node("n12b", 4))  # joined (takes the left node's row)
    book.upsert_node(gpu_node("n99", 2))  # joined (a new last row)
    after = _state_rows(book)

    assert book.builds == builds  # never rebuilt
    assert book.rows_derived == derived + 3  # n07, n12b, n99; the removal only empties its row
    assert after["n07"] == ((0, 0, *[1000] * 6), 32_000 - 1000)  # its pod counted again
    assert "n12" not in after and after["n12b"] == ((1000,) * 4, 64_000)
    assert after["n99"] == ((1000, 1000), 64_000)
    untouched = set(before) - {"n07", "n12"}
    assert {n: after[n] for n in untouched} == {n: before[n] for n in untouched}


def test_a_pod_event_on_a_node_without_guesses_makes_no_row_again() -> None:
    book = ledger([gpu_node("n1", 4), gpu_node("n2", 4)])
    book.snapshot()
    derived = book.rows_derived
    book.observe_pod(_bound("p1", "n1", {"gpus": 1}, (2,)))
    book.remove_pod("p1")
    assert book.rows_derived == derived and book.builds == 1
    book.observe_pod(_bound("p2", "n2", {"gpus": 1}, None))  # a guess: its node is made again
    assert book.rows_derived == derived + 1


def test_a_node_wider_than_every_row_rebuilds_the_state() -> None:
    book = ledger([gpu_node("n1", 4)])
    book.snapshot()
    book.upsert_node(gpu_node("n2", 8))
    assert book.snapshot()["n2"].gpu_free_milli == (1000,) * 8
    assert book.builds == 2


def test_a_pod_that_fits_nowhere_gets_a_bounded_answer_counting_nodes_per_reason() -> None:
    total = FAILED_NODES_LISTED * 3
    nodes = [gpu_node(f"n{i:05d}", 2 if i % 10 else 8) for i in range(total)]
    book = ledger(nodes)
    for i in range(0, total, 10):  # the 8-GPU nodes are full
        book.observe_pod(_bound(f"p{i}", f"n{i:05d}", {"gpus": 8}, tuple(range(8))))
    decision = book.decide(gpu_pod("big", gpus=4), [n.name for n in nodes])
    assert decision.node is None
    failed = dict(decision.failed)
    assert len(failed) == FAILED_NODES_LISTED
    reasons = set(failed.values())
    few = f"kubegpu: node has fewer than 4 GPUs ({total * 9 // 10:,} of {total:,} nodes)"
    full = f"kubegpu: fewer than 4 free GPUs ({total // 10:,} of {total:,} nodes)"
    assert reasons == {few, full}
    listed = np.array([1 if r == full else 0 for r in failed.values()])
    assert 0 < listed.sum() < FAILED_NODES_LISTED  # every reason names some of its nodes
    assert all(int(n[1:]) % 10 == 0 for n, r in failed.items() if r == full)


def test_a_pod_that_fits_nowhere_on_a_small_cluster_names_every_node() -> None:
    book = ledger([gpu_node("n1", 2), gpu_node("n2", 8)])
    failed = dict(book.decide(gpu_pod("big", gpus=4), ["n1"]).failed)
    assert failed == {"n1": "kubegpu: node has fewer than 4 GPUs"}
