"""The value of a GPU's free milli to the shares still to come, from a plan of the whole workload.

The ``kubegpu-plan`` policy (``scoring.score_kubegpu_plan``) places each share where it costs the
rest of the workload least. What a GPU's free milli is worth depends on which shares can still use
it: 190 milli left beside an 810-milli pod is worth almost nothing when 160-milli pods are rare,
530 milli beside a 470-milli pod is worth a second 470. This module prices that from a plan:

1. **The plan** is the online bound's LP (``kubegpu.sim.online_bound``) for the target workload's
   shapes at the replay's 130 % of capacity, scale-free: one class of ``PLAN_GPUS`` identical GPUs,
   each typical GPU shape's expected arrivals in proportion to its count in the trace (FGD's own
   knowledge), CPU, memory and GPU models left out. The pivot share (the largest share with at
   least 5 % of the GPU demand) is placed on arrival until its first refusal; the plan takes the
   best share of the pivots placed over a grid (``PLAN_GRID``), the pods that dominate it capped at
   the same share of their arrivals.
2. **Prices**: the LP's dual price ``p_i`` of each shape, what one more of it costs the plan.
3. **Value-to-go** ``U(f)``: the best total ``gpu_milli - p_i`` over the shares that fit in ``f``
   free milli (a knapsack over the shares, each as often as it fits), for f = 0 .. 1000.

4. **Node value** ``V(F, C)`` of a node with free milli ``F = (f_1 .. f_G)`` on its GPUs and ``C`` free
   cores: the GPUs' value-to-go, held to what the node's cores can feed. With ``U_l(f)`` the same
   knapsack at profits ``gpu_milli - p_i - l * cores_i`` (a price of ``l`` milli per core),
   ``V(F, C) = min over l in PLAN_CPU_PRICES of (sum_g U_l(f_g) + l * C)``: the Lagrangian bound on
   the best the node's shares could still bring within its cores. Where the cores are plenty the
   minimum is at ``l = 0`` and ``V`` is the GPUs' own ``sum_g U(f_g)``; on a node whose cores would
   run out first, a share that takes cores costs the value of the GPUs they would have fed.
   ``V`` is kept in integers (``PLAN_VALUE_UNIT`` per milli) so that every engine computes the
   same number exactly, in any order of summing.

A share of ``m`` milli and ``c`` cores on GPU ``g`` of a node loses ``V(F, C) - V(F - m e_g, C - c)``
of value-to-go; the policy buckets that loss by ``PLAN_BUCKET_MILLI`` (``ValuePlan.buckets``) and
ranks nodes by the bucket first, kubegpu's score second (docs/sim.md, "kubegpu-plan").

**CPU match** (``ValuePlan.cpu_match``): where shares carry at least ``PLAN_CPU_MATCH_SHARED`` of the GPU
demand, the nodes' cores run out before their GPUs (docs/research/placement-issue-30.md, "Where the rest of
the gap is"); there, inside a bucket, a share first goes where the node's free cores per idle milli come
closest to its own (``cpu_match_steps``): CPU-light shares to CPU-poor nodes, CPU-heavy ones to CPU-rich
nodes, so that each node's cores last about as long as its GPUs.

**Partner reserve** (``ValuePlan.reserve``, ``reserve_slack``): where shares carry at least
``PLAN_RESERVE_SHARED`` of the GPU demand (with or without the CPU match), a GPU in use that still has room
for a share (``PLAN_RESERVE_ROOM`` milli or more free) keeps ``PLAN_RESERVE_CORES`` cores per 1000 free
milli on its node for the share that will fill it. Every pod, of any kind, goes first to the nodes where it
leaves those cores alone (a share that fills a room frees the room's cores, one that opens a GPU adds a
room); where no node can, it goes where it fits, as before: the reserve never refuses a pod. Aimed at
partners that find no cores left; measured, it places more pivots and whole-GPU pods rather than more
partners (docs/research/placement-issue-30.md, "A reserve of cores for the partners").  Pure: numpy; the LP
solver (highspy, through ``kubegpu.sim.bound``) is imported only when a plan is solved, so importing the
policies needs none.
"""

