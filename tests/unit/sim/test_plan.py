"""kubegpu-plan's value-to-go (``kubegpu.sim.plan``) and the placements it leads to."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kubegpu.sim.plan import (
    PLAN_BUCKET_MILLI,
    PLAN_CPU_MATCH_SCALE,
    PLAN_CPU_MATCH_STEPS,
    PLAN_CPU_PRICES,
    PLAN_RESERVE_PENALTY,
    PLAN_VALUE_UNIT,
    ValuePlan,
    cpu_match_step,
    cpu_match_steps,
    value_plan,
    value_plan_of,
)
from kubegpu.sim.scoring import (
    MILLI,
    N_CLASSES,
    NodeArrays,
    PodRequest,
    Policy,
    TypicalShapes,
    fragmentation,
    score_nodes,
    typical_shapes,
)
from tests.unit.sim.test_nodescore import MODELS, _nodes, _pods, _shapes, half_sharing_shapes, sharing_shapes


def _workload(pods: dict[tuple[int, int], int]) -> TypicalShapes:
    """Typical shapes from {(num_gpu, gpu_milli): pods}, 4 cores each, any model."""
    shapes = [
        (4000, milli, num, np.ones(MODELS, dtype=bool), f"{num}x{milli}") for (num, milli) in sorted(pods)
    ]
    return typical_shapes(shapes, [pods[k] for k in sorted(pods)], n_models=MODELS, coverage=1.0)


def _node_value(plan: ValuePlan, free: list[int], cpu_milli: int) -> int:
    """V(F, C) from its definition: the least over the core prices of sum_g U_l(f_g) + l * C."""
    return min(
        sum(int(plan.node_table[j, f]) for f in free) + price * cpu_milli
        for j, price in enumerate(PLAN_CPU_PRICES)
    )


def _loss_bucket(plan: ValuePlan, free: list[int], cpu_milli: int, gpu: int, pod: PodRequest) -> float:
    """The bucket of node value a share loses on GPU ``gpu`` of a node (reference for the engines)."""
    after = list(free)
    after[gpu] -= pod.gpu_milli
    lost = _node_value(plan, after, cpu_milli - pod.cpu_milli) - _node_value(plan, free, cpu_milli)
    return float(lost // (PLAN_BUCKET_MILLI * PLAN_VALUE_UNIT))


def _best_bucket(plan: ValuePlan, free: list[int], cpu_milli: int, pod: PodRequest) -> float:
    """The best bucket of node value lost over a node's GPUs with room for ``pod``."""
    return max(_loss_bucket(plan, free, cpu_milli, g, pod) for g, f in enumerate(free) if f >= pod.gpu_milli)


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


