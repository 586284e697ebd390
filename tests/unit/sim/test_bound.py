"""The upper bound: exact pricing, never below what a real placement achieves, tight on small cases."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubegpu.errors import InputError
from kubegpu.sim.bound import (
    arrival_counts,
    best_configuration,
    bound_json,
    bound_problem,
    configuration_use,
    cpu_only_lower,
    seed_bound,
    solve_bound,
    with_bound_share,
)
from kubegpu.sim.replay import replay
from kubegpu.sim.scoring import Policy
from kubegpu.sim.workload import Workload, arrivals, prepare
from tests.unit.sim.conftest import NodeRow, PodRow, make_trace


def brute_force(sizes: list[int], profits: list[float], limits: list[int], capacity: int) -> float:
    best = 0.0
    for counts in itertools.product(*(range(limit + 1) for limit in limits)):
        if sum(c * s for c, s in zip(counts, sizes, strict=True)) <= capacity:
            best = max(best, sum(c * p for c, p in zip(counts, profits, strict=True)))
    return best


@settings(max_examples=150, deadline=None)
@given(
    items=st.lists(
        st.tuples(st.integers(1, 12), st.floats(-5, 20, allow_nan=False), st.integers(0, 4)),
        min_size=1,
        max_size=4,
    ),
    capacity=st.integers(1, 25),
)
def test_pricing_is_the_exact_bounded_knapsack(items: list[tuple[int, float, int]], capacity: int) -> None:
    sizes = [s for s, _, _ in items]
    profits = [p for _, p, _ in items]
    limits = [n for _, _, n in items]
    value, counts = best_configuration(
        np.array(sizes, dtype=np.int64), np.array(profits), np.array(limits, dtype=np.int64), capacity
    )
    assert value == pytest.approx(brute_force(sizes, profits, limits, capacity), abs=1e-6)
    # the returned configuration is feasible and worth what the DP says
    assert all(0 <= c <= n for c, n in zip(counts, limits, strict=True))
    assert int(counts @ np.array(sizes)) <= capacity
    assert float(counts @ np.array(profits)) == pytest.approx(value, abs=1e-6)


def workload_of(nodes: list[NodeRow], pods: list[PodRow]) -> Workload:
    return prepare(make_trace(nodes, pods))


def bound_all(workload: Workload, **kw: int) -> float:
    counts = np.bincount(workload.pod_shape, minlength=len(workload.shape_requests)).astype(np.int64)
    return solve_bound(bound_problem(workload, counts), **kw).bound_milli


def pod(i: int, milli: int, *, k: int = 1, cpu: int = 1000, spec: str = "") -> PodRow:
    return (f"p{i:03d}", cpu, 1024, k, milli, spec)


@pytest.mark.parametrize(
    ("nodes", "pods", "optimum"),
    [
        # one GPU: 600 + 400 fill it, the second 600 cannot join
        ([("a", 8000, 1 << 16, 1, "T4")], [pod(0, 600), pod(1, 600), pod(2, 400)], 1000),
        # one GPU, two 600s: only one fits
        ([("a", 8000, 1 << 16, 1, "T4")], [pod(0, 600), pod(1, 600)], 600),
        # counts respected: three whole GPUs arrived on an 8-GPU node
        ([("a", 64000, 1 << 16, 8, "G2")], [pod(i, 1000) for i in range(3)], 3000),
        # a 4-GPU pod cannot use 2-GPU nodes at all
        ([("a", 64000, 1 << 16, 2, "G2"), ("b", 64000, 1 << 16, 2, "G2")], [pod(0, 1000, k=4)], 0),
        # model pinned to a model the cluster lacks
        ([("a", 64000, 1 << 16, 2, "G2")], [pod(0, 1000, spec="T4")], 0),
        # CPU-only pods allocate nothing
        ([("a", 64000, 1 << 16, 2, "G2")], [pod(0, 0, k=0)], 0),
    ],
)
def test_bound_equals_the_known_optimum_of_tiny_cases(
    nodes: list[NodeRow], pods: list[PodRow], optimum: int
) -> None:
    assert bound_all(workload_of(nodes, pods)) == pytest.approx(optimum, abs=1e-6)


def test_configuration_use_says_how_the_lp_fills_each_gpu() -> None:
    # two GPUs; 600, 600, 400: one GPU takes 600 + 400, the other the second 600
    wl = workload_of([("a", 8000, 1 << 16, 2, "T4")], [pod(0, 600), pod(1, 600), pod(2, 400)])
    counts = np.bincount(wl.pod_shape, minlength=len(wl.shape_requests)).astype(np.int64)
    problem = bound_problem(wl, counts)
    pool: list[tuple[int, np.ndarray]] = []
    result = solve_bound(problem, pool=pool)
    assert result.bound_milli == pytest.approx(1600, abs=1e-6)
    use = {k: round(v, 6) for k, v in configuration_use(problem, pool, result).items() if v > 1e-9}
    assert use == {(600, 400): 1.0, (600,): 1.0}
    # one 600 alone on two GPUs: one GPU stays empty
    one = workload_of([("a", 8000, 1 << 16, 2, "T4")], [pod(0, 600)])
    problem = bound_problem(one, np.ones(1, dtype=np.int64))
    pool = []
    use = configuration_use(problem, pool, solve_bound(problem, pool=pool))
    assert {k: round(v, 6) for k, v in use.items() if v > 1e-9} == {(600,): 1.0, (): 1.0}


def test_cpu_and_memory_of_the_node_class_cap_the_bound() -> None:
    # two GPUs but 4 cores; whole-GPU pods of 3 cores: the LP may place 4/3 of them, never 2
    wl = workload_of([("a", 4000, 1 << 16, 2, "G2")], [pod(0, 1000, cpu=3000), pod(1, 1000, cpu=3000)])
    assert bound_all(wl) == pytest.approx(4000 / 3, rel=1e-6)


def test_the_node_level_bound_holds_each_node_to_its_own_cores() -> None:
    # two nodes of two GPUs and 10 cores; four 600-milli shares of 6 cores. The class has 20 cores,
    # so per GPU the LP places 20/6 of them; a node holds only one (two would need 12 cores)
    wl = workload_of(
        [("a", 10000, 1 << 16, 2, "G2"), ("b", 10000, 1 << 16, 2, "G2")],
        [pod(i, 600, cpu=6000) for i in range(4)],
    )
    assert bound_all(wl) == pytest.approx(600 * 20 / 6, rel=1e-6)
    counts = np.bincount(wl.pod_shape, minlength=len(wl.shape_requests)).astype(np.int64)
    node_level = solve_bound(bound_problem(wl, counts), cpu_step=0.25)
    assert node_level.converged
    assert node_level.bound_milli == pytest.approx(1200, abs=1e-6)


def test_cpu_only_pods_forced_in_take_their_cores_from_the_gpu_pods() -> None:
    # one node, two GPUs, 10 cores; two whole-GPU pods of 4 cores and a CPU-only pod of 6 cores.
    # The bound leaves the CPU-only pod out (2,000 milli); with it forced in, 4 cores are left: one
    # GPU pod (1,000 milli), per GPU and node-level alike
    wl = workload_of(
        [("a", 10000, 1 << 16, 2, "G2")],
        [pod(0, 1000, cpu=4000), pod(1, 1000, cpu=4000), ("cpu", 6000, 1024, 0, 0, "")],
    )
    counts = np.bincount(wl.pod_shape, minlength=len(wl.shape_requests)).astype(np.int64)
    problem = bound_problem(wl, counts)
    assert solve_bound(problem).bound_milli == pytest.approx(2000, abs=1e-6)
    forced = cpu_only_lower(problem, counts)
    assert forced.tolist() == [1]
    for step in (None, 0.25):
        result = solve_bound(problem, cpu_only_lower=forced, cpu_step=step)
        assert result.converged
        assert result.bound_milli == pytest.approx(1000, abs=1e-6)
    # one stopped after one round is still an upper bound
    assert solve_bound(problem, cpu_only_lower=forced, max_iterations=1).bound_milli >= 1000 - 1e-6
    with pytest.raises(InputError, match="CPU-only counts"):
        solve_bound(problem, cpu_only_lower=np.array([1, 1]))


def greedy(workload: Workload, seq: np.ndarray, placed: list[int] | None = None) -> int:
    """First fit in arrival order: a real placement, so a lower bound on the best one. ``placed``
    collects the shape id of every pod it places."""
    free = [[1000] * int(g) for g in workload.node_gpus]
    cpu = workload.node_cpu_milli.copy()
    mem = workload.node_memory_mib.copy()
    total = 0
    for p in seq:
        r = workload.shape_requests[int(workload.pod_shape[p])]
        for n in range(len(free)):
            if cpu[n] < r.cpu_milli or mem[n] < r.memory_mib:
                continue
            if r.num_gpu and not r.model_ok[workload.node_model[n]]:
                continue
            if r.num_gpu == 1 and r.gpu_milli < 1000:
                fit = [g for g, f in enumerate(free[n]) if f >= r.gpu_milli]
                if not fit:
                    continue
                free[n][fit[0]] -= r.gpu_milli
            elif r.num_gpu:
                whole = [g for g, f in enumerate(free[n]) if f == 1000]
                if len(whole) < r.num_gpu:
                    continue
                for g in whole[: r.num_gpu]:
                    free[n][g] = 0
            cpu[n] -= r.cpu_milli
            mem[n] -= r.memory_mib
            total += r.num_gpu * r.gpu_milli
            if placed is not None:
                placed.append(int(workload.pod_shape[p]))
            break
    return total


def random_workload(
    node_specs: list[tuple[int, int, str]], pod_specs: list[tuple[int, int, int, str]], order: object
) -> tuple[Workload, np.ndarray]:
    """Nodes (GPUs, cores, model) and pods (GPUs, milli, cores, spec) drawn by hypothesis, and an
    arrival order of the pods shuffled by ``order``."""
    nodes = [(f"n{i}", c * 1000, 1 << 16, g, m) for i, (g, c, m) in enumerate(node_specs)]
    pods = [
        (f"p{i:03d}", cpu * 1000, 2048, k, 0 if k == 0 else milli if k == 1 else 1000, spec if k else "")
        for i, (k, milli, cpu, spec) in enumerate(pod_specs)
    ]
    wl = workload_of(nodes, pods)
    seq = np.arange(len(pods))
    order.shuffle(seq)  # type: ignore[attr-defined]
    return wl, seq


@settings(max_examples=25, deadline=None)
@given(
    node_specs=st.lists(
        st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(4, 64), st.sampled_from(["G2", "T4"])),
        min_size=1,
        max_size=4,
    ),
    pod_specs=st.lists(
        st.tuples(
            st.sampled_from([0, 1, 1, 1, 2, 4]),
            st.sampled_from([100, 250, 300, 470, 500, 810, 1000]),
            st.integers(1, 16),
            st.sampled_from(["", "", "G2", "T4"]),
        ),
        min_size=1,
        max_size=25,
    ),
    order=st.randoms(use_true_random=False),
)
def test_bound_is_never_below_a_real_placement(
    node_specs: list[tuple[int, int, str]], pod_specs: list[tuple[int, int, int, str]], order: object
) -> None:
    wl, seq = random_workload(node_specs, pod_specs, order)
    value = bound_all(wl)
    assert value + 1e-6 >= greedy(wl, seq)
    assert value <= wl.total_gpu_milli + 1e-6
    assert value <= int(wl.shape_total_milli()[wl.pod_shape].sum()) + 1e-6
    # stopping after one round still gives a valid (larger or equal) bound
    assert bound_all(wl, max_iterations=1) + 1e-6 >= value
    # the node-level bound: never above the per-GPU one, never below a real placement
    counts = np.bincount(wl.pod_shape, minlength=len(wl.shape_requests)).astype(np.int64)
    node_level = solve_bound(bound_problem(wl, counts), cpu_step=0.5).bound_milli
    assert greedy(wl, seq) <= node_level + 1e-6
    assert node_level <= value + 1e-5 * wl.total_gpu_milli  # both within the solver's tolerance
    # given the CPU-only pods first fit placed, the bound still holds first fit, and is no looser
    placed: list[int] = []
    allocated = greedy(wl, seq, placed)
    forced = cpu_only_lower(bound_problem(wl, counts), np.bincount(placed, minlength=len(counts)))
    given_them = solve_bound(bound_problem(wl, counts), cpu_only_lower=forced).bound_milli
    assert allocated <= given_them + 1e-6
    assert given_them <= value + 1e-5 * wl.total_gpu_milli


def small_cluster() -> Workload:
    nodes = [(f"n{i}", 32000, 1 << 18, 8 if i % 3 else 2, "G2" if i % 2 else "T4") for i in range(8)]
    pods = (
        [
            (f"p{i:03d}", 2000 + 700 * (i % 5), 4096, 1, (250, 470, 810, 1000, 1000, 300)[i % 6], "")
            for i in range(40)
        ]
        + [(f"m{i}", 16000, 8192, 4, 1000, "") for i in range(3)]
        + [("cpu", 12000, 4096, 0, 0, "")]
    )
    return workload_of(nodes, pods)


def test_every_policy_stays_under_the_bound_of_its_own_arrivals() -> None:
    wl = small_cluster()
    for seed in (1, 2):
        result = seed_bound(wl, seed, inflate=1.3)
        assert result.converged
        assert sum(arrival_counts(wl, seed, 1.3)) == len(arrivals(wl, seed, 1.3))
        for policy in Policy:
            run = replay(wl, policy, seed, inflate=1.3)
            assert run.allocated_milli[-1] <= result.bound_milli + 1e-6, policy


def test_json_reports_per_seed_and_mean_and_shares_of_it() -> None:
    wl = small_cluster()
    results = [seed_bound(wl, s) for s in (1, 2)]
    doc = bound_json(results, seeds=(1, 2), inflate=1.3, workload=wl)
    per_seed = doc["bound"]["per_seed"]
    assert [row["seed"] for row in per_seed] == [1, 2]
    assert doc["bound"]["bound_pct_mean"] == pytest.approx(np.mean([r.bound_pct for r in results]), abs=1e-3)
    sim_doc = {"policies": {"fgd": {"allocated_pct_at_130": 45.0}, "x": {"allocated_pct_at_130": None}}}
    merged = with_bound_share(sim_doc, doc)
    mean = doc["bound"]["bound_pct_mean"]
    assert merged["policies"]["fgd"]["share_of_bound_pct_at_130"] == pytest.approx(100 * 45 / mean, abs=0.01)
    assert merged["policies"]["x"]["share_of_bound_pct_at_130"] is None
    assert merged["bound"] == doc["bound"]