from __future__ import annotations

import bisect
import math
import time
import weakref
from dataclasses import dataclass, field

import numpy as np

from kubegpu.errors import InputError
from kubegpu.sim.scoring import MILLI, FloatArray, IntArray, TypicalShapes

__all__ = [
    "PLAN_BUCKET_MILLI",
    "PLAN_CPU_MATCH_SCALE",
    "PLAN_CPU_MATCH_SHARED",
    "PLAN_CPU_MATCH_STEPS",
    "PLAN_CPU_PRICES",
    "PLAN_GPUS",
    "PLAN_GRID",
    "PLAN_INFLATE",
    "PLAN_RESERVE_CORES",
    "PLAN_RESERVE_PENALTY",
    "PLAN_RESERVE_ROOM",
    "PLAN_VALUE_UNIT",
    "ValuePlan",
    "cpu_match_step",
    "cpu_match_steps",
    "reserve_slack",
    "room",
    "room_change",
    "room_change_of",
    "usable_milli",
    "value_plan",
    "value_plan_of",
]

PLAN_GPUS = 100_000  # GPUs of the scale-free plan: large enough that rounding the units is noise
PLAN_INFLATE = 1.3  # the plan's arrived GPU demand, as a multiple of the capacity (the replay's)
PLAN_GRID = 20  # the plan tries the pivot placed on 0, 1/20, ..., 20/20 of its arrivals
PLAN_BUCKET_MILLI = 50  # losses of value-to-go within one bucket count alike (kubegpu decides)
PLAN_PIVOT_DEMAND = 0.05  # a pivot makes up at least this share of the GPU demand
# prices of a core (milli of GPU) over which a node's value takes its minimum (module docstring, 4.);
# 300 is above any share's profit per core, so the last price leaves the node's cores alone
PLAN_CPU_PRICES: tuple[int, ...] = (0, 3, 6, 10, 16, 25, 40, 65, 100, 170, 300)
PLAN_VALUE_UNIT = 1000  # node values in 1/1000 milli: integers, the same in every engine
PLAN_CPU_MATCH_SHARED = 0.7  # the CPU match is on when shares carry at least this share of GPU demand
PLAN_CPU_MATCH_SCALE = 3.0  # match steps per unit of |ln(node's cores per idle milli / the pod's)|
PLAN_CPU_MATCH_STEPS = 500  # the match runs from this (equal ratios) down to 0 (e^(500/3) apart)
# the partner reserve (module docstring, "Partner reserve"), on where shares carry at least
# PLAN_RESERVE_SHARED of the GPU demand: each GPU in use with at least PLAN_RESERVE_ROOM milli free
# keeps PLAN_RESERVE_CORES milli-cores per free milli (16 cores per GPU's worth) on its node for the
# share that will fill it
PLAN_RESERVE_SHARED = 0.5
PLAN_RESERVE_ROOM = 200
PLAN_RESERVE_CORES = 16
PLAN_RESERVE_PENALTY = 1e11  # below every score a node that keeps its reserve can have
# the ratio gaps at which the match drops one step, computed once so that every engine (the
# vectorised scorer, the per-node scorer, the extender) compares against the same floats
_MATCH_EDGES: tuple[float, ...] = tuple(
    math.exp(k / PLAN_CPU_MATCH_SCALE) for k in range(1, PLAN_CPU_MATCH_STEPS + 1)
)
_MATCH_EDGE_ARRAY = np.array(_MATCH_EDGES)
_CPU_PRICE_ARRAY = np.array(PLAN_CPU_PRICES, dtype=np.int64)
_BUCKET_UNITS = PLAN_BUCKET_MILLI * PLAN_VALUE_UNIT


def _empty_table() -> IntArray:
    return np.zeros((len(PLAN_CPU_PRICES), MILLI + 1), dtype=np.int64)