def test_each_core_price_gives_the_best_set_of_shares_at_the_plans_prices_less_their_cores() -> None:
    plan = value_plan(_workload(SHARED))  # every share asks 4 cores
    assert plan.node_table.shape == (len(PLAN_CPU_PRICES), MILLI + 1)
    assert PLAN_CPU_PRICES[0] == 0
    assert np.array_equal(plan.node_table[0], np.rint(plan.value * PLAN_VALUE_UNIT))
    for j, price in enumerate(PLAN_CPU_PRICES):
        profit = {milli: milli - p - 4 * price for milli, p in plan.prices.items()}
        for free in range(0, MILLI + 1, 50):
            best = 0.0
            for n in itertools.product(*(range(free // m + 1) for m in profit)):
                if sum(c * m for c, m in zip(n, profit, strict=True)) <= free:
                    best = max(best, sum(c * profit[m] for c, m in zip(n, profit, strict=True)))
            assert plan.node_table[j, free] == round(best * PLAN_VALUE_UNIT), (price, free)
    assert not plan.node_table[-1].any()  # the last price is above any share's profit per core


def test_a_nodes_value_is_its_gpus_while_its_cores_last_and_falls_to_nothing_without_cores() -> None:
    plan = value_plan(_workload(SHARED))
    free = [MILLI, MILLI, 530, 190]
    gpus_alone = sum(int(plan.node_table[0, f]) for f in free)
    assert gpus_alone > 0
    values = [_node_value(plan, free, cores * 1000) for cores in (0, 2, 4, 8, 12, 16, 32, 96)]
    assert values[0] == 0  # no cores: no share can still come
    assert values == sorted(values)  # more cores are never worth less
    assert values[-1] == gpus_alone  # plenty of cores: the GPUs' own value-to-go
    assert values[2] < gpus_alone  # 4 cores feed one 4-core share, not the three GPUs' worth
    # the vectorised form gives the same integers
    rows = np.array([free] * 8, dtype=np.int64)
    cpu = np.array([0, 2, 4, 8, 12, 16, 32, 96], dtype=np.int64) * 1000
    assert plan.node_values(rows, cpu).tolist() == values


def test_a_share_that_takes_a_nodes_last_cores_loses_the_value_of_the_gpus_they_would_feed() -> None:
    shapes = _workload(SHARED)
    plan = value_plan_of(shapes)
    ok = np.ones(MODELS, dtype=bool)
    pod = PodRequest(cpu_milli=4000, memory_mib=0, num_gpu=1, gpu_milli=400, model_ok=ok)
    # two empty 2-GPU nodes: 8 cores (the share leaves 4, for one more share) or 64 cores
    nodes = _two_nodes(shapes, (8_000, 64_000))
    bucket = plan.buckets(nodes.gpu_free_milli, nodes.cpu_left_milli, pod.gpu_milli, pod.cpu_milli)
    assert bucket[0].max() < bucket[1].max()
    for r, cpu in enumerate((8_000, 64_000)):
        for g in range(2):
            assert bucket[r, g] == _loss_bucket(plan, [MILLI, MILLI], cpu, g, pod)
    assert int(np.argmax(score_nodes(Policy.KUBEGPU_PLAN, nodes, pod, shapes).score)) == 1


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


@pytest.mark.parametrize("sharing", ["little", "half", "most"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_share_goes_to_the_gpu_that_loses_the_least_value_to_go_and_only_then_by_kubegpus_score(
    seed: int, sharing: str
) -> None:
    # with the CPU match (shares carry most of the GPU demand) the node's match comes between the
    # two; with the partner reserve (half of it or more) every pod is held to it
    rng = np.random.default_rng(seed)
    shapes = {"little": _shapes, "half": half_sharing_shapes, "most": sharing_shapes}[sharing](rng)
    plan = value_plan_of(shapes)
    assert not plan.flat
    assert plan.cpu_match is (sharing == "most")
    assert plan.reserve is (sharing != "little")
    nodes = _nodes(rng, shapes)
    for pod in _pods(rng):
        got = score_nodes(Policy.KUBEGPU_PLAN, nodes, pod, shapes)
        base = score_nodes(Policy.KUBEGPU, nodes, pod, shapes)
        if not pod.shared:
            # whole-GPU and CPU-only pods: kubegpu's score, held to the partner reserve where it is on
            for r in range(len(base.score)):
                held = plan.reserve and _reserve_slack(nodes, r, pod, -1) < 0 and np.isfinite(base.score[r])
                assert got.score[r] == base.score[r] - (PLAN_RESERVE_PENALTY if held else 0.0)
            assert got.gpu.tolist() == base.gpu.tolist()
            continue
        match = cpu_match_steps(
            nodes.cpu_left_milli, nodes.gpu_free_milli.sum(axis=1), pod.cpu_milli, pod.gpu_milli
        )
        fits = np.isfinite(base.score)
        assert np.array_equal(np.isfinite(got.score), fits)  # the plan never makes a pod fit
        for r in np.flatnonzero(fits):
            free = nodes.gpu_free_milli[r].tolist()
            cpu = int(nodes.cpu_left_milli[r])
            best = _best_bucket(plan, free, cpu, pod)
            g = int(got.gpu[r])
            held = plan.reserve and _reserve_slack(nodes, r, pod, g) < 0
            if plan.cpu_match:
                want = best * 1e6 + match[r] * 1000 + base.score[r]
            else:
                want = best * 1000 + base.score[r]
            assert got.score[r] == (want - PLAN_RESERVE_PENALTY if held else want)
            assert free[g] >= pod.gpu_milli
            assert _loss_bucket(plan, free, cpu, g, pod) == best
            hint = int(base.gpu[r])
            if hint >= 0 and free[hint] >= pod.gpu_milli and _loss_bucket(plan, free, cpu, hint, pod) == best:
                assert g == hint  # kubegpu's own GPU whenever it is in the best bucket


def _reserve_slack(nodes: NodeArrays, r: int, pod: PodRequest, g: int) -> int:
    """The partner reserve by hand: 16 milli-cores per free milli of each GPU in use with 200 or
    more free, the pod's own GPU (``g``, -1 for none) counted after it."""
    free = nodes.gpu_free_milli[r].tolist()
    if g >= 0:
        free[g] -= pod.gpu_milli
    rooms = sum(f for f in free if 200 <= f < MILLI)
    return int(nodes.cpu_left_milli[r]) - pod.cpu_milli - 16 * rooms


def _pair_of_nodes(shapes: TypicalShapes, free: list[list[int]], cpu_left: list[int]) -> NodeArrays:
    """Two nodes of two GPUs of model 0, with the given free milli and milli-cores."""
    gpu_free = np.array(free, dtype=np.int64)
    cpu = np.array(cpu_left, dtype=np.int64)
    model = np.zeros(2, dtype=np.int64)
    return NodeArrays(
        cpu_left_milli=cpu,
        memory_left_mib=np.full(2, 4096, dtype=np.int64),
        gpu_free_milli=gpu_free,
        gpu_count=np.full(2, 2, dtype=np.int64),
        model_index=model,
        class_counts=np.zeros((2, N_CLASSES), dtype=np.int64),
        frag_milli=fragmentation(gpu_free, cpu, model, shapes),
    )


def _request(cpu_milli: int, num_gpu: int = 0, gpu_milli: int = 0) -> PodRequest:
    return PodRequest(
        cpu_milli=cpu_milli,
        memory_mib=0,
        num_gpu=num_gpu,
        gpu_milli=gpu_milli,
        model_ok=np.ones(MODELS, dtype=bool),
    )


def test_the_partner_reserve_keeps_a_rooms_cores_from_other_pods_but_never_refuses_one() -> None:
    shapes = sharing_shapes(np.random.default_rng(0))
    assert value_plan_of(shapes).cpu_match
    # node 0 has a GPU with 530 milli free beside a share: 16 x 530 = 8.48 of its 12 cores are kept
    # for the share that fills it, so a 4-core pod leaves node 0 alone while node 1 takes it
    nodes = _pair_of_nodes(shapes, [[530, MILLI], [MILLI, MILLI]], [12_000, 12_000])
    for pod in (_request(4000), _request(4000, 1, MILLI)):
        got = score_nodes(Policy.KUBEGPU_PLAN, nodes, pod, shapes).score
        plain = score_nodes(Policy.KUBEGPU, nodes, pod, shapes).score
        assert got[0] == plain[0] - PLAN_RESERVE_PENALTY and got[1] == plain[1]
        assert int(np.argmax(got)) == 1
    # a 3-core pod leaves 9 cores, the 8.48 kept among them: node 0 is as kubegpu scores it
    assert (
        score_nodes(Policy.KUBEGPU_PLAN, nodes, _request(3000), shapes).score[0]
        == (score_nodes(Policy.KUBEGPU, nodes, _request(3000), shapes).score[0])
    )
    # an 8-core 470 that fills the room frees the cores kept for it; opening node 1's GPU would
    # leave a room of its own, 8.48 cores that node 1 no longer has after the share's 8
    got = score_nodes(Policy.KUBEGPU_PLAN, nodes, _request(8000, 1, 470), shapes)
    assert int(got.gpu[0]) == 0 and got.score[0] > -PLAN_RESERVE_PENALTY / 2
    assert got.score[1] < -PLAN_RESERVE_PENALTY / 2 and int(np.argmax(got.score)) == 0
    # where every node would have to give up kept cores, the pod is placed all the same
    full = _pair_of_nodes(shapes, [[530, 530], [530, MILLI]], [12_000, 12_000])
    got = score_nodes(Policy.KUBEGPU_PLAN, full, _request(4000), shapes).score
    assert np.isfinite(got).all() and (got < -PLAN_RESERVE_PENALTY / 2).all()


def test_the_partner_reserve_is_on_without_the_cpu_match_where_shares_carry_half_the_gpu_demand() -> None:
    shapes = _workload({(1, 810): 200, (1, 470): 200, (1, 1000): 200})  # shares: 256,000 of 456,000
    plan = value_plan_of(shapes)
    assert plan.reserve and not plan.cpu_match
    nodes = _pair_of_nodes(shapes, [[530, MILLI], [MILLI, MILLI]], [12_000, 12_000])
    for pod in (_request(4000), _request(4000, 1, MILLI), _request(4000, 1, 810)):
        got = score_nodes(Policy.KUBEGPU_PLAN, nodes, pod, shapes).score
        assert got[0] < -PLAN_RESERVE_PENALTY / 2 < got[1]
        assert int(np.argmax(got)) == 1


def test_the_partner_reserve_is_off_where_shares_carry_little_of_the_gpu_demand() -> None:
    shapes = _workload({(1, 810): 100, (1, 470): 100, (1, 1000): 300})  # shares: 128,000 of 428,000
    assert not value_plan_of(shapes).reserve
    nodes = _pair_of_nodes(shapes, [[530, MILLI], [MILLI, MILLI]], [12_000, 12_000])
    for pod in (_request(4000), _request(4000, 1, MILLI)):
        got = score_nodes(Policy.KUBEGPU_PLAN, nodes, pod, shapes).score
        assert got.tolist() == score_nodes(Policy.KUBEGPU, nodes, pod, shapes).score.tolist()


def test_the_cpu_match_is_on_only_where_shares_carry_most_of_the_gpu_demand() -> None:
    assert value_plan(_workload(SHARED)).cpu_match  # shares: 498,000 of 638,000 milli of demand
    assert not value_plan(_workload({(1, 810): 100, (1, 470): 100, (1, 1000): 300})).cpu_match
    assert not value_plan(_workload({(1, 1000): 300, (2, 1000): 10})).cpu_match  # no shares: flat


def test_the_cpu_match_is_highest_where_the_nodes_cores_per_idle_milli_equal_the_pods() -> None:
    # the pod's (3152 + 100) / 810 is 4.01 milli-cores per milli; a node with 5.3 cores free and
    # 1520 milli idle has (5304 + 1000) / (1520 + 100) = 3.89: within e^(1/3), all the steps
    assert cpu_match_step(5304, 1520, 3152, 810) == PLAN_CPU_MATCH_STEPS
    # 8 idle GPUs: the match peaks where the node's 32 cores give the pod's ratio, falls either side
    steps = [cpu_match_step(cores * 1000, 8000, 3152, 810) for cores in (4, 8, 16, 32, 64, 96)]
    assert steps[3] == PLAN_CPU_MATCH_STEPS
    assert steps[:4] == sorted(steps[:4]) and steps[3:] == sorted(steps[3:], reverse=True)
    assert steps[0] < steps[2] and steps[5] < steps[4]
    # a factor e^(k/3) apart in either direction costs k steps
    assert (
        cpu_match_step(0, 8000, 3152, 810)
        == cpu_match_steps(np.array([0]), np.array([8000]), 3152, 810).tolist()[0]
    )
    x = ((0 + 1000.0) / (8000 + 100.0)) / ((3152 + 100.0) / 810)
    assert cpu_match_step(0, 8000, 3152, 810) == PLAN_CPU_MATCH_STEPS - int(
        np.floor(PLAN_CPU_MATCH_SCALE * abs(np.log(x)))
    )


def _two_nodes(shapes: TypicalShapes, cpu: tuple[int, int]) -> NodeArrays:
    """Two empty 2-GPU nodes with ``cpu`` milli-cores each."""
    free = np.full((2, 2), MILLI, dtype=np.int64)
    cores = np.array(cpu, dtype=np.int64)
    return NodeArrays(
        cpu_left_milli=cores,
        memory_left_mib=np.array([1 << 20, 1 << 20], dtype=np.int64),
        gpu_free_milli=free,
        gpu_count=np.array([2, 2], dtype=np.int64),
        model_index=np.array([0, 0], dtype=np.int64),
        class_counts=np.zeros((2, N_CLASSES), dtype=np.int64),
        frag_milli=fragmentation(free, cores, np.array([0, 0]), shapes),
    )


def test_with_the_cpu_match_a_cpu_heavy_share_takes_the_cpu_rich_node_where_kubegpu_ties() -> None:
    shapes = _workload(SHARED)
    assert value_plan_of(shapes).cpu_match
    nodes = _two_nodes(shapes, (32_000, 64_000))  # 16 and 32 cores per GPU, both empty: one bucket
    ok = np.ones(MODELS, dtype=bool)
    heavy = PodRequest(cpu_milli=11_908, memory_mib=0, num_gpu=1, gpu_milli=470, model_ok=ok)
    # kubegpu scores both alike, so the node order would take the first ...
    kube = score_nodes(Policy.KUBEGPU, nodes, heavy, shapes).score
    assert kube[0] == kube[1]
    # ... the match sends 25 cores per GPU's worth to the node with 32 per GPU, not 16
    assert int(np.argmax(score_nodes(Policy.KUBEGPU_PLAN, nodes, heavy, shapes).score)) == 1


def test_the_plan_sums_itself_up_in_one_line_for_the_extenders_log() -> None:
    sharing = value_plan(_workload(SHARED))
    assert sharing.summary() == (
        f"pivot 810 milli placed on {sharing.pivot_placed:.0%} of its arrivals,"
        " CPU match on, partner reserve on"
    )
    half = value_plan(_workload({(1, 810): 200, (1, 470): 200, (1, 1000): 200}))
    assert half.summary().endswith("CPU match off, partner reserve on")
    whole = value_plan(_workload({(1, 810): 100, (1, 470): 100, (1, 1000): 300}))
    assert whole.summary().endswith("CPU match off, partner reserve off")
    assert value_plan(_workload({(1, 1000): 300})).summary() == "flat (no shares to place by value-to-go)"
