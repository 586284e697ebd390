"""A tighter upper bound for the policies issue 16 allows: every pod that fits is placed on arrival.

``kubegpu.sim.bound`` bounds what *any* placement of the arrivals allocates, including one that
leaves out any pod it likes. An online policy that must place every pod that fits somewhere when
it arrives (FGD, ``kubegpu`` and every policy of the simulator) has less freedom, and for one shape
the loss can be computed: the **pivot**, a common large share (on openb and its variants the
810-milli pods with 3.15 cores, whose 190 milli left over almost nothing fills).

With no departures a cluster only fills up, so once the pivot is refused (at arrival ``tau``) it is
refused for good, and so is every shape that *dominates* it (at least its milli on one GPU, its
CPU and its memory, models it allows only): wherever such a pod fits, the pivot fits too. Before
``tau`` every pivot that arrived was placed (``tau`` is its first refusal). So if ``j`` pivots
arrived before ``tau``, any such policy's final state places exactly ``j`` pivots and no more of
each dominating shape than arrived before ``tau``, besides everything ``kubegpu.sim.bound``
already requires. ``j`` depends on the policy, so the bound is the largest LP optimum over all
``j`` = 0 .. pivots arrived: the intervals of ``j`` are solved as one LP each (at least ``ja``
pivots, at most ``jb``, dominating shapes capped at their arrivals before the ``jb + 1``-th pivot,
which is valid for every ``j`` in the interval), and the interval with the highest value is split
in two until it is narrow or ``MAX_SPLITS`` splits are done (branch and bound; the intervals always
cover every ``j``, so the maximum over them is valid at every step).

Nothing in the argument needs the pivot to be a share: a 1-GPU whole-GPU shape is placed while an
untouched GPU is left on a node with its cores and memory, and the same rows hold for it
(``online_bound(..., whole_pivots=True)``).

The same argument also runs forwards: if at least ``ja`` pivots were placed, the pivot fitted at
its ``ja``-th arrival, and so at every arrival before it; each shape that fits wherever the pivot
fits (one GPU, at most its milli, CPU and memory, at least its models: ``fits_wherever``) and
arrived before then was placed. The interval's LP places at least those.

docs/sim.md, "The online bound", has the proof. Pure: numpy and highspy, no I/O.
"""

from __future__ import annotations

import heapq
import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kubegpu.errors import InputError
from kubegpu.sim.bound import BoundProblem, BoundResult, Column, bound_problem, cpu_only_lower, solve_bound
from kubegpu.sim.scoring import MILLI, IntArray, PodRequest
from kubegpu.sim.workload import Workload, arrivals

__all__ = [
    "OnlineBound",
    "box_lp",
    "box_search",
    "choose_pivot",
    "dominates",
    "fits_wherever",
    "joint_pivot_bound",
    "lp_at_bound",
    "online_bound",
    "pivot_bound",
    "pivot_interval_lp",
    "second_pivots",
    "with_online",
]

PIVOT_DEMAND = 0.05  # a pivot makes up at least this share of the arrived GPU demand
START_INTERVALS = 8
MAX_SPLITS = 24
NARROW = 1 / 200  # an interval of j this narrow (share of the pivots arrived) is not split
SECOND_PIVOT_DEMAND = 0.02  # a second pivot makes up at least this share of the arrived GPU demand
JOINT_START = 6  # intervals per pivot that the joint branch and bound starts from
JOINT_SPLITS = 200
THIRD_START = 3  # the same for three pivots at once (27 boxes to start, then up to 800 splits)
THIRD_SPLITS = 800
WIDE_START = 2  # the same for four or five pivots at once (16 or 32 boxes, then up to 1,600 splits)
WIDE_SPLITS = 1600
MAX_PIVOTS = 5