@dataclass(frozen=True, kw_only=True, eq=False)
class ValuePlan:
    """``value[f]``: what ``f`` free milli on one GPU is worth to the shares to come (milli)."""

    value: FloatArray  # 1001 entries, non-decreasing, value[0] == 0
    # per price of PLAN_CPU_PRICES: U_l(f) for f = 0 .. 1000 in PLAN_VALUE_UNIT (module docstring, 4.)
    node_table: IntArray = field(default_factory=_empty_table)
    prices: dict[int, float] = field(default_factory=dict)  # share milli -> its lowest price
    pivot_milli: int = 0  # 0: no pivot (the plan is the offline LP)
    pivot_placed: float = 0.0  # share of the pivot's arrivals the plan places
    plan_pct: float = 0.0  # the plan's allocation, % of the capacity
    seconds: float = 0.0
    cpu_match: bool = False  # rank a bucket's nodes by cpu_match_steps first (module docstring, "CPU match")
    reserve: bool = False  # hold every pod to the partner reserve (module docstring, "Partner reserve")

    @property
    def flat(self) -> bool:
        """No free milli is worth anything: the plan cannot tell GPUs apart."""
        return not bool(self.value.any())

    def summary(self) -> str:
        """One line for an operator: the pivot and whether the CPU match and the partner reserve are on."""
        if self.flat:
            return "flat (no shares to place by value-to-go)"
        pivot = (
            f"pivot {self.pivot_milli} milli placed on {self.pivot_placed:.0%} of its arrivals"
            if self.pivot_milli
            else "no pivot"
        )
        on = {True: "on", False: "off"}
        return f"{pivot}, CPU match {on[self.cpu_match]}, partner reserve {on[self.reserve]}"

    def node_values(self, free_milli: IntArray, cpu_left_milli: IntArray) -> IntArray:
        """``V(F, C)`` per row (module docstring, 4.): rows of free milli per GPU, free milli-cores.
        A GPU over-committed by pods bound elsewhere (free milli below 0) counts as full (0 free)."""
        sums = self.node_table[:, usable_milli(free_milli)].sum(axis=2)  # prices x rows
        out: IntArray = (sums + _CPU_PRICE_ARRAY[:, None] * cpu_left_milli[None, :]).min(axis=0)
        return out

    def buckets(
        self, free_milli: IntArray, cpu_left_milli: IntArray, milli: int, cpu_milli: int
    ) -> FloatArray:
        """Per row and GPU: ``floor((V(after) - V(before)) / PLAN_BUCKET_MILLI)`` for a share of
        ``milli`` and ``cpu_milli`` on that GPU, ``-inf`` where the GPU has no room for it (a GPU with
        free milli below 0, over-committed by pods bound elsewhere, counts as full)."""
        table = self.node_table
        free_milli = usable_milli(free_milli)
        room = free_milli >= milli
        after = np.where(room, free_milli - milli, 0)
        held = table[:, free_milli]  # prices x rows x GPUs
        sums = held.sum(axis=2)
        prices = _CPU_PRICE_ARRAY[:, None]
        before = (sums + prices * cpu_left_milli[None, :]).min(axis=0)
        moved = sums[:, :, None] - held + table[:, after]
        cores = prices[:, :, None] * (cpu_left_milli - cpu_milli)[None, :, None]
        lost = (moved + cores).min(axis=0) - before[:, None]
        out: FloatArray = np.where(room, np.floor_divide(lost, _BUCKET_UNITS).astype(np.float64), -np.inf)
        return out


def usable_milli(free_milli: IntArray) -> IntArray:
    """Free milli as the value tables index it: 0 .. 1000. A GPU that pods bound by another scheduler
    over-commit shows less than 0 free; it is full (0), never an index from the end of a table."""
    out: IntArray = np.clip(free_milli, 0, MILLI)
    return out


def _ratio_gap(cpu_left_milli: float, idle_milli: float, cpu_milli: int, gpu_milli: int) -> float:
    """How far apart (a factor >= 1) the node's free cores per idle milli and the pod's are."""
    x = ((cpu_left_milli + 1000.0) / (idle_milli + 100.0)) / ((cpu_milli + 100.0) / gpu_milli)
    return x if x >= 1.0 else 1.0 / x


