"""kubegpu-plan's value-to-go (``kubegpu.sim.plan``) and the placements it leads to."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kubegpu.sim.plan import PLAN_BUCKET_MILLI, value_plan, value_plan_of
from kubegpu.sim.scoring import MILLI, Policy, TypicalShapes, score_nodes, typical_shapes
from tests.unit.sim.test_nodescore import MODELS, _nodes, _pods, _shapes


def _workload(pods: dict[tuple[int, int], int]) -> TypicalShapes:
    """Typical shapes from {(num_gpu, gpu_milli): pods}, 4 cores each, any model."""
    shapes = [
        (4000, milli, num, np.ones(MODELS, dtype=bool), f"{num}x{milli}") for (num, milli) in sorted(pods)
    ]
    return typical_shapes(shapes, [pods[k] for k in sorted(pods)], n_models=MODELS, coverage=1.0)


SHARED = {(1, 810): 300, (1, 600): 200, (1, 400): 150, (1, 300): 250, (1, 1000): 100, (2, 1000): 20}


def test_value_to_go_is_zero_with_no_room_and_never_falls_as_room_grows() -> None:
    plan = value_plan(_workload(SHARED))
    assert not plan.flat
    assert plan.value.shape == (MILLI + 1,)
    assert plan.value[0] == 0
    assert np.all(np.diff(plan.value) >= 0)


def test_value_to_go_is_the_best_set_of_shares_at_the_plans_prices() -> None:
    plan = value_plan(_workload(SHARED))
    profit = {milli: milli - price for milli, price in plan.prices.items()}
    assert set(profit) == {810, 600, 400, 300}  # the shares, not the whole GPUs
    for free in range(0, MILLI + 1, 10):
        best = 0.0
        for n in itertools.product(*(range(free // m + 1) for m in profit)):
            if sum(c * m for c, m in zip(n, profit, strict=True)) <= free:
                best = max(best, sum(c * profit[m] for c, m in zip(n, profit, strict=True)))
        assert plan.value[free] == pytest.approx(best, abs=1e-6), free


def test_the_plan_places_the_pivot_on_part_of_its_arrivals_and_reports_it() -> None:
    plan = value_plan(_workload(SHARED))
    assert plan.pivot_milli == 810  # the largest common share
    assert 0.0 <= plan.pivot_placed <= 1.0
    assert 0.0 < plan.plan_pct <= 100.0


def test_a_workload_without_shares_has_a_flat_plan_and_kubegpu_plan_scores_as_kubegpu() -> None:
    shapes = _workload({(1, 1000): 100, (2, 1000): 30, (8, 1000): 5})
    assert value_plan(shapes).flat
    rng = np.random.default_rng(0)
    nodes = _nodes(rng, shapes)
    for pod in _pods(rng):
        want = score_nodes(Policy.KUBEGPU, nodes, pod, shapes)
        got = score_nodes(Policy.KUBEGPU_PLAN, nodes, pod, shapes)
        assert got.score.tolist() == want.score.tolist()
        assert got.gpu.tolist() == want.gpu.tolist()


def test_the_plan_is_solved_once_per_workload() -> None:
    shapes = _workload(SHARED)
    assert value_plan_of(shapes) is value_plan_of(shapes)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_share_goes_to_the_gpu_that_loses_the_least_value_to_go_and_only_then_by_kubegpus_score(
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    shapes = _shapes(rng)
    plan = value_plan_of(shapes)
    assert not plan.flat
    nodes = _nodes(rng, shapes)
    for pod in _pods(rng):
        if not pod.shared:
            continue
        got = score_nodes(Policy.KUBEGPU_PLAN, nodes, pod, shapes)
        base = score_nodes(Policy.KUBEGPU, nodes, pod, shapes)
        fits = np.isfinite(base.score)
        assert np.array_equal(np.isfinite(got.score), fits)  # the plan never makes a pod fit
        for r in np.flatnonzero(fits):
            free = nodes.gpu_free_milli[r]
            loss = [
                np.floor((plan.value[f - pod.gpu_milli] - plan.value[f]) / PLAN_BUCKET_MILLI)
                for f in free
                if f >= pod.gpu_milli
            ]
            best = max(loss)
            assert got.score[r] == best * 1000 + base.score[r]
            g = int(got.gpu[r])
            assert free[g] >= pod.gpu_milli
            assert (
                np.floor((plan.value[free[g] - pod.gpu_milli] - plan.value[free[g]]) / PLAN_BUCKET_MILLI)
                == best
            )
            if base.gpu[r] >= 0 and free[base.gpu[r]] >= pod.gpu_milli:
                own = plan.value[free[base.gpu[r]] - pod.gpu_milli] - plan.value[free[base.gpu[r]]]
                if np.floor(own / PLAN_BUCKET_MILLI) == best:
                    assert g == base.gpu[r]  # kubegpu's own GPU whenever it is in the best bucket