@dataclass(frozen=True, kw_only=True)
class OnlineBound:
    """The bound for one seed: GPU milli (and %), the pivot, and where the maximum lies."""

    bound_milli: float  # valid upper bound for every policy that places each pod that fits
    offline: BoundResult  # kubegpu.sim.bound's bound for the same arrivals (any policy)
    total_gpu_milli: int
    pivot: str  # the pivot's shape label ("" when there is none: the bound is the offline one)
    pivot_arrived: int
    placed_low: int  # the interval of pivots placed (j) where the maximum is
    placed_high: int
    solves: int
    seconds: float
    # ``online_bound(..., pivots=2 .. 5)``: the second (third, more) pivots of the lowest joint
    # bound ("" / () when none was tried or none came under the bound with fewer) and its box
    second_pivot: str = ""
    third_pivot: str = ""
    more_pivots: tuple[str, ...] = ()  # the fourth and fifth
    joint_placed: tuple[tuple[int, int], ...] = ()
    # the pivots' shape ids (``workload.shape_requests``), the first one first, then those of
    # ``joint_placed``'s box in its order; labels need not be unique, ids are
    pivot_shapes: tuple[int, ...] = ()

    @property
    def bound_pct(self) -> float:
        return 100.0 * self.bound_milli / self.total_gpu_milli if self.total_gpu_milli else 0.0

    @property
    def offline_milli(self) -> float:
        return self.offline.bound_milli

    @property
    def offline_pct(self) -> float:
        return self.offline.bound_pct


def dominates(pod: PodRequest, pivot: PodRequest) -> bool:
    """Whether ``pod`` fitting somewhere means ``pivot`` fits there too.

    It needs a GPU with at least the pivot's milli free, at least its CPU and memory, and runs only
    on models the pivot accepts.
    """
    return (
        pod.num_gpu > 0
        and pod.gpu_milli >= pivot.gpu_milli
        and pod.cpu_milli >= pivot.cpu_milli
        and pod.memory_mib >= pivot.memory_mib
        and not bool((pod.model_ok & ~pivot.model_ok).any())
    )


def fits_wherever(pod: PodRequest, pivot: PodRequest) -> bool:
    """Whether ``pod`` fits wherever ``pivot`` fits: one GPU with at most the pivot's milli, at most
    its CPU and memory, and every model the pivot accepts (``dominates`` the other way round).
    A policy that places each pod that fits places every such pod that arrives while the pivot
    still fits (``box_lp``'s lower rows)."""
    return pod.num_gpu == 1 and dominates(pivot, pod)


def choose_pivot(workload: Workload, counts: IntArray) -> int | None:
    """The pivot shape: of the 1-GPU shares with at least ``PIVOT_DEMAND`` of the arrived GPU demand,
    the largest (its leftover is the smallest), then the lightest in CPU and memory (the most shapes
    dominate it). ``None`` when no share is that common. Any choice gives a valid bound."""
    milli = workload.shape_total_milli()
    demand = float(counts @ milli)
    shared = [
        sid
        for sid, r in enumerate(workload.shape_requests)
        if r.shared and counts[sid] > 0 and counts[sid] * milli[sid] >= PIVOT_DEMAND * demand
    ]
    if not shared:
        return None
    reqs = workload.shape_requests
    return min(shared, key=lambda s: (-reqs[s].gpu_milli, reqs[s].cpu_milli, reqs[s].memory_mib, s))


