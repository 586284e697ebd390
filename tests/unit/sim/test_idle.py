"""Where the idle GPU is at the end of a replay: leftover, CPU-stranded, or room a typical share fits."""

from __future__ import annotations

import numpy as np
import pytest

from kubegpu.errors import InputError
from kubegpu.sim.idle import fill_timeline, final_state, idle_by_class, mean_by_class, refused_by_kind
from kubegpu.sim.replay import Order, SeedRun, TieMode, replay
from kubegpu.sim.scoring import Policy
from kubegpu.sim.workload import Workload, prepare
from tests.unit.sim.conftest import make_trace

BIG = 1 << 20
NODES = [
    ("n0", 32_000, BIG, 1, "G"),  # takes the 810-milli pod: 190 milli no typical share fits
    ("n1", 4_000, BIG, 1, "G"),  # takes a 4-core 500-milli pod: 500 milli left, no core left
    ("n2", 32_000, BIG, 2, "G"),  # takes a 2-core 500-milli pod: 500 + 1000 milli a share fits
]
PODS = [("p0", 2_000, 1, 1, 810, ""), ("p1", 4_000, 1, 1, 500, ""), ("p2", 2_000, 1, 1, 500, "")]


def _run(workload: Workload, node: list[int], gpus: list[tuple[int, ...]]) -> SeedRun:
    n = len(node)
    return SeedRun(
        policy=Policy.FGD,
        seed=0,
        tie=TieMode.NODE_ORDER,
        order=Order.NONE,
        total_gpu_milli=workload.total_gpu_milli,
        arrived_milli=np.zeros(n, dtype=np.int64),
        allocated_milli=np.zeros(n, dtype=np.int64),
        frag_milli=np.zeros(n),
        placed=np.array([x >= 0 for x in node]),
        node=np.array(node, dtype=np.int64),
        shape=workload.pod_shape.copy(),
        comm_cost=np.zeros(0),
        comm_ideal=np.zeros(0),
        comm_lowest_index=np.zeros(0),
        empty_frag_milli=0.0,
        seconds=0.0,
        gpus=tuple(gpus),
    )


def test_idle_milli_is_split_by_why_no_typical_share_uses_it() -> None:
    workload = prepare(make_trace(NODES, PODS))
    run = _run(workload, [0, 1, 2], [(0,), (0,), (1,)])
    by_class = {(c.gpus_per_node, c.cores_per_node): c for c in idle_by_class(workload, run)}
    assert set(by_class) == {(1, 32.0), (1, 4.0), (2, 32.0)}
    leftover, stranded, fits = by_class[(1, 32.0)], by_class[(1, 4.0)], by_class[(2, 32.0)]
    assert (leftover.leftover_milli, leftover.stranded_milli, leftover.usable_milli) == (190, 0, 0)
    assert (stranded.leftover_milli, stranded.stranded_milli, stranded.usable_milli) == (0, 500, 0)
    assert (fits.leftover_milli, fits.stranded_milli, fits.usable_milli) == (0, 0, 1500)
    assert stranded.cpu_used_pct == 100.0
    for c in by_class.values():
        assert c.gpu_used_milli + c.idle_milli == c.gpu_milli


def test_a_failed_pod_leaves_its_node_untouched() -> None:
    workload = prepare(make_trace(NODES, PODS))
    state = final_state(workload, _run(workload, [0, -1, -1], [(0,), (), ()]))
    assert state.gpu_free_milli[:, :2].tolist() == [[190, 0], [1000, 0], [1000, 1000]]
    assert state.cpu_left_milli.tolist() == [30_000, 4_000, 32_000]


def test_a_run_that_does_not_fit_the_cluster_is_refused() -> None:
    workload = prepare(make_trace(NODES, PODS))
    with pytest.raises(InputError, match="does not fit its own cluster"):
        final_state(workload, _run(workload, [0, 0, 0], [(0,), (0,), (0,)]))  # 1810 milli on one GPU


def _real_replay() -> tuple[Workload, SeedRun]:
    """kubegpu-plan on six 4-GPU nodes of three sizes and 60 shares of nine sizes, seed 3."""
    nodes = [(f"n{i}", 16_000 * (1 + i % 3), BIG, 4, "G") for i in range(6)]
    pods = [(f"p{i:02d}", 1_000 * (1 + i % 7), 10, 1, 100 * (i % 9 + 1), "") for i in range(60)]
    workload = prepare(make_trace(nodes, pods))
    return workload, replay(workload, Policy.KUBEGPU_PLAN, 3, inflate=1.3)


