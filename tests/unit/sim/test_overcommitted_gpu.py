"""A GPU the API shows over-committed (free milli below 0) is scored as a full GPU by every policy.

Why: the extender builds its ``ClusterState`` from what the API server shows, and pods bound by another
scheduler can put a GPU past 1000 milli (two whole-GPU pods on GPU 0). kubegpu-plan's value tables are
indexed by free milli; a negative index read the table from its end (a full GPU priced as an empty one)
or raised ``IndexError``, and the extender answered "internal error" for every share pod.
"""

from __future__ import annotations

import numpy as np
import pytest

from kubegpu.sim.nodescore import FragTable, NodeRows, node_scorer
from kubegpu.sim.plan import value_plan_of
from kubegpu.sim.policy import POLICIES, ClusterState, Selector, TieMode
from kubegpu.sim.scoring import (
    MILLI,
    N_CLASSES,
    NodeArrays,
    PodRequest,
    Policy,
    TypicalShapes,
    fragmentation,
    score_nodes,
)
from tests.unit.sim.test_nodescore import MODELS, half_sharing_shapes, sharing_shapes

WHOLE = PodRequest(
    cpu_milli=1000, memory_mib=0, num_gpu=1, gpu_milli=MILLI, model_ok=np.ones(MODELS, dtype=bool)
)
HALF = PodRequest(
    cpu_milli=1000, memory_mib=0, num_gpu=1, gpu_milli=500, model_ok=np.ones(MODELS, dtype=bool)
)


def _share(milli: int) -> PodRequest:
    return PodRequest(
        cpu_milli=2000, memory_mib=0, num_gpu=1, gpu_milli=milli, model_ok=np.ones(MODELS, dtype=bool)
    )


def _overcommitted(shapes: TypicalShapes, extra: list[PodRequest]) -> ClusterState:
    """Node ``a``: GPU 0 holds a whole-GPU pod plus ``extra`` (bound elsewhere), GPU 1 is free; node ``b``:
    both GPUs fully used. A share fits only on ``a``'s GPU 1."""
    state = ClusterState.build(
        names=["a", "b"],
        cpu_milli=np.array([64000, 64000]),
        memory_mib=np.array([100_000, 100_000]),
        gpu_count=np.array([2, 2]),
        model_index=np.array([0, 0]),
        typical=shapes,
    )
    for pod in [WHOLE, *extra]:
        state.bind_at(0, (0,), pod)
    state.bind_at(1, (0,), WHOLE)
    state.bind_at(1, (1,), WHOLE)
    return state


SHAPES = {"sharing": sharing_shapes, "half-sharing": half_sharing_shapes}
OVER = {"-500": [HALF], "-1000": [WHOLE], "-2000": [WHOLE, WHOLE], "-4000": [WHOLE] * 4}


@pytest.mark.parametrize("over", list(OVER))
@pytest.mark.parametrize("workload", list(SHAPES))
@pytest.mark.parametrize("policy", list(POLICIES))
def test_no_policy_fails_or_places_a_share_on_an_overcommitted_gpu(
    policy: Policy, workload: str, over: str
) -> None:
    shapes = SHAPES[workload](np.random.default_rng(0))
    state = _overcommitted(shapes, OVER[over])
    assert state.nodes.gpu_free_milli[0, 0] == int(over)
    for milli in (50, 300, 810):
        selector = Selector(
            tie=TieMode.NODE_ORDER,
            order_key=None,
            tie_rng=np.random.default_rng(1),
            policy_rng=np.random.default_rng(2),
        )
        placement = POLICIES[policy].choose(state, _share(milli), selector)
        assert placement is not None and (placement.node, placement.gpus) == (0, (1,)), (policy, milli)


@pytest.mark.parametrize("workload", list(SHAPES))
def test_kubegpu_plan_values_an_overcommitted_gpu_as_a_full_one(workload: str) -> None:
    plan = value_plan_of(SHAPES[workload](np.random.default_rng(0)))
    assert not plan.flat
    cpu = np.array([8000, 8000])
    full = np.array([[0, 1000, 400], [0, 700, 1000]])
    for below in (-1, -500, -1000, -1001, -5000):
        over = full.copy()
        over[:, 0] = below
        assert plan.node_values(over, cpu).tolist() == plan.node_values(full, cpu).tolist(), below
        for milli in (50, 300, 810):
            got = plan.buckets(over, cpu, milli, 2000)
            assert got.tolist() == plan.buckets(full, cpu, milli, 2000).tolist(), (below, milli)
            assert (got[:, 0] == -np.inf).all()  # no room on the over-committed GPU


def _rows(shapes: TypicalShapes) -> NodeArrays:
    """Nodes whose GPU 0 is over-committed by growing amounts, beside GPUs with room."""
    free = np.array([[f, 1000, 470, 0] for f in (-1, -300, -1000, -1002, -3000)] * 2, dtype=np.int64)
    rows = len(free)
    cpu = np.array([64000, 3000] * (rows // 2), dtype=np.int64)
    model = np.zeros(rows, dtype=np.int64)
    return NodeArrays(
        cpu_left_milli=cpu,
        memory_left_mib=np.full(rows, 4096, dtype=np.int64),
        gpu_free_milli=free,
        gpu_count=np.full(rows, 4, dtype=np.int64),
        model_index=model,
        class_counts=np.zeros((rows, N_CLASSES), dtype=np.int64),
        frag_milli=fragmentation(np.maximum(free, 0), cpu, model, shapes),
    )


@pytest.mark.parametrize("workload", list(SHAPES))
def test_kubegpu_plan_per_node_scores_equal_the_vectorised_ones_on_overcommitted_gpus(workload: str) -> None:
    shapes = SHAPES[workload](np.random.default_rng(0))
    nodes = _rows(shapes)
    rows, frag = NodeRows(nodes), FragTable(shapes)
    for milli in (50, 300, 810, MILLI):
        pod = _share(milli)
        want = score_nodes(Policy.KUBEGPU_PLAN, nodes, pod, shapes)
        score = node_scorer(Policy.KUBEGPU_PLAN, pod, rows, frag)
        got = [score(r) for r in range(len(nodes.gpu_count))]
        assert [s for s, _ in got] == want.score.tolist(), milli
        fits = want.score > -np.inf
        assert [g for (_, g), ok in zip(got, fits, strict=True) if ok] == want.gpu[fits].tolist(), milli
        assert all(g != 0 for g in want.gpu[fits].tolist())
