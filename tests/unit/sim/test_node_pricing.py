"""The node-level pricing: the exact best node of the relaxation, checked against enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubegpu.sim.node_pricing import best_node


def brute_force(items: list[tuple[int, int, float, int]], gpus: int, budget: int) -> float:
    """Every GPU configuration (copies within limits, milli within 1000), every multiset of ``gpus``
    of them whose grid cores fit ``budget``."""
    configs = []
    for counts in itertools.product(*(range(limit + 1) for _, _, _, limit in items)):
        milli = sum(c * s for c, (s, _, _, _) in zip(counts, items, strict=True))
        if milli <= 1000:
            cores = sum(c * k for c, (_, k, _, _) in zip(counts, items, strict=True))
            profit = sum(c * p for c, (_, _, p, _) in zip(counts, items, strict=True) if p > 0)
            if all(c == 0 or p > 0 for c, (_, _, p, _) in zip(counts, items, strict=True)):
                configs.append((cores, profit))
    best = 0.0
    for chosen in itertools.combinations_with_replacement(configs, gpus):
        if sum(c for c, _ in chosen) <= budget:
            best = max(best, sum(p for _, p in chosen))
    return best


@settings(max_examples=60, deadline=None)
@given(
    items=st.lists(
        st.tuples(
            st.sampled_from([200, 300, 450, 600, 1000]),
            st.integers(0, 6),
            st.floats(-50, 900, allow_nan=False),
            st.integers(0, 2),
        ),
        min_size=1,
        max_size=3,
    ),
    gpus=st.integers(1, 3),
    budget=st.integers(0, 12),
)
def test_best_node_is_the_exact_optimum_of_the_relaxation(
    items: list[tuple[int, int, float, int]], gpus: int, budget: int
) -> None:
    step = 0.5
    sizes = np.array([s for s, _, _, _ in items], dtype=np.int64)
    cpu = np.array([k * step for _, k, _, _ in items])  # on the grid: rounding changes nothing
    profits = np.array([p for _, _, p, _ in items])
    limits = np.array([n for _, _, _, n in items], dtype=np.int64)
    value, counts = best_node(sizes, cpu, profits, limits, gpus=gpus, node_cpu=budget * step, step=step)
    assert value == pytest.approx(brute_force(items, gpus, budget), abs=1e-6)
    # the node it returns is worth what it says and fits the node's cores
    assert float(counts @ profits) == pytest.approx(value, abs=1e-6)
    assert float(counts @ cpu) <= budget * step + 1e-9
    assert int(counts @ sizes) <= gpus * 1000


def test_a_node_holds_no_more_cores_than_it_has() -> None:
    # two GPUs and 10 cores; a 600-milli share needs 6: one GPU only, though each would fit one
    value, counts = best_node(
        np.array([600]), np.array([6.0]), np.array([600.0]), np.array([1]), gpus=2, node_cpu=10.0, step=0.25
    )
    assert value == pytest.approx(600)
    assert counts.tolist() == [1]


def test_cores_are_rounded_down_so_every_real_node_still_fits() -> None:
    # 2 x 3.15 cores on a 6.3-core node fit exactly; on a 0.25 grid 3.15 -> 3.0 and 6.3 -> 6.25
    value, counts = best_node(
        np.array([810]), np.array([3.15]), np.array([810.0]), np.array([1]), gpus=2, node_cpu=6.3, step=0.25
    )
    assert value == pytest.approx(1620)
    assert counts.tolist() == [2]
