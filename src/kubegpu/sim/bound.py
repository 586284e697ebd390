"""An upper bound on the GPU capacity any placement policy can allocate for one arrival set.

Every final state of a replay, whatever the policy (online or offline), places a subset of the
arrived pods so that each GPU holds either shared pods whose ``gpu_milli`` add up to at most 1000 or
one GPU of one whole-GPU pod, and each node's pods fit its CPU and memory. The bound relaxes that
integer problem to a linear programme and reports its optimum (docs/sim.md, "The bound", has the
proof):

* **Node classes** ``t``: nodes with the same (GPU model, GPU count, CPU, memory); ``G_t`` GPUs,
  ``C_t`` cores and ``M_t`` GiB in total.
* **Items** ``i``: one per arrived GPU pod shape. A shared pod is one item of size ``gpu_milli``; a
  k-GPU pod is k items of size 1000, each carrying 1/k of its CPU and memory (the relaxation: the k
  GPUs need not be on one node). ``u_i`` = arrived pods x k. An item may use class ``t`` only if
  the pod could run on one of its nodes (model in ``gpu_spec``, at least k GPUs, CPU and memory of
  one node). CPU-only pods allocate no GPU and only consume resources, so they are left out.
* **Configurations** ``c``: a multiset of items for one GPU, sizes adding up to at most 1000.
* The LP: maximise the allocated milli ``sum val(c) x_tc`` subject to ``sum_c x_tc <= G_t`` per class,
  ``sum a_ic x_tc <= u_i`` per item, and the CPU and memory of the configurations on class ``t``
  within ``C_t`` and ``M_t``.

It is solved by column generation with HiGHS (``kubegpu.sim.lp``, through highspy); the pricing step is an
exact bounded knapsack over integer milli 0..1000. The reported value is always the *dual* bound
``sum_t G_t max(0, best_t) + sum_i u_i pi_i + sum_t (C_t mu_t + M_t nu_t)`` for the current duals
(``best_t``: the best configuration's value for class ``t`` at those prices), which is an upper bound
for any non-negative prices, so stopping early never gives an invalid bound; at convergence it equals
the LP optimum.

With ``cpu_step`` the columns are whole nodes instead (``kubegpu.sim.node_pricing``): each node holds
no more cores than it has, not only each class (``kubegpu sim bound --node-level``).

Pure: numpy and highspy, no I/O.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kubegpu.errors import InputError
from kubegpu.sim.lp import solve_min
from kubegpu.sim.node_pricing import best_node
from kubegpu.sim.scoring import MILLI, FloatArray, IntArray
from kubegpu.sim.workload import Workload, arrivals

__all__ = [
    "NODE_LEVEL_CPU_STEP",
    "BoundProblem",
    "BoundResult",
    "arrival_counts",
    "best_configuration",
    "bound_json",
    "bound_problem",
    "configuration_use",
    "cpu_only_lower",
    "knapsack_values",
    "placed_per_shape",
    "seed_bound",
    "solve_bound",
    "with_bound_share",
]

CORES = 1000.0  # CPU rows in cores (milli / 1000) and memory rows in GiB keep the LP well scaled
NODE_LEVEL_CPU_STEP = 0.25  # the node-level bound's core grid (``kubegpu sim bound --node-level``)
GIB = 1024.0
_EPS = 1e-9


@dataclass(frozen=True, kw_only=True, eq=False)
class BoundProblem:
    """The relaxation's data: item arrays (one row per arrived GPU pod shape) and node classes."""

    item_shape: IntArray  # shape id of each item
    item_size: IntArray  # milli of one item (gpu_milli for shared pods, 1000 for whole GPUs)
    item_units: IntArray  # u_i: arrived pods x GPUs per pod
    item_cpu: FloatArray  # cores per item (a k-GPU pod's CPU / k)
    item_memory: FloatArray  # GiB per item
    eligible: np.ndarray  # classes x items, bool: item i may use class t
    class_gpus: IntArray  # G_t
    class_cpu: FloatArray  # C_t (cores)
    class_memory: FloatArray  # M_t (GiB)
    class_nodes: IntArray  # nodes per class
    total_gpu_milli: int
    # CPU-only pod shapes (``solve_bound(..., cpu_only_lower=...)``): they allocate no GPU, so the
    # bound leaves them out unless some are forced in
    cpu_only_shape: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    cpu_only_cpu: FloatArray = field(default_factory=lambda: np.zeros(0))  # cores per pod
    cpu_only_memory: FloatArray = field(default_factory=lambda: np.zeros(0))  # GiB per pod
    # classes x CPU-only shapes, bool: the shape fits one node of the class
    cpu_only_eligible: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))