def cpu_match_step(cpu_left_milli: int, idle_milli: int, cpu_milli: int, gpu_milli: int) -> int:
    """``PLAN_CPU_MATCH_STEPS - floor(PLAN_CPU_MATCH_SCALE * |ln(gap)|)``, at least 0, for one node:
    the higher, the closer the node's (free cores + 1) per (idle milli + 100) is to the share's
    (cores + 0.1) per milli (the offsets keep empty and full nodes finite)."""
    gap = _ratio_gap(float(cpu_left_milli), float(idle_milli), cpu_milli, gpu_milli)
    return PLAN_CPU_MATCH_STEPS - bisect.bisect_right(_MATCH_EDGES, gap)


def cpu_match_steps(
    cpu_left_milli: IntArray, idle_milli: IntArray, cpu_milli: int, gpu_milli: int
) -> IntArray:
    """``cpu_match_step`` for every node (the same floats, so the same steps)."""
    x = ((cpu_left_milli.astype(np.float64) + 1000.0) / (idle_milli.astype(np.float64) + 100.0)) / (
        (cpu_milli + 100.0) / gpu_milli
    )
    gap = np.where(x >= 1.0, x, 1.0 / x)
    out: IntArray = PLAN_CPU_MATCH_STEPS - np.searchsorted(_MATCH_EDGE_ARRAY, gap, side="right").astype(
        np.int64
    )
    return out


def _rooms(free_milli: IntArray) -> IntArray:
    """The free milli of every GPU in use that a share can still fill (0 elsewhere)."""
    out: IntArray = np.where((free_milli < MILLI) & (free_milli >= PLAN_RESERVE_ROOM), free_milli, 0)
    return out


def reserve_slack(
    free_milli: IntArray, cpu_left_milli: IntArray, cpu_milli: int, room_change: IntArray
) -> IntArray:
    """Per row: the node's free milli-cores after a pod of ``cpu_milli`` less the partner reserve
    after it (module docstring, "Partner reserve"); ``room_change`` is how much the pod shrinks the
    rooms of its GPU (``room_change_of``; 0 for a pod that takes no room). Negative: the pod would take
    cores the reserve keeps."""
    reserve = PLAN_RESERVE_CORES * _rooms(free_milli).sum(axis=1)
    out: IntArray = cpu_left_milli - cpu_milli - reserve + PLAN_RESERVE_CORES * room_change
    return out


def room_change_of(free: IntArray, milli: int) -> IntArray:
    """How much a share of ``milli`` on GPUs with ``free`` milli free shrinks their rooms."""
    out: IntArray = _rooms(free) - _rooms(np.maximum(free - milli, 0))
    return out


def room(free: int) -> int:
    """``_rooms`` for one GPU (the per-node scorer's): its free milli if a share can still fill it."""
    return free if PLAN_RESERVE_ROOM <= free < MILLI else 0


def room_change(free: int, milli: int) -> int:
    """``room_change_of`` for one GPU (the per-node scorer's)."""
    return room(free) - room(max(free - milli, 0))


def _pivot(size: IntArray, demand: FloatArray, cpu: IntArray) -> int:
    """The largest share with at least ``PLAN_PIVOT_DEMAND`` of the demand, the lightest in CPU
    among equals; -1 if there is none."""
    total = float(demand.sum())
    shares = [i for i in range(len(size)) if size[i] < MILLI and demand[i] >= PLAN_PIVOT_DEMAND * total]
    if not shares:
        return -1
    return min(shares, key=lambda i: (-int(size[i]), int(cpu[i]), i))