def pivot_bound(
    workload: Workload,
    sequence: IntArray,
    pivot: int,
    *,
    problem: BoundProblem | None = None,
    pool: list[Column] | None = None,
    cpu_step: float | None = None,
    cpu_only_lower: IntArray | None = None,
) -> tuple[float, int, int, int]:
    """The branch and bound over ``j`` for one pivot and one arrival sequence (shape ids in order).

    Returns (bound milli, j low, j high of the best interval, LP solves). ``cpu_step``: each LP is
    the node-level one (``solve_bound``), and ``pool`` holds node columns. ``cpu_only_lower``: the
    CPU-only pods forced in (``solve_bound``; the bound then holds only given them).
    """
    reqs = workload.shape_requests
    counts = np.bincount(sequence, minlength=len(reqs)).astype(np.int64)
    if problem is None:
        problem = bound_problem(workload, counts)
    columns: list[Column] = [] if pool is None else pool
    items = problem.item_shape
    where = np.flatnonzero(items == pivot)
    if where.size == 0:  # the pivot never arrived
        whole = solve_bound(problem, pool=columns, cpu_step=cpu_step, cpu_only_lower=cpu_only_lower)
        return whole.bound_milli, 0, 0, 1
    n = int((sequence == pivot).sum())

    def solve(low: int, high: int) -> float:
        return pivot_interval_lp(
            workload,
            sequence,
            pivot,
            low,
            high,
            problem=problem,
            pool=columns,
            cpu_step=cpu_step,
            cpu_only_lower=cpu_only_lower,
        ).bound_milli

    # intervals [low, high] of j, inclusive, covering 0 .. n; split into disjoint halves
    edges = sorted({round((n + 1) * k / START_INTERVALS) for k in range(START_INTERVALS + 1)})
    heap: list[tuple[float, int, int]] = []
    solves = 0
    for start, stop in itertools.pairwise(edges):
        heapq.heappush(heap, (-solve(start, stop - 1), start, stop - 1))
        solves += 1
    narrow = int(n * NARROW)
    for _ in range(MAX_SPLITS):
        _, low, high = heap[0]
        if high - low <= narrow:
            break
        heapq.heappop(heap)
        mid = (low + high) // 2
        for a, b in ((low, mid), (mid + 1, high)):
            heapq.heappush(heap, (-solve(a, b), a, b))
            solves += 1
    value, low, high = heap[0]
    return -value, low, high, solves


def pivot_interval_lp(
    workload: Workload,
    sequence: IntArray,
    pivot: int,
    low: int,
    high: int,
    *,
    problem: BoundProblem,
    pool: list[Column],
    cpu_step: float | None = None,
    cpu_only_lower: IntArray | None = None,
) -> BoundResult:
    """The LP of one interval of ``j`` (between ``low`` and ``high`` pivots placed, the shapes that
    dominate the pivot capped at their arrivals before the ``high + 1``-th pivot, those that fit
    wherever it fits placed as often as they arrived before the ``low``-th one): ``pivot_bound``
    solves these, and ``configuration_use`` reads how the one at its maximum fills the GPUs."""
    return box_lp(
        workload,
        sequence,
        (pivot,),
        ((low, high),),
        problem=problem,
        pool=pool,
        cpu_step=cpu_step,
        cpu_only_lower=cpu_only_lower,
    )


def box_lp(
    workload: Workload,
    sequence: IntArray,
    pivots: Sequence[int],
    box: Sequence[tuple[int, int]],
    *,
    problem: BoundProblem,
    pool: list[Column],
    cpu_step: float | None = None,
    cpu_only_lower: IntArray | None = None,
) -> BoundResult:
    """``pivot_interval_lp`` for several pivots at once: pivot ``k`` placed between ``box[k]``'s
    ends, the shapes that dominate it capped at their arrivals before its ``high + 1``-th arrival,
    and the shapes that fit wherever it fits (``fits_wherever``) placed at least as often as they
    arrived before its ``low``-th arrival: the pivot fitted then, so it fitted at every earlier
    arrival (the cluster only fills), and so did they. Each pivot's argument holds on its own, so
    all of them hold together (``joint_pivot_bound``)."""
    reqs = workload.shape_requests
    items = problem.item_shape
    per_pod = np.array([reqs[s].num_gpu for s in items], dtype=np.int64)
    units = problem.item_units.copy()
    lower = np.zeros(len(items), dtype=np.int64)
    for pivot, (low, high) in zip(pivots, box, strict=True):
        ip = int(np.flatnonzero(items == pivot)[0])
        capped = np.array([dominates(reqs[s], reqs[pivot]) for s in items], dtype=bool)
        below = np.array([fits_wherever(reqs[s], reqs[pivot]) for s in items], dtype=bool)
        capped[ip] = below[ip] = False
        at = np.flatnonzero(sequence == pivot)  # arrival index of each pivot
        end = int(at[high]) if high < len(at) else len(sequence)  # arrivals before the (high + 1)-th
        before = np.bincount(sequence[:end], minlength=len(reqs)).astype(np.int64)
        units = np.where(capped, np.minimum(units, before[items] * per_pod), units)
        units[ip] = min(int(units[ip]), high)
        lower[ip] = max(int(lower[ip]), low)
        if low > 0:  # arrivals before the low-th pivot, which was placed
            early = np.bincount(sequence[: int(at[low - 1])], minlength=len(reqs)).astype(np.int64)
            lower = np.where(below, np.maximum(lower, early[items] * per_pod), lower)
    return solve_bound(
        problem, units=units, lower=lower, pool=pool, cpu_step=cpu_step, cpu_only_lower=cpu_only_lower
    )