@dataclass(frozen=True, kw_only=True)
class BoundResult:
    """One solve: the bound (GPU milli and % of capacity), and how it was reached."""

    bound_milli: float  # the valid upper bound (dual bound)
    lp_milli: float  # the restricted master's value at the end (a lower bound on the LP optimum)
    total_gpu_milli: int
    arrived_milli: int  # GPU demand of the arrival set
    columns: int
    iterations: int
    converged: bool
    seconds: float
    # each item's price at the last master solve (its row's dual, less a lower bound's multiplier):
    # what placing one unit of it costs the rest of the plan; empty when nothing was solved
    prices: FloatArray = field(default_factory=lambda: np.zeros(0))
    # how many slots (GPUs, or nodes when node-level) each column of the pool fills in the last
    # master solve, in the pool's order (``configuration_use``); empty when nothing was solved
    column_use: FloatArray = field(default_factory=lambda: np.zeros(0))

    @property
    def bound_pct(self) -> float:
        return 100.0 * self.bound_milli / self.total_gpu_milli if self.total_gpu_milli else 0.0


def _knapsack(
    sizes: IntArray, profits: FloatArray, limits: IntArray, capacity: int
) -> tuple[FloatArray, list[tuple[int, int, int, np.ndarray]]]:
    """The bounded knapsack's table ``dp[w]`` (best profit with total size at most ``w``) and the
    steps that improved it, for ``best_configuration`` to trace back one optimum."""
    dp: FloatArray = np.zeros(capacity + 1)
    taken: list[tuple[int, int, int, np.ndarray]] = []
    useful = [
        i for i in range(len(sizes)) if profits[i] > _EPS and 0 < sizes[i] <= capacity and limits[i] > 0
    ]
    # Of several items of one size, an optimum uses the most profitable first; the others matter only
    # once those run out, so each size keeps only as many copies as fit in the capacity.
    useful.sort(key=lambda i: (int(sizes[i]), -float(profits[i])))
    room: dict[int, int] = {}
    for i in useful:
        size = int(sizes[i])
        profit = float(profits[i])
        left = min(int(limits[i]), room.setdefault(size, capacity // size))
        room[size] -= left
        chunk = 1
        while left > 0:
            m = min(chunk, left)
            left -= m
            chunk *= 2
            weight = m * size
            candidate = dp[: capacity + 1 - weight] + m * profit
            better = np.zeros(capacity + 1, dtype=bool)
            better[weight:] = candidate > dp[weight:]
            if better.any():
                dp[weight:] = np.where(better[weight:], candidate, dp[weight:])
                taken.append((i, m, weight, better))
    return dp, taken


def knapsack_values(
    sizes: IntArray, profits: FloatArray, limits: IntArray, capacity: int = MILLI
) -> FloatArray:
    """For every w = 0 .. ``capacity``, the best total profit of a multiset of items (counts ``<=
    limits``) with total size at most w (``kubegpu.sim.plan``'s value of free GPU milli)."""
    return _knapsack(sizes, profits, limits, capacity)[0]


def best_configuration(
    sizes: IntArray, profits: FloatArray, limits: IntArray, capacity: int = MILLI
) -> tuple[float, IntArray]:
    """Exact bounded knapsack: the multiset (counts ``<= limits``) of items with total size at most
    ``capacity`` and the largest total profit; returns (profit, counts). The empty set (0) counts.

    Dynamic programme over integer sizes 0..capacity with each item's copies split in powers of two.
    """
    counts: IntArray = np.zeros(len(sizes), dtype=np.int64)
    dp, taken = _knapsack(sizes, profits, limits, capacity)
    w = capacity
    for i, m, weight, better in reversed(taken):
        if better[w]:
            counts[i] += m
            w -= weight
    return float(dp[capacity]), counts


def arrival_counts(workload: Workload, seed: int, inflate: float) -> IntArray:
    """Arrived pods per shape for ``seed``: the replay's own arrival sequence (``arrivals``)."""
    seq = arrivals(workload, seed, inflate)
    out: IntArray = np.bincount(workload.pod_shape[seq], minlength=len(workload.shape_requests)).astype(
        np.int64
    )
    return out


def bound_problem(workload: Workload, counts: IntArray) -> BoundProblem:
    """The relaxation for ``counts`` arrived pods per shape of ``workload``."""
    if len(counts) != len(workload.shape_requests):
        raise InputError(f"bound: {len(counts)} shape counts for {len(workload.shape_requests)} shapes")
    keys: dict[tuple[int, int, int, int], int] = {}
    class_of = np.empty(len(workload.node_names), dtype=np.int64)
    for row in range(len(workload.node_names)):
        if workload.node_gpus[row] == 0:
            class_of[row] = -1
            continue
        key = (
            int(workload.node_model[row]),
            int(workload.node_gpus[row]),
            int(workload.node_cpu_milli[row]),
            int(workload.node_memory_mib[row]),
        )
        class_of[row] = keys.setdefault(key, len(keys))
    classes = list(keys)
    nodes = np.bincount(class_of[class_of >= 0], minlength=len(classes)).astype(np.int64)
    c_model = np.array([k[0] for k in classes], dtype=np.int64)
    c_gpus = np.array([k[1] for k in classes], dtype=np.int64)
    c_cpu = np.array([k[2] for k in classes], dtype=np.int64)
    c_mem = np.array([k[3] for k in classes], dtype=np.int64)
    shapes: list[int] = []
    cpu_only: list[int] = []
    for sid, request in enumerate(workload.shape_requests):
        if counts[sid] > 0:
            (shapes if request.num_gpu > 0 else cpu_only).append(sid)
    only = [workload.shape_requests[s] for s in cpu_only]
    only_ok = np.zeros((len(classes), len(only)), dtype=bool)
    for j, r in enumerate(only):
        only_ok[:, j] = r.model_ok[c_model] & (c_cpu >= r.cpu_milli) & (c_mem >= r.memory_mib)
    reqs = [workload.shape_requests[s] for s in shapes]
    k = np.array([r.num_gpu for r in reqs], dtype=np.int64)
    eligible = np.zeros((len(classes), len(shapes)), dtype=bool)
    for j, r in enumerate(reqs):
        eligible[:, j] = (
            r.model_ok[c_model] & (c_gpus >= r.num_gpu) & (c_cpu >= r.cpu_milli) & (c_mem >= r.memory_mib)
        )
    return BoundProblem(
        item_shape=np.array(shapes, dtype=np.int64),
        item_size=np.array([r.gpu_milli if r.num_gpu == 1 else MILLI for r in reqs], dtype=np.int64),
        item_units=np.array([int(counts[s]) for s in shapes], dtype=np.int64) * k,
        item_cpu=np.array([r.cpu_milli / r.num_gpu / CORES for r in reqs], dtype=np.float64),
        item_memory=np.array([r.memory_mib / r.num_gpu / GIB for r in reqs], dtype=np.float64),
        eligible=eligible,
        class_gpus=nodes * c_gpus,
        class_cpu=(nodes * c_cpu).astype(np.float64) / CORES,
        class_memory=(nodes * c_mem).astype(np.float64) / GIB,
        class_nodes=nodes,
        total_gpu_milli=workload.total_gpu_milli,
        cpu_only_shape=np.array(cpu_only, dtype=np.int64),
        cpu_only_cpu=np.array([r.cpu_milli / CORES for r in only], dtype=np.float64),
        cpu_only_memory=np.array([r.memory_mib / GIB for r in only], dtype=np.float64),
        cpu_only_eligible=only_ok,
    )


Column = tuple[int, IntArray]  # (node class, copies of each item on one GPU)
LOWER_PENALTY = 10.0 * MILLI  # milli of objective per unit a lower-bounded item falls short in the master


def configuration_use(
    problem: BoundProblem, pool: Sequence[Column], result: BoundResult
) -> dict[tuple[int, ...], float]:
    """The GPUs each configuration fills in ``result``'s LP (solved per GPU with ``pool``), over all
    node classes: a configuration is its items' milli, largest first (a whole GPU of a k-GPU pod
    is 1000); the GPUs the LP leaves empty are the key ``()``."""
    out: dict[tuple[int, ...], float] = {}
    for (_, counts), used in zip(pool, result.column_use, strict=True):
        if used <= _EPS:
            continue
        key = tuple(sorted(np.repeat(problem.item_size, counts).tolist(), reverse=True))
        out[key] = out.get(key, 0.0) + float(used)
    out[()] = out.get((), 0.0) + max(0.0, float(problem.class_gpus.sum()) - sum(out.values()))
    return out


def placed_per_shape(
    problem: BoundProblem, pool: Sequence[Column], result: BoundResult, num_gpu: IntArray
) -> dict[int, float]:
    """Pods of each shape id that ``result``'s LP (solved per GPU with ``pool``) places: its items'
    units over all columns, divided by the shape's GPUs per pod (``num_gpu``, per shape id)."""
    units = np.zeros(len(problem.item_shape))
    for (_, counts), used in zip(pool, result.column_use, strict=True):
        if used > _EPS:
            units += float(used) * np.asarray(counts, dtype=np.float64)
    out: dict[int, float] = {}
    for item, shape in enumerate(problem.item_shape.tolist()):
        out[shape] = out.get(shape, 0.0) + float(units[item]) / max(1, int(num_gpu[shape]))
    return out


def cpu_only_lower(problem: BoundProblem, placed: IntArray) -> IntArray:
    """``solve_bound``'s ``cpu_only_lower`` from pods per shape id (e.g. the CPU-only pods one replay
    placed: ``np.bincount(run.shape[run.placed], minlength=shapes)``)."""
    out: IntArray = np.asarray(placed, dtype=np.int64)[problem.cpu_only_shape]
    return out


def solve_bound(
    problem: BoundProblem,
    *,
    max_iterations: int = 500,
    tolerance: float = 1e-7,
    arrived_milli: int = 0,
    units: IntArray | None = None,
    lower: IntArray | None = None,
    pool: list[Column] | None = None,
    cpu_step: float | None = None,
    cpu_only_lower: IntArray | None = None,
) -> BoundResult:
    """Column generation for ``problem`` until no column prices out (or ``max_iterations``).

    ``tolerance`` is relative to the cluster's GPU milli: the loop stops once the dual bound is
    within it of the restricted master's value. The result's ``bound_milli`` is valid either way.

    ``units`` replaces ``problem.item_units`` (at most that many units of each item); ``lower`` asks
    at least that many units of an item to be placed (``kubegpu.sim.online_bound``: pods that every
    placement must have taken). A lower bound enters the master with a slack at ``LOWER_PENALTY``
    per unit, so the master is always feasible, and the dual bound with the row's multiplier
    ``sigma >= 0`` (``- sigma L`` in the bound, ``+ sigma`` in the item's price) stays valid for any
    multiplier. ``pool`` is a list of columns kept between calls on the same problem (read and
    extended): any configuration is a valid column, so later solves start from earlier ones.

    ``cpu_step`` (cores) solves the **node-level** bound instead: a column is a whole node's content
    (``kubegpu.sim.node_pricing.best_node``, its cores on that grid within the node's), a class row
    counts nodes, so no node holds more CPU than it has. It is at most the per-GPU bound and still an
    upper bound for every placement. A pool holds columns of one kind: per GPU or per node.

    ``cpu_only_lower`` (one count per ``problem.cpu_only_shape``) forces that many CPU-only pods of
    each shape in, on any class that can hold them, each taking its cores and memory from the
    class's rows: the bound **given** those pods, not one for every policy (``conditional_bound``).
    """
    started = time.perf_counter()
    n_items = len(problem.item_size)
    n_classes = len(problem.class_gpus)
    total = float(problem.total_gpu_milli)
    cap = problem.item_units if units is None else units
    need = np.zeros(n_items, dtype=np.int64) if lower is None else np.minimum(lower, cap)
    forced = (
        np.zeros(len(problem.cpu_only_shape), dtype=np.int64)
        if cpu_only_lower is None
        else np.asarray(cpu_only_lower, dtype=np.int64)
    )
    if len(forced) != len(problem.cpu_only_shape):
        raise InputError(
            f"bound: {len(forced)} CPU-only counts for {len(problem.cpu_only_shape)} CPU-only shapes"
        )
    # one column per (class, CPU-only shape) that the class can hold, for the shapes forced in
    pairs = [
        (int(cls_of), int(shape))
        for shape in np.flatnonzero(forced > 0)
        for cls_of in np.flatnonzero(problem.cpu_only_eligible[:, shape])
    ]
    forced_rows = np.flatnonzero(forced > 0)
    if n_items == 0 or n_classes == 0:
        return BoundResult(
            bound_milli=0.0,
            lp_milli=0.0,
            total_gpu_milli=problem.total_gpu_milli,
            arrived_milli=arrived_milli,
            columns=0,
            iterations=0,
            converged=True,
            seconds=time.perf_counter() - started,
        )
    columns: list[Column] = [] if pool is None else pool
    limits = np.minimum(cap, MILLI // np.maximum(problem.item_size, 1))
    size = problem.item_size.astype(np.float64)
    slots = problem.class_gpus if cpu_step is None else problem.class_nodes  # what a column fills
    node_gpus = problem.class_gpus // np.maximum(problem.class_nodes, 1)
    node_cpu = problem.class_cpu / np.maximum(problem.class_nodes, 1)

    def best_column(t: int, profits: FloatArray) -> tuple[float, IntArray]:
        if cpu_step is None:
            return best_configuration(problem.item_size, profits, limits)
        return best_node(
            problem.item_size,
            problem.item_cpu,
            profits,
            limits,
            gpus=int(node_gpus[t]),
            node_cpu=float(node_cpu[t]),
            step=cpu_step,
        )

    if not columns and cpu_step is not None:
        for t in range(n_classes):  # start: each class's fullest node at zero prices
            _, counts = best_column(t, np.where(problem.eligible[t], size, 0.0))
            if counts.any():
                columns.append((t, counts))
    if not columns:
        for t in range(n_classes):  # start: one item kind per GPU, as many as fit
            for i in np.flatnonzero(problem.eligible[t]):
                counts = np.zeros(n_items, dtype=np.int64)
                counts[i] = max(1, limits[i])
                columns.append((t, counts))
        for t in range(n_classes):  # and each class's fullest configuration at zero prices
            _, counts = best_configuration(
                problem.item_size, np.where(problem.eligible[t], size, 0.0), limits
            )
            if counts.any():
                columns.append((t, counts))
    if not any(c.any() for _, c in columns):  # no arrived GPU pod fits any node: nothing can be allocated
        return BoundResult(
            bound_milli=0.0,
            lp_milli=0.0,
            total_gpu_milli=problem.total_gpu_milli,
            arrived_milli=arrived_milli,
            columns=0,
            iterations=0,
            converged=True,
            seconds=time.perf_counter() - started,
        )
    best_bound = np.inf
    lp_value = 0.0
    use: FloatArray = np.zeros(0)
    converged = False
    iterations = 0
    low = np.flatnonzero(need > 0)
    first_forced = n_classes + n_items + 2 * n_classes + len(low)  # the CPU-only rows come last
    rows = first_forced + len(forced_rows)
    rhs = np.concatenate(
        [
            slots.astype(np.float64),
            cap.astype(np.float64),
            problem.class_cpu,
            problem.class_memory,
            -need[low].astype(np.float64),
            -forced[forced_rows].astype(np.float64),
        ]
    )
    # the CPU-only columns: fixed, one per pair; and a slack per lower row (the master stays feasible)
    row_of = {int(s): k for k, s in enumerate(forced_rows)}
    only = np.zeros((rows, len(pairs)))
    for col, (cls_of, shape) in enumerate(pairs):
        only[n_classes + n_items + cls_of, col] = problem.cpu_only_cpu[shape]
        only[2 * n_classes + n_items + cls_of, col] = problem.cpu_only_memory[shape]
        only[first_forced + row_of[shape], col] = -1.0
    n_slack = len(low) + len(forced_rows)
    slack = np.zeros((rows, n_slack))
    slack[n_classes + n_items + 2 * n_classes + np.arange(n_slack), np.arange(n_slack)] = -1.0
    for iterations in range(1, max_iterations + 1):  # noqa: B007 - reported after the loop
        a = np.array([c for _, c in columns], dtype=np.float64).T  # items x columns
        cls = np.array([t for t, _ in columns], dtype=np.int64)
        matrix = np.zeros((rows, a.shape[1]))
        matrix[cls, np.arange(a.shape[1])] = 1.0
        matrix[n_classes : n_classes + n_items] = a
        matrix[n_classes + n_items + cls, np.arange(a.shape[1])] = problem.item_cpu @ a
        matrix[2 * n_classes + n_items + cls, np.arange(a.shape[1])] = problem.item_memory @ a
        matrix[3 * n_classes + n_items : first_forced] = -a[low]
        value = size @ a
        objective = np.concatenate([-value, np.zeros(len(pairs)), np.full(n_slack, LOWER_PENALTY)])
        # the master is always feasible (x = 0) and bounded; solve_min raises unless it is optimal
        result = solve_min(objective, np.hstack([matrix, only, slack]), rhs)
        lp_value = float(-result.fun)
        use = result.x[: a.shape[1]]
        duals = np.maximum(0.0, -result.row_duals)
        pi = duals[n_classes : n_classes + n_items]
        mu = duals[n_classes + n_items : 2 * n_classes + n_items]
        nu = duals[2 * n_classes + n_items : 3 * n_classes + n_items]
        sigma = np.zeros(n_items)
        sigma[low] = duals[3 * n_classes + n_items : first_forced]
        # a forced CPU-only pod's multiplier, at most what its cheapest class charges for its cores
        # and memory: then the dual bound stays valid for the CPU-only columns too
        rho = np.zeros(len(forced))
        for shape, row in row_of.items():
            charge = (mu * problem.cpu_only_cpu[shape] + nu * problem.cpu_only_memory[shape])[
                problem.cpu_only_eligible[:, shape]
            ]
            rho[shape] = min(float(duals[first_forced + row]), float(charge.min()) if charge.size else 0.0)
        lam = duals[:n_classes]
        bound = float(
            pi @ cap + mu @ problem.class_cpu + nu @ problem.class_memory - sigma @ need - rho @ forced
        )
        added = 0
        for t in range(n_classes):
            profits = size - pi + sigma - problem.item_cpu * mu[t] - problem.item_memory * nu[t]
            profits[~problem.eligible[t]] = 0.0
            best, counts = best_column(t, profits)
            bound += float(slots[t]) * max(0.0, best)
            if best - lam[t] > tolerance * MILLI and counts.any():
                columns.append((t, counts))
                added += 1
        best_bound = min(best_bound, bound)
        if added == 0 or best_bound - lp_value <= tolerance * total:
            converged = True
            break
    return BoundResult(
        bound_milli=max(lp_value, best_bound),  # equal up to solver noise at convergence
        lp_milli=lp_value,
        total_gpu_milli=problem.total_gpu_milli,
        arrived_milli=arrived_milli,
        columns=len(columns),
        iterations=iterations,
        converged=converged,
        seconds=time.perf_counter() - started,
        prices=pi - sigma,
        column_use=np.concatenate([use, np.zeros(len(columns) - len(use))]),
    )


def seed_bound(
    workload: Workload,
    seed: int,
    *,
    inflate: float = 1.3,
    max_iterations: int = 500,
    cpu_step: float | None = None,
) -> BoundResult:
    """The bound for ``seed``'s arrival set (the same one ``replay`` places); node-level with
    ``cpu_step`` (``solve_bound``)."""
    counts = arrival_counts(workload, seed, inflate)
    arrived = int(counts @ workload.shape_total_milli())
    return solve_bound(
        bound_problem(workload, counts),
        max_iterations=max_iterations,
        arrived_milli=arrived,
        cpu_step=cpu_step,
    )


def bound_json(
    results: Sequence[BoundResult],
    *,
    seeds: tuple[int, ...],
    inflate: float,
    workload: Workload,
    cpu_step: float | None = None,
) -> dict[str, Any]:
    """The ``kubegpu sim bound --json`` document (docs/sim.md); ``cpu_step``: the node-level bound's."""
    pcts = [r.bound_pct for r in results]
    return {
        "bound": {
            "per_seed": [
                {
                    "seed": seed,
                    "bound_pct": round(r.bound_pct, 3),
                    "lp_pct": round(100 * r.lp_milli / r.total_gpu_milli, 3),
                    "arrived_pct": round(100 * r.arrived_milli / r.total_gpu_milli, 3),
                    "columns": r.columns,
                    "iterations": r.iterations,
                    "converged": r.converged,
                    "seconds": round(r.seconds, 3),
                }
                for seed, r in zip(seeds, results, strict=True)
            ],
            "bound_pct_mean": round(statistics.fmean(pcts), 3),
            "bound_pct_std": round(statistics.pstdev(pcts), 3),
            "model": "per-GPU configurations per node class, CPU and memory per node class"
            if cpu_step is None
            else f"whole nodes: per-GPU configurations within each node's cores (on a {cpu_step:g}-core"
            " grid), CPU and memory per node class",
            "node_level_cpu_step": cpu_step,
        },
        "seeds": list(seeds),
        "inflate": inflate,
        "total_gpus": workload.total_gpus,
        "nodes": len(workload.node_names),
        "pods": len(workload.pod_names),
    }


def with_bound_share(document: dict[str, Any], bound_doc: dict[str, Any]) -> dict[str, Any]:
    """``kubegpu sim --json`` with the bound added: a ``bound`` key (as ``kubegpu sim bound``'s) and
    per policy ``share_of_bound_pct_at_130`` (allocation at 130 % as % of the mean bound)."""
    bound = bound_doc["bound"]
    mean = float(bound["bound_pct_mean"])
    policies = {}
    for name, entry in document["policies"].items():
        a130 = entry.get("allocated_pct_at_130")
        share = None if a130 is None or mean <= 0 else round(100.0 * float(a130) / mean, 2)
        policies[name] = {**entry, "share_of_bound_pct_at_130": share}
    return {**document, "policies": policies, "bound": bound}
