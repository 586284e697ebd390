"""The replay protocol: one attempt per pod, constraints, no departures, ties, determinism, topology."""

from __future__ import annotations

import numpy as np
import pytest

from kubegpu.sim.replay import TieMode, best_group_cost, replay
from kubegpu.sim.scoring import Policy
from kubegpu.sim.workload import node_order, prepare
from tests.unit.sim.conftest import make_trace

BIG = 1 << 20


def test_one_attempt_per_pod_a_pod_that_does_not_fit_fails_for_good() -> None:
    trace = make_trace(
        [("n0", 8000, BIG, 1, "T4")], [("a", 1000, 1, 1, 1000, ""), ("b", 1000, 1, 1, 1000, "")]
    )
    run = replay(prepare(trace), Policy.FGD, 1, inflate=0)
    assert run.placed.tolist().count(True) == 1
    assert run.allocated_milli.tolist() == [1000, 1000]
    assert run.arrived_milli.tolist() == [1000, 2000]  # failed pods count as arrived


NODE = ("n0", 8000, 200, 2, "T4")


@pytest.mark.parametrize("policy", list(Policy))
@pytest.mark.parametrize(
    ("pods", "placed", "why"),
    [
        ([("p", 9000, 1, 1, 500, "")], 0, "more CPU than the node has"),
        ([("p", 5000, 1, 1, 500, ""), ("q", 5000, 1, 1, 500, "")], 1, "CPU used by the first pod"),
        ([("p", 1000, 300, 1, 500, "")], 0, "more memory than the node has"),
        ([("p", 1000, 150, 0, 0, ""), ("q", 1000, 150, 0, 0, "")], 1, "memory used by the first pod"),
        ([("p", 1000, 1, 1, 500, "A10")], 0, "a GPU model the cluster lacks"),
        ([("p", 1000, 1, 1, 500, "T4|A10")], 1, "an allowed GPU model"),
        ([("p", 1000, 1, 3, 1000, "")], 0, "more GPUs than the node has"),
        ([("p", 1000, 1, 2, 1000, ""), ("q", 1000, 1, 1, 100, "")], 1, "no GPU left"),
        ([(f"p{i}", 100, 1, 1, 600, "") for i in range(3)], 2, "600 + 600 do not share a GPU"),
        ([(f"p{i}", 100, 1, 1, 500, "") for i in range(4)], 4, "500 + 500 share a GPU"),
    ],
)
def test_constraints_are_enforced_by_every_policy(policy: Policy, pods: list, placed: int, why: str) -> None:
    run = replay(prepare(make_trace([NODE], pods)), policy, 3, inflate=0)
    assert int(run.placed.sum()) == placed, why


def test_no_departures_allocation_never_decreases() -> None:
    nodes = [(f"n{i}", 32000, BIG, 4, "G") for i in range(4)]
    pods = [(f"p{i:02d}", 2000 + 100 * i, 10, 1, 100 * (i % 10 + 1), "") for i in range(30)]
    run = replay(prepare(make_trace(nodes, pods)), Policy.BESTFIT, 5, inflate=1.3)
    assert (np.diff(run.allocated_milli) >= 0).all()
    assert run.allocated_milli[-1] <= 16_000
    assert run.arrived_milli[-1] >= 1.3 * 16_000 - 1000


@pytest.mark.parametrize("policy", list(Policy))
def test_replay_is_deterministic_per_seed(policy: Policy) -> None:
    nodes = [(f"n{i}", 32000, BIG, 2 + 2 * (i % 2), "G") for i in range(6)]
    pods = [(f"p{i:02d}", 1000 * (i % 5 + 1), 10, 1, 1000 if i % 3 else 300, "") for i in range(20)]
    w = prepare(make_trace(nodes, pods))
    a = replay(w, policy, 11, tie=TieMode.RANDOM)
    b = replay(w, policy, 11, tie=TieMode.RANDOM)
    assert a.node.tolist() == b.node.tolist()
    assert a.frag_milli.tolist() == b.frag_milli.tolist()


def test_node_order_ties_go_to_the_first_node_of_the_seeds_order() -> None:
    nodes = [(f"n{i}", 32000, BIG, 2, "G") for i in range(5)]
    w = prepare(make_trace(nodes, [("p", 1000, 1, 1, 1000, "")]))
    for seed in range(6):
        run = replay(w, Policy.BESTFIT, seed, inflate=0)
        assert run.node[0] == node_order(5, seed)[0]


def test_random_ties_spread_over_the_tied_nodes() -> None:
    nodes = [(f"n{i}", 32000, BIG, 2, "G") for i in range(5)]
    w = prepare(make_trace(nodes, [("p", 1000, 1, 1, 1000, "")]))
    chosen = {
        int(replay(w, Policy.BESTFIT, seed, inflate=0, tie=TieMode.RANDOM).node[0]) for seed in range(40)
    }
    assert len(chosen) >= 3


def test_multi_gpu_pods_stay_inside_an_nvlink_group_when_one_is_free() -> None:
    # GPUs 0 and 4 are taken by whole 1-GPU pods (one per group is the worst case), then a 4-GPU pod
    nodes = [("n0", 96000, BIG, 8, "G2")]
    pods = [("a", 1000, 1, 1, 1000, ""), ("b", 1000, 1, 1, 1000, ""), ("c", 1000, 1, 4, 1000, "")]
    w = prepare(make_trace(nodes, pods))
    for policy in Policy:
        run = replay(w, policy, 1, inflate=0)
        assert run.placed.all()
        assert run.comm_cost.tolist() == [best_group_cost(8, 4)] == [6.0]


def test_kubegpu_keeps_a_group_whole_for_later_multi_gpu_pods() -> None:
    # six shared pods on an 8-GPU node, then a 4-GPU pod: kubegpu must leave one group of four free
    nodes = [("n0", 96000, BIG, 8, "G2")]
    pods = [(f"s{i}", 1000, 1, 1, 600, "") for i in range(4)] + [("z", 1000, 1, 4, 1000, "")]
    w = prepare(make_trace(nodes, pods))
    for seed in range(5):
        run = replay(w, Policy.KUBEGPU, seed, inflate=0)
        assert run.placed.all()
        assert run.comm_cost.tolist() == [6.0]


def test_empty_cluster_fragmentation_is_reported() -> None:
    # only CPU-only pods and 2-GPU pods: a 1-GPU node is all fragment for both
    nodes = [("small", 8000, BIG, 1, "G"), ("big", 8000, BIG, 2, "G")]
    pods = [("a", 1000, 1, 2, 1000, ""), ("b", 1000, 1, 0, 0, "")]
    run = replay(prepare(make_trace(nodes, pods)), Policy.FGD, 1, inflate=0)
    # CPU-only shape (p=.5): all 3000 idle; 2-GPU shape (p=.5): the 1-GPU node's 1000
    assert run.empty_frag_milli == pytest.approx(0.5 * 3000 + 0.5 * 1000)


def test_eight_gpu_nodes_use_the_seed_machine_topology() -> None:
    from kubegpu.sim.policy import SEED_8GPU
    from kubegpu.sim.replay import node_topology
    from kubegpu.sources.spec import load_node

    eight = node_topology(8)
    assert eight.pair_cost(0, 3) == 1.0 and eight.pair_cost(3, 4) == 4.0
    assert eight == load_node(SEED_8GPU).topology  # built in code, equal to the builtin spec
    four = node_topology(4)
    assert {four.pair_cost(a, b) for a in range(4) for b in range(4) if a != b} == {1.0}