def joint_pivot_bound(
    workload: Workload,
    sequence: IntArray,
    pivots: Sequence[int],
    *,
    problem: BoundProblem,
    pool: list[Column],
    cpu_step: float | None = None,
    cpu_only_lower: IntArray | None = None,
    start: int = JOINT_START,
    splits: int = JOINT_SPLITS,
) -> tuple[float, tuple[tuple[int, int], ...], int]:
    """The branch and bound of ``pivot_bound`` over several pivots' ``j`` at once: boxes of
    (``low``, ``high``) per pivot, each box's LP (``box_lp``) searched by ``box_search``.

    Returns (bound milli, the best box, LP solves)."""
    arrived = [int((sequence == p).sum()) for p in pivots]

    def solve(box: tuple[tuple[int, int], ...]) -> float:
        return box_lp(
            workload,
            sequence,
            pivots,
            box,
            problem=problem,
            pool=pool,
            cpu_step=cpu_step,
            cpu_only_lower=cpu_only_lower,
        ).bound_milli

    return box_search(arrived, solve, start=start, splits=splits)


def box_search(
    arrived: Sequence[int],
    solve: Callable[[tuple[tuple[int, int], ...]], float],
    *,
    start: int,
    splits: int,
) -> tuple[float, tuple[tuple[int, int], ...], int]:
    """The branch and bound of ``joint_pivot_bound``: ``solve(box)`` bounds every point of a box of
    (``low``, ``high``) per pivot (``arrived[k] + 1`` values each), and a sub-box never more than
    its box. ``start`` intervals per pivot to start, then the box with the highest value is split
    in two along the pivot whose interval is widest as a share of its arrivals, among those not yet
    narrow (wider than ``NARROW`` of its arrivals, and than one), until every interval of that box
    is narrow or ``splits`` splits are done. The boxes always cover every combination, so the
    highest of them is a valid bound at every step. A pivot with few arrivals is narrow at a width
    of one while its share of them is still the widest: it is skipped, not a reason to stop.

    Returns (the highest value, its box, solves)."""
    axes = []
    for n in arrived:
        edges = sorted({round((n + 1) * k / start) for k in range(start + 1)})
        axes.append([(a, b - 1) for a, b in itertools.pairwise(edges)])
    heap: list[tuple[float, tuple[tuple[int, int], ...]]] = []
    solves = 0
    for box in itertools.product(*axes):
        heapq.heappush(heap, (-solve(box), box))
        solves += 1
    for _ in range(splits):
        _, box = heap[0]
        widths = [
            (high - low) / max(n, 1) if high - low > max(1, int(n * NARROW)) else -1.0
            for (low, high), n in zip(box, arrived, strict=True)
        ]
        k = int(np.argmax(widths))
        if widths[k] < 0:
            break
        heapq.heappop(heap)
        low, high = box[k]
        mid = (low + high) // 2
        for part in ((low, mid), (mid + 1, high)):
            split = (*box[:k], part, *box[k + 1 :])
            heapq.heappush(heap, (-solve(split), split))
            solves += 1
    value, box = heap[0]
    return -value, box, solves


def second_pivots(workload: Workload, counts: IntArray, first: int, *, whole: bool = False) -> list[int]:
    """The shapes ``online_bound`` tries as a second pivot beside ``first``: the 1-GPU shares with
    at least ``SECOND_PIVOT_DEMAND`` of the arrived GPU demand, then (``whole``) the 1-GPU whole-GPU
    shapes with as much. A whole-GPU pivot is placed while some GPU is untouched on a node with its
    cores and memory, and forces in every smaller pod that arrived before (``fits_wherever``)."""
    milli = workload.shape_total_milli()
    demand = float(counts @ milli)
    common = [
        sid
        for sid, r in enumerate(workload.shape_requests)
        if sid != first and counts[sid] > 0 and counts[sid] * milli[sid] >= SECOND_PIVOT_DEMAND * demand
    ]
    reqs = workload.shape_requests
    shares = [sid for sid in common if reqs[sid].shared]
    wholes = [sid for sid in common if whole and reqs[sid].num_gpu == 1 and not reqs[sid].shared]
    return shares + wholes