def value_plan(shapes: TypicalShapes) -> ValuePlan:
    """Solve the plan for ``shapes`` (see the module docstring); a flat plan when there are no shares."""
    # the LP solver only here: importing the policies must not need it
    try:
        from kubegpu.sim.bound import BoundProblem, Column, knapsack_values, solve_bound  # the LP
    except ImportError as e:
        raise InputError(
            "the kubegpu-plan policy solves its plan with an LP solver that is not installed here:"
            " pip install highspy, or choose the kubegpu policy"
        ) from e

    started = time.perf_counter()
    gpu = np.flatnonzero(shapes.num_gpu > 0)
    num = shapes.num_gpu[gpu]
    size = np.where(num == 1, shapes.gpu_milli[gpu], MILLI).astype(np.int64)
    per_pod: FloatArray = num.astype(np.float64) * shapes.weight[gpu].astype(np.float64)
    demand: FloatArray = per_pod * size.astype(np.float64)
    shares = size < MILLI
    if not shares.any() or demand.sum() <= 0:
        return ValuePlan(value=np.zeros(MILLI + 1), seconds=time.perf_counter() - started)
    scale = PLAN_INFLATE * PLAN_GPUS * MILLI / float(demand.sum())
    units = np.rint(per_pod * scale).astype(np.int64)
    n = len(gpu)
    problem = BoundProblem(
        item_shape=gpu.astype(np.int64),
        item_size=size,
        item_units=units,
        item_cpu=np.zeros(n),
        item_memory=np.zeros(n),
        eligible=np.ones((1, n), dtype=bool),
        class_gpus=np.array([PLAN_GPUS], dtype=np.int64),
        class_cpu=np.array([1.0]),
        class_memory=np.array([1.0]),
        class_nodes=np.array([PLAN_GPUS], dtype=np.int64),
        total_gpu_milli=PLAN_GPUS * MILLI,
    )
    cpu = shapes.cpu_milli[gpu]
    pivot = _pivot(size, demand, cpu)
    pool: list[Column] = []
    if pivot < 0:
        result, placed = solve_bound(problem, pool=pool), 1.0
    else:
        ok = shapes.model_ok[gpu]
        dominating = (size >= size[pivot]) & (cpu >= cpu[pivot]) & ~(ok & ~ok[pivot]).any(axis=1)
        dominating[pivot] = False
        best = None
        for step in range(PLAN_GRID + 1):
            share = step / PLAN_GRID
            capped = units.copy()
            capped[dominating] = np.rint(units[dominating] * share).astype(np.int64)
            capped[pivot] = round(units[pivot] * share)
            lower = np.zeros(n, dtype=np.int64)
            lower[pivot] = capped[pivot]
            got = solve_bound(problem, units=capped, lower=lower, pool=pool)
            if best is None or got.lp_milli > best[0].lp_milli:
                best = (got, share)
        if best is None:  # pragma: no cover - the grid has PLAN_GRID + 1 points
            raise InputError("plan: no LP was solved")
        result, placed = best
    profit = np.where(shares, size - result.prices, 0.0)
    limits = np.where(shares, MILLI // np.maximum(size, 1), 0)
    value = knapsack_values(size, profit, limits)  # non-decreasing: the set for w fits in w + 1
    cores = shapes.cpu_milli[gpu].astype(np.float64) / MILLI
    node_table = np.array(
        [
            np.rint(knapsack_values(size, profit - price * cores, limits) * PLAN_VALUE_UNIT)
            for price in PLAN_CPU_PRICES
        ],
        dtype=np.int64,
    )
    prices: dict[int, float] = {}
    for i in np.flatnonzero(shares):
        milli = int(size[i])
        prices[milli] = min(prices.get(milli, np.inf), round(float(result.prices[i]), 3))
    return ValuePlan(
        value=value,
        node_table=node_table,
        cpu_match=bool(demand[shares].sum() >= PLAN_CPU_MATCH_SHARED * demand.sum()),
        reserve=bool(demand[shares].sum() >= PLAN_RESERVE_SHARED * demand.sum()),
        prices=dict(sorted(prices.items())),
        pivot_milli=int(size[pivot]) if pivot >= 0 else 0,
        pivot_placed=placed,
        plan_pct=100.0 * result.lp_milli / (PLAN_GPUS * MILLI),
        seconds=time.perf_counter() - started,
    )


def value_plan_of(shapes: TypicalShapes) -> ValuePlan:
    """``value_plan(shapes)``, solved once per ``TypicalShapes`` object and kept while it lives."""
    plan = _PLANS.get(shapes)
    if plan is None:
        plan = _PLANS[shapes] = value_plan(shapes)
    return plan


_PLANS: weakref.WeakKeyDictionary[TypicalShapes, ValuePlan] = weakref.WeakKeyDictionary()