def test_a_real_replay_accounts_for_every_gpu_and_the_mean_of_equal_runs_is_the_run() -> None:
    workload, run = _real_replay()
    classes = idle_by_class(workload, run)
    assert sum(c.gpu_used_milli for c in classes) == int(run.allocated_milli[-1])
    assert sum(c.gpu_milli for c in classes) == workload.total_gpu_milli
    assert mean_by_class([classes, classes]) == classes


def test_the_timeline_counts_untouched_gpus_lone_shares_and_refusals_as_the_arrivals_come() -> None:
    # p0 (810) and p1 (500) each open a GPU; then p2 (500) opens n2's second GPU, a whole-GPU pod
    # finds no room, and a second 500 joins p2: that GPU no longer holds a lone share
    pods = [*PODS, ("p3", 1_000, 1, 1, 1000, ""), ("p4", 1_000, 1, 1, 500, "")]
    workload = prepare(make_trace(NODES, pods))
    run = _run(workload, [0, 1, 2, -1, 2], [(0,), (0,), (1,), (), (1,)])
    early, late = fill_timeline(workload, run, points=2)
    assert (early.arrivals, early.share_of_arrivals) == (2, 0.4)
    assert early.untouched_gpus == 2  # n2's two GPUs
    assert early.lone_shares == {810: 1, 500: 1}
    assert early.refused == {}
    assert (late.arrivals, late.share_of_arrivals) == (5, 1.0)
    assert late.untouched_gpus == 1
    assert late.lone_shares == {810: 1, 500: 1}
    assert late.refused == {int(workload.pod_shape[3]): 1}
    with pytest.raises(InputError, match="at least one point"):
        fill_timeline(workload, run, points=0)


def test_the_timeline_ends_where_the_replay_ends() -> None:
    workload, run = _real_replay()
    points = fill_timeline(workload, run)
    assert len(points) == 20
    assert [p.untouched_gpus for p in points] == sorted((p.untouched_gpus for p in points), reverse=True)
    end = final_state(workload, run)
    assert points[-1].untouched_gpus == int((end.gpu_free_milli == 1000).sum())
    assert sum(points[-1].refused.values()) == int((~run.placed).sum())


def test_refusals_are_counted_per_kind_with_their_gpu_and_the_first_refusal() -> None:
    # a CPU-only pod, two shares, a 1-GPU pod and a 2-GPU pod; the 2-GPU pod is refused (arrival
    # 3 of 6) and so is the second share (arrival 5 of 6)
    nodes = [("n0", 32_000, BIG, 2, "G")]
    pods = [
        ("p0", 1_000, 1, 0, 0, ""),
        ("p1", 1_000, 1, 1, 500, ""),
        ("p2", 1_000, 1, 1, 1000, ""),
        ("p3", 1_000, 1, 2, 1000, ""),
        ("p4", 1_000, 1, 1, 300, ""),
        ("p5", 1_000, 1, 1, 600, ""),
    ]
    workload = prepare(make_trace(nodes, pods))
    run = _run(workload, [0, 0, 0, -1, 0, -1], [(), (0,), (1,), (), (0,), ()])
    kinds = {k.label: k for k in refused_by_kind(workload, run)}
    assert list(kinds) == ["CPU-only", "shares", "1 GPU", "2 GPUs"]
    cpu_only = kinds["CPU-only"]
    assert (cpu_only.arrived, cpu_only.refused, cpu_only.first_refused) == (1, 0, None)
    shares = kinds["shares"]
    assert (shares.arrived, shares.refused, shares.refused_milli) == (3, 1, 600)
    assert shares.first_refused == pytest.approx(5 / 6)
    two = kinds["2 GPUs"]
    assert (two.arrived, two.refused, two.refused_milli) == (1, 1, 2000)
    assert two.first_refused == pytest.approx(3 / 6)
    assert kinds["1 GPU"].refused == 0


def test_refusals_add_up_to_the_replay() -> None:
    workload, run = _real_replay()
    kinds = refused_by_kind(workload, run)
    assert sum(k.arrived for k in kinds) == len(run.node)
    assert sum(k.refused for k in kinds) == int((~run.placed).sum())
    arrived_gpu = int(run.arrived_milli[-1])
    assert sum(k.refused_milli for k in kinds) == arrived_gpu - int(run.allocated_milli[-1])