def online_bound(
    workload: Workload,
    seed: int,
    *,
    inflate: float = 1.3,
    cpu_step: float | None = None,
    cpu_only_placed: IntArray | None = None,
    pivots: int = 1,
    whole_pivots: bool = False,
) -> OnlineBound:
    """The online bound for ``seed``'s arrivals (the ones ``replay`` places), with the offline bound;
    both node-level with ``cpu_step`` (``kubegpu.sim.bound.solve_bound``).

    ``cpu_only_placed`` (pods per shape id of ``workload``, e.g. what one replay placed) forces those
    CPU-only pods in: both bounds then hold for the placements that take at least them, not for
    every policy (``kubegpu.sim.bound.cpu_only_lower``).

    ``pivots`` 2 also tries each of ``second_pivots`` jointly with the pivot (``joint_pivot_bound``)
    and keeps the lowest bound: tighter where the pivot's LP leaves out a share that a policy has to
    place while it fits (the default trace's 470-milli pods), and a few LPs per candidate slower.
    ``pivots`` 3 then also tries the two candidates whose pairs came lowest together with the pivot
    (``THIRD_START`` and ``THIRD_SPLITS``; a minute or two more per seed on openb), 4 and 5 the
    three and four lowest (``WIDE_START`` and ``WIDE_SPLITS``). ``whole_pivots`` adds the common
    1-GPU whole-GPU shapes to the candidates (``second_pivots``): tighter where the LP refuses
    whole-GPU pods early that a policy must place while an untouched GPU is left (gpushare60 and
    gpushare80 on openb), one more joint LP search per such shape."""
    if not 1 <= pivots <= MAX_PIVOTS:
        raise InputError(f"online bound: pivots must be 1 to {MAX_PIVOTS}, not {pivots}")
    started = time.perf_counter()
    sequence = workload.pod_shape[arrivals(workload, seed, inflate)]
    counts = np.bincount(sequence, minlength=len(workload.shape_requests)).astype(np.int64)
    problem = bound_problem(workload, counts)
    forced = None if cpu_only_placed is None else cpu_only_lower(problem, cpu_only_placed)
    pool: list[Column] = []
    offline = solve_bound(
        problem,
        pool=pool,
        arrived_milli=int(counts @ workload.shape_total_milli()),
        cpu_step=cpu_step,
        cpu_only_lower=forced,
    )
    pivot = choose_pivot(workload, counts)
    if pivot is None:
        value, low, high, solves, label, arrived = offline.bound_milli, 0, 0, 0, "", 0
    else:
        value, low, high, solves = pivot_bound(
            workload, sequence, pivot, problem=problem, pool=pool, cpu_step=cpu_step, cpu_only_lower=forced
        )
        label, arrived = workload.shape_labels[pivot], int(counts[pivot])
    chosen: tuple[int, ...] = ()  # the other pivots of the lowest bound
    joint: tuple[tuple[int, int], ...] = ()
    pairs: list[tuple[float, int]] = []  # (joint bound, second pivot) per candidate
    if pivots >= 2 and pivot is not None:
        for other in second_pivots(workload, counts, pivot, whole=whole_pivots):
            both, box, more = joint_pivot_bound(
                workload,
                sequence,
                (pivot, other),
                problem=problem,
                pool=pool,
                cpu_step=cpu_step,
                cpu_only_lower=forced,
            )
            solves += more
            pairs.append((both, other))
            if both < value:
                value, chosen, joint = both, (other,), box
    ranked = [other for _, other in sorted(pairs)]
    for k in range(3, pivots + 1):
        if pivot is None or len(ranked) < k - 1:
            break
        start, splits = (THIRD_START, THIRD_SPLITS) if k == 3 else (WIDE_START, WIDE_SPLITS)
        together, box, more = joint_pivot_bound(
            workload,
            sequence,
            (pivot, *ranked[: k - 1]),
            problem=problem,
            pool=pool,
            cpu_step=cpu_step,
            cpu_only_lower=forced,
            start=start,
            splits=splits,
        )
        solves += more
        if together < value:
            value, chosen, joint = together, tuple(ranked[: k - 1]), box
    names = [workload.shape_labels[s] for s in chosen]
    return OnlineBound(
        bound_milli=min(value, offline.bound_milli),
        offline=offline,
        total_gpu_milli=workload.total_gpus * MILLI,
        pivot=label,
        pivot_arrived=arrived,
        placed_low=low,
        placed_high=high,
        solves=solves + 1,
        seconds=time.perf_counter() - started,
        second_pivot=names[0] if names else "",
        third_pivot=names[1] if len(names) > 1 else "",
        more_pivots=tuple(names[2:]),
        joint_placed=joint,
        pivot_shapes=() if pivot is None else (pivot, *chosen),
    )


