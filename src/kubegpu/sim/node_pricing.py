"""The most valuable content of one node at given item prices: the pricing step of the node-level bound.

``kubegpu.sim.bound`` prices one GPU at a time and holds a node class's CPU and memory to the class's
total, so its LP may put on a class more CPU-heavy configurations than any single node of it could
hold together. The node-level bound (``solve_bound(..., cpu_step=...)``) prices a whole node
instead: up to ``G`` GPUs, each holding a multiset of items whose milli add up to at most 1000, with
the cores of all of them within the node's. This module finds that best node exactly, for a
relaxation that keeps every real node feasible (so the bound stays an upper bound):

* cores are counted on a grid of ``step`` cores, each item's rounded **down** (a node whose real
  cores fit still fits: the rounded sum is at most the rounded capacity);
* each GPU holds at most ``limits[i]`` copies of item ``i``, but across the node's GPUs the copies
  are not capped (the LP's item rows cap them);
* memory is left to the class rows, as before.

The algorithm: a dynamic programme over (milli, cores) gives, for every core budget ``c``, the best
single GPU within ``c`` cores; the node is ``G`` of those, combined by a max-plus convolution over
the budgets; the traceback returns the item counts of the whole node.

Pure: numpy only.
"""

from __future__ import annotations

import numpy as np

from kubegpu.sim.scoring import MILLI, FloatArray, IntArray

__all__ = ["best_node"]

_EPS = 1e-9


def _gpu_tables(
    sizes: IntArray, cores: IntArray, profits: FloatArray, limits: IntArray, budget: int
) -> tuple[FloatArray, list[tuple[int, int, int, int, np.ndarray]]]:
    """``dp[w, c]``: the best profit of one GPU with at most ``w`` milli and ``c`` grid cores, and the
    steps that improved it (each item's copies split in powers of two) for the traceback."""
    dp: FloatArray = np.zeros((MILLI + 1, budget + 1))
    steps: list[tuple[int, int, int, int, np.ndarray]] = []
    for i in range(len(sizes)):
        size, core, profit = int(sizes[i]), int(cores[i]), float(profits[i])
        if profit <= _EPS or not 0 < size <= MILLI or limits[i] <= 0 or core > budget:
            continue
        left, chunk = int(limits[i]), 1
        while left > 0:
            m = min(chunk, left)
            left -= m
            chunk *= 2
            weight, cost = m * size, m * core
            if weight > MILLI or cost > budget:
                break
            candidate = dp[: MILLI + 1 - weight, : budget + 1 - cost] + m * profit
            better = candidate > dp[weight:, cost:]
            if better.any():
                dp[weight:, cost:] = np.where(better, candidate, dp[weight:, cost:])
                steps.append((i, m, weight, cost, better))
    return dp, steps


def _gpu_counts(n_items: int, steps: list[tuple[int, int, int, int, np.ndarray]], budget: int) -> IntArray:
    """The item counts of the best GPU within ``budget`` grid cores (the traceback of ``_gpu_tables``)."""
    counts: IntArray = np.zeros(n_items, dtype=np.int64)
    w, c = MILLI, budget
    for i, m, weight, cost, better in reversed(steps):
        if w >= weight and c >= cost and better[w - weight, c - cost]:
            counts[i] += m
            w -= weight
            c -= cost
    return counts


def best_node(
    sizes: IntArray,
    cpu: FloatArray,
    profits: FloatArray,
    limits: IntArray,
    *,
    gpus: int,
    node_cpu: float,
    step: float,
) -> tuple[float, IntArray]:
    """The best node of ``gpus`` GPUs and ``node_cpu`` cores: (total profit, item counts on the node).

    ``sizes`` (milli of one item, at most 1000), ``cpu`` (cores of one item) and ``profits`` are per
    item; an item of profit ``<= 0`` is never taken, the empty node (profit 0) always qualifies.
    Exact for the relaxation in the module docstring; ``step`` is the core grid (e.g. 0.25).
    """
    n_items = len(sizes)
    budget = int(np.floor(node_cpu / step + _EPS))
    cores = np.floor(np.asarray(cpu, dtype=np.float64) / step + _EPS).astype(np.int64)
    dp, steps = _gpu_tables(sizes, cores, profits, limits, budget)
    one = dp[MILLI]  # best single GPU within c grid cores, non-decreasing in c
    c_idx = np.arange(budget + 1)
    spent = c_idx[:, None] - c_idx[None, :]  # [total, first GPU's share] -> cores left for the rest
    node = one.copy()
    splits: list[IntArray] = []  # per added GPU: at each total, the cores the added GPU takes
    for _ in range(1, max(gpus, 1)):
        combined = np.where(spent >= 0, one[None, :] + node[np.maximum(spent, 0)], -np.inf)
        take = combined.argmax(axis=1)
        node = combined[c_idx, take]
        splits.append(take.astype(np.int64))
    counts: IntArray = np.zeros(n_items, dtype=np.int64)
    left = budget
    for take in reversed(splits):
        share = int(take[left])
        counts += _gpu_counts(n_items, steps, share)
        left -= share
    counts += _gpu_counts(n_items, steps, left)
    return float(node[budget]), counts