def lp_at_bound(
    workload: Workload,
    seed: int,
    bound: OnlineBound,
    *,
    inflate: float = 1.3,
    pool: list[Column],
) -> tuple[BoundProblem, BoundResult]:
    """The LP where ``bound`` (``online_bound(workload, seed, ...)``, per GPU, no CPU-only pods
    forced in) has its value, solved again with ``pool`` filled: the offline LP when there is no
    pivot or the offline bound is the lower, else the pivot's interval LP (one pivot) or the joint
    box LP (two to five). ``configuration_use`` and ``placed_per_shape`` read what it places; its
    value is ``bound``'s (up to the column generation's tolerance)."""
    sequence = workload.pod_shape[arrivals(workload, seed, inflate)]
    counts = np.bincount(sequence, minlength=len(workload.shape_requests)).astype(np.int64)
    problem = bound_problem(workload, counts)
    if not bound.pivot_shapes or bound.offline_milli <= bound.bound_milli:
        return problem, solve_bound(problem, pool=pool)
    box = bound.joint_placed or ((bound.placed_low, bound.placed_high),)
    return problem, box_lp(workload, sequence, bound.pivot_shapes, box, problem=problem, pool=pool)


def with_online(document: dict[str, Any], results: Sequence[OnlineBound]) -> dict[str, Any]:
    """``kubegpu sim bound --json`` with the online bound added per seed and as a mean (no key renamed)."""
    bound = document["bound"]
    rows = [
        {
            **row,
            "online_bound_pct": round(r.bound_pct, 3),
            "pivot": r.pivot,
            "pivot_arrived": r.pivot_arrived,
            "pivot_placed": [r.placed_low, r.placed_high],
            "online_solves": r.solves,
            "online_seconds": round(r.seconds, 3),
            **(
                {"second_pivot": r.second_pivot, "joint_placed": [list(b) for b in r.joint_placed]}
                if r.second_pivot
                else {}
            ),
            **({"third_pivot": r.third_pivot} if r.third_pivot else {}),
            **({"more_pivots": list(r.more_pivots)} if r.more_pivots else {}),
        }
        for row, r in zip(bound["per_seed"], results, strict=True)
    ]
    pcts = [r.bound_pct for r in results]
    return {
        **document,
        "bound": {
            **bound,
            "per_seed": rows,
            "online_bound_pct_mean": round(statistics.fmean(pcts), 3),
            "online_bound_pct_std": round(statistics.pstdev(pcts), 3),
            "online_model": "the bound with the pivot share placed on arrival until its first refusal,"
            " every pod that fits wherever it fits placed before then and no dominating pod placed"
            " after it, maximised over that refusal"
            + (
                "; the lowest of it and the same with up to five pivots jointly, per seed"
                if any(r.more_pivots for r in results)
                else "; the lower of it and the same with a second (and third) pivot jointly, per seed"
                if any(r.third_pivot for r in results)
                else "; the lower of it and the same with a second pivot jointly, per seed"
                if any(r.second_pivot for r in results)
                else ""
            ),
        },
    }
