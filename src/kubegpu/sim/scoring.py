"""Placement scoring: how good each node is for one pod, vectorised over nodes with numpy.

This module is the part of the simulator a scheduler extender reuses unchanged: it depends on
numpy and the standard library only, takes plain arrays describing the candidate nodes
(``NodeArrays``) and one pod (``PodRequest``), and returns one score per node (``-inf`` where the
pod does not fit) and the GPU a shared pod would take. Higher scores win.

The baselines follow the FGD paper's simulator plugins exactly, integer truncations included
(they decide ties, and ties decide results): ``fgd`` (fragmentation gradient descent),
``bestfit``, ``dotprod`` (Tetris), ``packing``, ``clustering`` and ``random``. ``kubegpu`` is
kubegpu's own score, documented at ``score_kubegpu``: FGD's gradient plus a charge for CPU that
strands GPUs. Node order and tie-breaking are not part of any score (``kubegpu.sim.policy``).
"""

from __future__ import annotations

import weakref
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np
import numpy.typing as npt

__all__ = [
    "CLASS_SHARED",
    "KUBEGPU_CORES_PER_GPU",
    "KUBEGPU_CPU_HEAVY_FILL",
    "KUBEGPU_CPU_HEAVY_RATIO",
    "KUBEGPU_CPU_HEAVY_WEIGHT",
    "KUBEGPU_SPREAD_BONUS",
    "KUBEGPU_STRANDING_WEIGHT",
    "KUBEGPU_WASTEFUL_FILL",
    "KUBEGPU_WASTEFUL_WEIGHT",
    "MAX_SPEC_CPU_MILLI",
    "MAX_SPEC_GPU_MILLI",
    "MILLI",
    "N_CLASSES",
    "NodeArrays",
    "PodRequest",
    "Policy",
    "Scores",
    "TypicalShapes",
    "cpu_heavy",
    "cpu_stranded_gpus",
    "feasible",
    "fragmentation",
    "kubegpu_target",
    "name_tiebreak",
    "pod_class",
    "score_nodes",
    "typical_shapes",
    "wasteful_milli",
]

MILLI = 1000
# The artifact normalises by its largest node (128 cores, 8 GPUs) in DotProd, BestFit, Clustering.
MAX_SPEC_CPU_MILLI = 128_000
MAX_SPEC_GPU_MILLI = 8_000
CLASS_SHARED = 0  # pod class column for shared (fractional) pods; k-GPU pods use column k
N_CLASSES = 17

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


class Policy(StrEnum):
    """The placement policies the simulator knows."""

    RANDOM = "random"
    DOTPROD = "dotprod"
    CLUSTERING = "clustering"
    PACKING = "packing"
    BESTFIT = "bestfit"
    FGD = "fgd"
    KUBEGPU = "kubegpu"
    KUBEGPU_PLAN = "kubegpu-plan"


@dataclass(frozen=True, kw_only=True, eq=False)
class NodeArrays:
    """State of R candidate nodes, one row each.

    ``gpu_free_milli`` is R x G with G the widest node; columns past a node's ``gpu_count`` are 0.
    ``model_index`` indexes the model table the ``PodRequest.model_ok`` masks refer to.
    ``class_counts`` counts placed GPU pods per class (column 0 shared, k for k-GPU pods).
    ``frag_milli`` is each node's current fragmentation (``fragmentation``) for FGD-style scores.
    """

    cpu_left_milli: IntArray
    memory_left_mib: IntArray
    gpu_free_milli: IntArray
    gpu_count: IntArray
    model_index: IntArray
    class_counts: IntArray
    frag_milli: FloatArray

    def take(self, rows: IntArray) -> NodeArrays:
        return NodeArrays(
            cpu_left_milli=self.cpu_left_milli[rows],
            memory_left_mib=self.memory_left_mib[rows],
            gpu_free_milli=self.gpu_free_milli[rows],
            gpu_count=self.gpu_count[rows],
            model_index=self.model_index[rows],
            class_counts=self.class_counts[rows],
            frag_milli=self.frag_milli[rows],
        )


@dataclass(frozen=True, kw_only=True, eq=False)
class PodRequest:
    """One pod: CPU, memory, GPU count and per-GPU milli, and the GPU models it accepts."""

    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    model_ok: BoolArray  # indexed by NodeArrays.model_index

    @property
    def shared(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < MILLI


@dataclass(frozen=True, kw_only=True)
class Scores:
    """Per-node score (``-inf`` = does not fit) and the GPU chosen for a shared pod (else -1)."""

    score: FloatArray
    gpu: IntArray


@dataclass(frozen=True, kw_only=True, eq=False)
class TypicalShapes:
    """The target workload M of FGD: the popular pod shapes and their popularity (sums to 1).

    Only GPU shapes are stored; CPU-only shapes always count all idle GPU as fragmented, so they
    need no arrays (their weight is ``1 - popularity.sum()``).
    """

    cpu_milli: IntArray
    gpu_milli: IntArray
    num_gpu: IntArray
    model_ok: BoolArray  # shapes x models
    popularity: FloatArray
    weight: IntArray  # pods of each shape in the trace (popularity = weight / weight_total)
    weight_total: int
    unique_milli: IntArray
    milli_slot: IntArray  # index of each shape's gpu_milli in unique_milli
    count: int  # number of shapes including CPU-only ones
    coverage: float  # fraction of pods the shapes cover
    # the model table ``model_ok``'s columns refer to, where an engine must map node models onto it
    # (the extender: a node's ``nvidia.com/gpu.product``); empty: the columns are the caller's own
    models: tuple[str, ...] = ()


def name_tiebreak(names: Sequence[str]) -> FloatArray:
    """A stable number in [0, 1) per node name (CRC-32 / 2^32): the same on every run, host and replica.

    The key of the fixed node order ``Order.CRC`` (``kubegpu.sim.policy``), not part of any score.
    """
    out: FloatArray = np.array([zlib.crc32(name.encode()) / 2**32 for name in names], dtype=np.float64)
    return out


def pod_class(num_gpu: int, gpu_milli: int) -> int:
    """Class column for GpuClustering: 0 for shared pods, k for k whole GPUs, -1 for CPU-only."""
    if num_gpu == 0:
        return -1
    if num_gpu == 1 and gpu_milli < MILLI:
        return CLASS_SHARED
    return num_gpu


def typical_shapes(
    shapes: Sequence[tuple[int, int, int, BoolArray, object]],
    counts: Sequence[int],
    *,
    n_models: int,
    coverage: float = 0.95,
    models: tuple[str, ...] = (),
) -> TypicalShapes:
    """Pick the target workload: shapes ``(cpu, gpu_milli, num_gpu, model_ok, key)`` by count.

    Sorted by count, descending (ties: larger CPU, milli, GPU count, key first, as the artifact's
    reverse sort does), taken until the cumulative count reaches ``coverage`` of all pods (the
    shape that crosses the threshold is included), then renormalised to popularities summing to 1.
    """
    total = float(sum(counts))
    order = sorted(
        range(len(shapes)),
        key=lambda i: (counts[i], shapes[i][0], shapes[i][1], shapes[i][2], str(shapes[i][4])),
        reverse=True,
    )
    chosen: list[int] = []
    cum = 0.0
    for i in order:
        if cum >= coverage * total:
            break
        chosen.append(i)
        cum += counts[i]
    gpu = [i for i in chosen if shapes[i][2] > 0]
    cpu = np.array([shapes[i][0] for i in gpu], dtype=np.int64)
    milli = np.array([shapes[i][1] for i in gpu], dtype=np.int64)
    num = np.array([shapes[i][2] for i in gpu], dtype=np.int64)
    ok = (
        np.array([shapes[i][3] for i in gpu], dtype=bool).reshape(len(gpu), n_models)
        if gpu
        else np.zeros((0, n_models), dtype=bool)
    )
    pop = np.array([counts[i] / cum for i in gpu], dtype=np.float64)
    weight = np.array([int(counts[i]) for i in gpu], dtype=np.int64)
    unique = np.unique(milli)
    slot = np.searchsorted(unique, milli).astype(np.int64)
    return TypicalShapes(
        cpu_milli=cpu,
        gpu_milli=milli,
        num_gpu=num,
        model_ok=ok,
        popularity=pop,
        weight=weight,
        weight_total=int(cum),
        unique_milli=unique.astype(np.int64),
        milli_slot=slot,
        count=len(chosen),
        coverage=cum / total if total else 0.0,
        models=models,
    )


def fragmentation(
    gpu_free_milli: IntArray,
    cpu_left_milli: IntArray,
    model_index: IntArray,
    shapes: TypicalShapes,
) -> FloatArray:
    """FGD's expected fragmentation F_n(M) of each row, in milli-GPU.

    For each typical shape m: all idle GPU counts if m is CPU-only, its model is not allowed, or it
    does not fit (too few GPUs with enough room, or too little CPU); otherwise only the GPUs with less
    room than m's per-GPU milli count. Weighted by popularity. Memory is ignored (as in the paper).

    Computed in integers (pod counts instead of popularities) and divided once at the end, so a
    row's value does not depend on which other rows are computed with it (a scheduler scoring all
    nodes at once and the replay rescoring a few get the same bits, and equal states tie exactly).
    """
    idle = gpu_free_milli.sum(axis=1)
    if shapes.popularity.size == 0:
        out: FloatArray = idle.astype(np.float64)
        return out
    free = gpu_free_milli[:, None, :]
    ge = free >= shapes.unique_milli[None, :, None]
    room = (free * ge).sum(axis=2)[:, shapes.milli_slot]
    fits = ge.sum(axis=2)[:, shapes.milli_slot] >= shapes.num_gpu
    fits &= cpu_left_milli[:, None] >= shapes.cpu_milli
    fits &= shapes.model_ok[:, model_index].T
    kept = (fits * room) @ shapes.weight
    result: FloatArray = (idle * shapes.weight_total - kept) / shapes.weight_total
    return result


# -- helpers shared by the policies ----------------------------------------------------------


def feasible(
    nodes: NodeArrays, pod: PodRequest, summary: tuple[IntArray, IntArray] | None = None
) -> BoolArray:
    """Where the pod fits: CPU, memory, GPU model, and enough GPUs with enough free milli.

    ``summary`` (per row: the largest free milli of one GPU, the number of fully free GPUs), when
    the caller keeps it current, answers the 1-GPU and whole-GPU cases without the per-GPU scan.
    """
    ok: BoolArray = (nodes.cpu_left_milli >= pod.cpu_milli) & (nodes.memory_left_mib >= pod.memory_mib)
    k = pod.num_gpu
    if k > 0:
        ok &= pod.model_ok[nodes.model_index]
        if summary is not None and k == 1:
            ok &= summary[0] >= pod.gpu_milli
        elif summary is not None and pod.gpu_milli == MILLI:
            ok &= summary[1] >= k
        else:
            ok &= (nodes.gpu_free_milli >= pod.gpu_milli).sum(axis=1) >= k
    return ok


def best_fit_gpu(nodes: NodeArrays, pod: PodRequest) -> IntArray:
    """The artifact's default GPU choice for a shared pod: tightest fit, lowest index on ties."""
    if not pod.shared:
        return np.full(len(nodes.gpu_count), -1, dtype=np.int64)
    free = nodes.gpu_free_milli
    key = np.where(free >= pod.gpu_milli, free, MILLI + 1)
    gpu: IntArray = key.argmin(axis=1).astype(np.int64)
    return gpu


def take_whole(free: IntArray, count: int) -> IntArray:
    """``free`` after giving each row's ``count`` lowest-index fully free GPUs to a pod."""
    full = free == MILLI
    taken = full & (np.cumsum(full, axis=1) <= count)
    out: IntArray = np.where(taken, 0, free)
    return out


def _finish(ok: BoolArray, raw: FloatArray | IntArray, gpu: IntArray) -> Scores:
    score = np.where(ok, raw.astype(np.float64), -np.inf)
    return Scores(score=score, gpu=gpu)


# -- the artifact's baselines ----------------------------------------------------------------


def score_random(nodes: NodeArrays, pod: PodRequest, shapes: TypicalShapes) -> Scores:
    """Every feasible node scores 0; the replay picks one uniformly (and a random fitting GPU)."""
    del shapes
    ok = feasible(nodes, pod)
    return _finish(ok, np.zeros(len(ok)), np.full(len(ok), -1, dtype=np.int64))


def score_dotprod(nodes: NodeArrays, pod: PodRequest, shapes: TypicalShapes) -> Scores:
    """Tetris: 100 * (1 - <free, request> / 2) over [CPU, GPU] normalised by the largest node."""
    del shapes
    ok = feasible(nodes, pod)
    n0 = nodes.cpu_left_milli / float(MAX_SPEC_CPU_MILLI)
    n1 = nodes.gpu_free_milli.sum(axis=1) / float(MAX_SPEC_GPU_MILLI)
    p0 = pod.cpu_milli / float(MAX_SPEC_CPU_MILLI)
    p1 = (pod.gpu_milli * pod.num_gpu) / float(MAX_SPEC_GPU_MILLI)
    dot = (n0 * p0 + n1 * p1) / 2.0
    raw = np.trunc(100.0 * (1.0 - dot))
    return _finish(ok, raw, best_fit_gpu(nodes, pod))


def score_bestfit(nodes: NodeArrays, pod: PodRequest, shapes: TypicalShapes) -> Scores:
    """BestFit: 100 * (1 - [(free CPU - req) / 128 cores + (free GPU - req) / 8 GPUs] / 2).

    The artifact then min-max normalises the integer scores across nodes; that keeps exactly the
    same set of best nodes, so the raw integer score is returned.
    """
    del shapes
    ok = feasible(nodes, pod)
    cpu = (nodes.cpu_left_milli - pod.cpu_milli) / float(MAX_SPEC_CPU_MILLI) * 0.5
    gpu = (nodes.gpu_free_milli.sum(axis=1) - pod.gpu_milli * pod.num_gpu) / float(MAX_SPEC_GPU_MILLI) * 0.5
    raw = np.trunc((1.0 - (cpu + gpu)) * 100.0)
    return _finish(ok, raw, best_fit_gpu(nodes, pod))


def score_packing(nodes: NodeArrays, pod: PodRequest, shapes: TypicalShapes) -> Scores:
    """GpuPacking: shared GPUs first (50..100), then free GPUs of a used node (33..50), then empty nodes.

    CPU-only pods score 0 everywhere.
    """
    del shapes
    ok = feasible(nodes, pod)
    rows = len(ok)
    if pod.num_gpu == 0:
        return _finish(ok, np.zeros(rows), np.full(rows, -1, dtype=np.int64))
    free = nodes.gpu_free_milli
    fully_free = (free == MILLI).sum(axis=1)
    empty = fully_free == nodes.gpu_count
    case3 = np.maximum(33 - fully_free, fully_free)
    gpu = best_fit_gpu(nodes, pod)
    if pod.shared:
        chosen = free[np.arange(rows), np.maximum(gpu, 0)]
        uses_free = chosen == MILLI
        case1 = np.maximum(100 - (chosen * 100 // MILLI) // 10, 50)
        case2 = np.full(rows, 49)
        raw = np.where(empty, case3, np.where(uses_free, case2, case1))
    else:
        raw = np.where(empty, case3, max(50 - pod.num_gpu, 33))
    return _finish(ok, raw, gpu)


def score_clustering(nodes: NodeArrays, pod: PodRequest, shapes: TypicalShapes) -> Scores:
    """GpuClustering: bands by the classes of GPU pods already on the node, fuller nodes higher.

    Same class only: 75..100; mixed classes including it: 50..75; idle node: 25..50; only other
    classes: 0..25. CPU-only pods score 0 everywhere.
    """
    del shapes
    ok = feasible(nodes, pod)
    rows = len(ok)
    cls = pod_class(pod.num_gpu, pod.gpu_milli)
    if cls < 0:
        return _finish(ok, np.zeros(rows), np.full(rows, -1, dtype=np.int64))
    left = nodes.gpu_free_milli.sum(axis=1)
    base = 25 * (MAX_SPEC_GPU_MILLI - left) // MAX_SPEC_GPU_MILLI
    present = (nodes.class_counts > 0).sum(axis=1)
    mine = nodes.class_counts[:, cls] > 0
    band = np.where(mine, np.where(present == 1, 75, 50), np.where(present == 0, 25, 0))
    return _finish(ok, base + band, best_fit_gpu(nodes, pod))


def _fgd_after(
    nodes: NodeArrays,
    pod: PodRequest,
    ok: BoolArray,
    shapes: TypicalShapes,
    before: FloatArray | None = None,
    *,
    fresh_bonus: FloatArray | None = None,
) -> tuple[FloatArray, IntArray]:
    """Fragmentation decrease (before - after) per node and the GPU a shared pod would take.

    Shared pods are tried on every GPU with room (GPUs with equal free milli give the same state,
    so only the first of each is evaluated); the best decrease wins, the lowest index on ties.
    Whole-GPU and CPU-only pods have one after-state. ``before`` is each row's fragmentation under
    ``shapes`` (at least where ``ok``); ``None``: ``nodes.frag_milli``, the state's own.
    ``fresh_bonus`` (shared pods; one value per row) is added to the decrease on the row's fresh
    GPUs before the best GPU is chosen.
    """
    rows = len(ok)
    free = nodes.gpu_free_milli
    cpu_after = nodes.cpu_left_milli - pod.cpu_milli
    delta = np.full(rows, -np.inf)
    gpu = np.full(rows, -1, dtype=np.int64)
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return delta, gpu
    if before is None:
        before = nodes.frag_milli
    if not pod.shared:
        after = take_whole(free[idx], pod.num_gpu) if pod.num_gpu else free[idx]
        frag = fragmentation(after, cpu_after[idx], nodes.model_index[idx], shapes)
        delta[idx] = before[idx] - frag
        return delta, gpu
    table, table_int = _shared_tables(
        nodes, pod, idx, cpu_after, shapes, before=before, fresh_bonus=fresh_bonus
    )
    best = table_int.argmax(axis=1)
    delta[idx] = table[np.arange(len(idx)), best]
    gpu[idx] = best
    return delta, gpu


def _shared_tables(
    nodes: NodeArrays,
    pod: PodRequest,
    idx: IntArray,
    cpu_after: IntArray,
    shapes: TypicalShapes,
    *,
    before: FloatArray,
    fresh_bonus: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray]:
    free = nodes.gpu_free_milli
    sub = free[idx]
    width = sub.shape[1]
    earlier_same = (sub[:, :, None] == sub[:, None, :]) & np.tri(width, width, -1, dtype=bool)[None, :, :]
    cand = (sub >= pod.gpu_milli) & ~earlier_same.any(axis=2)
    rr, gg = np.nonzero(cand)
    after = sub[rr].copy()
    after[np.arange(len(rr)), gg] -= pod.gpu_milli
    node_rows = idx[rr]
    frag = fragmentation(after, cpu_after[node_rows], nodes.model_index[node_rows], shapes)
    table = np.full(sub.shape, -np.inf)
    table[rr, gg] = before[node_rows] - frag
    if fresh_bonus is not None:
        table = table + np.where(sub == MILLI, fresh_bonus[idx][:, None], 0.0)
    # the artifact compares integer scores per GPU, so equal integer scores go to the first GPU
    table_int = np.where(cand, np.floor(_sigmoid100(table)), -1.0)
    return table, table_int


def _sigmoid100(delta: FloatArray) -> FloatArray:
    # deltas are bounded by a node's idle GPU milli (or -inf: no overflow warning for infinities)
    out: FloatArray = (1.0 / (1.0 + np.exp(-delta / 1000.0))) * 100.0
    return out


def score_fgd(nodes: NodeArrays, pod: PodRequest, shapes: TypicalShapes) -> Scores:
    """FGD: floor(100 * sigmoid(fragmentation decrease / 1000)), an integer 0..100."""
    ok = feasible(nodes, pod)
    delta, gpu = _fgd_after(nodes, pod, ok, shapes)
    return _finish(ok, np.floor(_sigmoid100(delta)), gpu)


# kubegpu's CPU-stranding term (docs/sim.md): a node needs about this many free cores per idle GPU
# for its GPUs to stay usable, and each GPU's worth of idle GPU left without them costs this many
# GPUs of fragmentation. Chosen on seeds 0-9 (docs/sim.md, "kubegpu").
KUBEGPU_CORES_PER_GPU = 12.0
KUBEGPU_STRANDING_WEIGHT = 2.0
# kubegpu's target workload (``kubegpu_target``): a shared shape whose leftover on a fresh GPU
# (1000 - its milli) fits typical GPU pods making up less than KUBEGPU_WASTEFUL_FILL of them is
# "wasteful" (on the openb trace: the 810-milli pods, whose 190 left over only 160- and 110-milli
# pods fill), and its weight in FGD's target is multiplied by KUBEGPU_WASTEFUL_WEIGHT.
KUBEGPU_WASTEFUL_FILL = 0.05
KUBEGPU_WASTEFUL_WEIGHT = -0.25
# kubegpu's spreading bonus (``score_kubegpu``): a share that is not wasteful gains this many GPUs'
# worth of fragmentation decrease when it opens a fresh GPU on a node in use (or narrower than the
# widest) whose free CPU then still feeds its idle GPUs at KUBEGPU_CORES_PER_GPU. Chosen on seeds
# 0-9 (docs/sim.md, "kubegpu").
KUBEGPU_SPREAD_BONUS = 0.3
# kubegpu's CPU-heavy shares (``cpu_heavy``): a shared shape that asks more than
# KUBEGPU_CPU_HEAVY_RATIO times the cores per GPU of the target's GPU demand as a whole, and makes up
# at least KUBEGPU_CPU_HEAVY_FILL of the GPU shapes' weight, has its weight in kubegpu's target
# multiplied by KUBEGPU_CPU_HEAVY_WEIGHT (on openb and every gpushare variant: the 470-milli pods
# with 11.9 cores). Chosen on seeds 0-9 (docs/sim.md, "kubegpu").
KUBEGPU_CPU_HEAVY_RATIO = 2.0
KUBEGPU_CPU_HEAVY_FILL = 0.05
KUBEGPU_CPU_HEAVY_WEIGHT = 0.75


def cpu_stranded_gpus(
    idle_milli: IntArray | FloatArray, cpu_left_milli: IntArray, cores_per_gpu: float = KUBEGPU_CORES_PER_GPU
) -> FloatArray:
    """GPUs' worth of idle GPU that the node's free CPU cannot feed at ``cores_per_gpu`` cores each."""
    deficit = cores_per_gpu * (idle_milli / MILLI) - cpu_left_milli / MILLI
    out: FloatArray = np.maximum(0.0, deficit) / cores_per_gpu
    return out


_TARGETS: weakref.WeakKeyDictionary[TypicalShapes, TypicalShapes] = weakref.WeakKeyDictionary()
_WASTEFUL: weakref.WeakKeyDictionary[TypicalShapes, frozenset[int]] = weakref.WeakKeyDictionary()


def wasteful_milli(shapes: TypicalShapes, *, fill: float = KUBEGPU_WASTEFUL_FILL) -> frozenset[int]:
    """The share sizes (milli of one GPU) that ``shapes`` makes wasteful (see ``kubegpu_target``).

    A share of ``m`` milli is wasteful when the typical 1-GPU shapes that fit in ``1000 - m`` weigh
    less than ``fill`` of all GPU shapes' weight. Memoised per ``shapes`` for the default ``fill``.
    """
    default = fill == KUBEGPU_WASTEFUL_FILL
    if default:
        cached = _WASTEFUL.get(shapes)
        if cached is not None:
            return cached
    weight = shapes.weight.tolist()
    milli = shapes.gpu_milli.tolist()
    num = shapes.num_gpu.tolist()
    gpu_total = sum(weight)
    out = frozenset(
        m
        for m, k in zip(milli, num, strict=True)
        if k == 1
        and m < MILLI
        and sum(w for w, mm, kk in zip(weight, milli, num, strict=True) if kk == 1 and mm <= MILLI - m)
        < fill * gpu_total
    )
    if default:
        _WASTEFUL[shapes] = out
    return out


def cpu_heavy(
    shapes: TypicalShapes,
    *,
    ratio: float = KUBEGPU_CPU_HEAVY_RATIO,
    fill: float = KUBEGPU_CPU_HEAVY_FILL,
) -> BoolArray:
    """Per shape of ``shapes``: whether it is a common CPU-heavy share (see ``kubegpu_target``).

    A 1-GPU share is CPU-heavy when its cores per GPU (CPU milli / GPU milli) exceed ``ratio`` times
    those of all GPU shapes together (weighted: total CPU over total GPU milli) and its weight is at
    least ``fill`` of the GPU shapes' weight.
    """
    weight = shapes.weight.astype(np.float64)
    gpu = shapes.gpu_milli * shapes.num_gpu
    demand = float((weight * gpu).sum())
    shared = (shapes.num_gpu == 1) & (shapes.gpu_milli < MILLI)
    if demand <= 0 or not shared.any():
        return np.zeros(len(weight), dtype=bool)
    per_gpu = float((weight * shapes.cpu_milli).sum()) / demand
    out: BoolArray = (
        shared
        & (shapes.cpu_milli > ratio * per_gpu * shapes.gpu_milli)
        & (weight >= fill * float(weight.sum()))
    )
    return out


def kubegpu_target(
    shapes: TypicalShapes,
    *,
    fill: float = KUBEGPU_WASTEFUL_FILL,
    factor: float = KUBEGPU_WASTEFUL_WEIGHT,
    heavy: float = KUBEGPU_CPU_HEAVY_WEIGHT,
) -> TypicalShapes:
    """kubegpu's target workload: ``shapes`` with wasteful shares x ``factor``, CPU-heavy ones x ``heavy``.

    A shared shape (one GPU, under 1000 milli) is wasteful when the typical 1-GPU shapes that fit in
    what it leaves of a fresh GPU (1000 - its milli) weigh less than ``fill`` of all GPU shapes: at
    130 % arrived such a pod on a fresh GPU leaves that leftover idle for good. FGD keeps room for it
    like for any popular shape; with a negative ``factor`` a GPU that can no longer take it counts
    as a gain instead, so other pods break into fresh GPUs a little more readily and fewer wasteful
    pods find one.

    Each common CPU-heavy share (``cpu_heavy``) has its weight multiplied by ``heavy``: FGD keeps
    room for a shape by its popularity alone, but room kept for a share that needs twice the cores
    per GPU of the workload also holds the CPU that the GPU-dense pods next to it would use; where
    GPUs are shared, the cluster's CPU runs out before its GPUs (docs/research/placement-issue-30.md, "Where
    gpushare100's remaining gap is").

    Weights stay integers (rounded) and the CPU-only shapes keep their share of the total. Returns
    ``shapes`` itself when nothing changes; memoised per ``shapes`` for the defaults.
    """
    default = (
        fill == KUBEGPU_WASTEFUL_FILL
        and factor == KUBEGPU_WASTEFUL_WEIGHT
        and heavy == KUBEGPU_CPU_HEAVY_WEIGHT
    )
    if default:
        cached = _TARGETS.get(shapes)
        if cached is not None:
            return cached
    weight = shapes.weight.tolist()
    gpu_total = sum(weight)
    wasteful = wasteful_milli(shapes, fill=fill)
    heavy_of = cpu_heavy(shapes).tolist()
    new = [
        round(w * factor) if k == 1 and m in wasteful else round(w * heavy) if h else w
        for w, m, k, h in zip(
            weight, shapes.gpu_milli.tolist(), shapes.num_gpu.tolist(), heavy_of, strict=True
        )
    ]
    out = shapes
    new_sum = sum(new)
    if new != weight and new_sum > 0:
        total = round(new_sum * shapes.weight_total / gpu_total)
        arr = np.array(new, dtype=np.int64)
        out = replace(shapes, popularity=arr / total, weight=arr, weight_total=total)
    if default:
        _TARGETS[shapes] = out
    return out


def _spread_bonus(nodes: NodeArrays, pod: PodRequest) -> FloatArray:
    """kubegpu's spreading bonus per row for ``pod`` on a fresh GPU (``score_kubegpu``)."""
    free = nodes.gpu_free_milli
    # columns past a node's GPUs are 0: a row has one below 1000 when a GPU is in use or when the
    # node is narrower than the widest (the widest stay whole while empty, for the largest pods)
    opened = (free < MILLI).any(axis=1)
    fed = nodes.cpu_left_milli - pod.cpu_milli >= KUBEGPU_CORES_PER_GPU * (free.sum(axis=1) - pod.gpu_milli)
    out: FloatArray = np.where(opened & fed, KUBEGPU_SPREAD_BONUS * MILLI, 0.0)
    return out


def score_kubegpu(nodes: NodeArrays, pod: PodRequest, shapes: TypicalShapes) -> Scores:
    """kubegpu: FGD's fragmentation gradient under kubegpu's target workload, plus spreading and CPU.

    * the fragmentation is FGD's, under ``kubegpu_target(shapes)`` (the wasteful shared shapes
      weighted down, below zero by default) instead of ``shapes``;
    * spreading, when the target workload has wasteful shares (``wasteful_milli``; with none there
      is nothing to keep fresh GPUs from, and shares pack as under FGD): a share that is not
      wasteful gains ``KUBEGPU_SPREAD_BONUS`` x 1000 on a fresh GPU of a node that has a GPU in use
      or fewer GPUs than the widest node, if the node's free CPU after it still covers
      ``KUBEGPU_CORES_PER_GPU`` cores per idle GPU. Each share that opens a fresh GPU while some are
      left is one fresh GPU fewer for a wasteful share (an 810-milli pod leaves 190 milli that
      almost nothing fills), and later shares fill the GPU it opened; FGD packs shares tightly, so
      fresh GPUs last longer and the wasteful shares take them. The node condition keeps the widest
      nodes whole for the largest multi-GPU pods, the CPU condition keeps the opened GPUs fed;
    * gain = that decrease minus ``KUBEGPU_STRANDING_WEIGHT`` x 1000 x the increase of
      ``cpu_stranded_gpus``: FGD only notices CPU when a typical shape stops fitting, so CPU-only and
      CPU-heavy pods wear down the CPU of GPU-dense nodes until their last GPUs are stranded; this
      term charges that wear as it happens and steers such pods to CPU-rich nodes.
    * score = floor(100 * sigmoid(gain / 1000)) (FGD's integer buckets, whose coarseness is useful:
      it leaves ties for a fixed node order to consolidate pods; the ``kubegpu`` policy's default
      order is ``Order.CRC``, see ``kubegpu.sim.policy``).
    """
    ok = feasible(nodes, pod)
    target = kubegpu_target(shapes)
    before = nodes.frag_milli
    if target is not shapes:
        before = np.zeros(len(ok))
        idx = np.flatnonzero(ok)
        before[idx] = fragmentation(
            nodes.gpu_free_milli[idx], nodes.cpu_left_milli[idx], nodes.model_index[idx], target
        )
    wasteful = wasteful_milli(shapes)
    spread = pod.shared and KUBEGPU_SPREAD_BONUS and wasteful and pod.gpu_milli not in wasteful
    bonus = _spread_bonus(nodes, pod) if spread else None
    delta, gpu = _fgd_after(nodes, pod, ok, target, before, fresh_bonus=bonus)
    idle = nodes.gpu_free_milli.sum(axis=1)
    before_stranded = cpu_stranded_gpus(idle, nodes.cpu_left_milli)
    after = cpu_stranded_gpus(idle - pod.gpu_milli * pod.num_gpu, nodes.cpu_left_milli - pod.cpu_milli)
    gain = delta - KUBEGPU_STRANDING_WEIGHT * MILLI * (after - before_stranded)
    return _finish(ok, np.floor(_sigmoid100(gain)), gpu)


def score_kubegpu_plan(nodes: NodeArrays, pod: PodRequest, shapes: TypicalShapes) -> Scores:
    """kubegpu-plan: a share goes where it loses the least value-to-go, then as kubegpu places it.

    ``kubegpu.sim.plan`` prices what each GPU's free milli is worth to the shares still to come
    (from an LP plan of the whole target workload) and what a node's GPUs are worth within its free
    cores (``ValuePlan.node_values``); a share on a GPU loses the node's value before less after,
    bucketed by ``PLAN_BUCKET_MILLI``. Per node: the best bucket over its GPUs x
    1000 + kubegpu's score (0-100), so the bucket decides and kubegpu's score breaks ties; the share
    takes kubegpu's GPU when that GPU is in the node's best bucket, else the first GPU that is.
    With the plan's CPU match on (sharing-heavy workloads, ``ValuePlan.cpu_match``) the node's
    ``cpu_match_steps`` (0-500) comes between the two: bucket x 10^6 + match x 1000 + kubegpu's,
    and with the plan's partner reserve on (``ValuePlan.reserve``, half the GPU demand in shares or
    more), for every pod, a node where it would take the cores of the reserve
    (``plan.reserve_slack`` below 0) ranks below every node where it would not
    (``PLAN_RESERVE_PENALTY`` less). Without the reserve every other pod, and every pod when the
    plan is flat, is scored exactly as by ``kubegpu``.
    """
    base = score_kubegpu(nodes, pod, shapes)
    from kubegpu.sim.plan import (  # here: the plan imports this module
        PLAN_RESERVE_PENALTY,
        cpu_match_steps,
        reserve_slack,
        room_change_of,
        usable_milli,
        value_plan_of,
    )

    plan = value_plan_of(shapes)
    if plan.flat:
        return base
    ok = np.isfinite(base.score)
    free_milli = usable_milli(nodes.gpu_free_milli)  # an over-committed GPU (below 0 free) is full
    if not pod.shared:
        if not plan.reserve:
            return base
        slack = reserve_slack(free_milli, nodes.cpu_left_milli, pod.cpu_milli, np.zeros(len(ok), np.int64))
        return Scores(
            score=np.where(ok & (slack < 0), base.score - PLAN_RESERVE_PENALTY, base.score), gpu=base.gpu
        )
    bucket = plan.buckets(free_milli, nodes.cpu_left_milli, pod.gpu_milli, pod.cpu_milli)
    best = bucket.max(axis=1) if bucket.shape[1] else np.full(len(base.score), -np.inf)
    hint = base.gpu
    hinted = np.where(hint >= 0, bucket[np.arange(len(hint)), np.maximum(hint, 0)], -np.inf)
    gpu = np.where(hinted == best, hint, bucket.argmax(axis=1) if bucket.shape[1] else -1)
    gpu = np.where(ok, gpu, base.gpu).astype(np.int64)
    if plan.cpu_match:
        match = cpu_match_steps(nodes.cpu_left_milli, free_milli.sum(axis=1), pod.cpu_milli, pod.gpu_milli)
        score = best * 1e6 + match * 1000.0 + base.score
    else:
        score = best * 1000.0 + base.score
    if plan.reserve and gpu.size and free_milli.shape[1]:
        free = np.take_along_axis(free_milli, np.maximum(gpu, 0)[:, None], axis=1)[:, 0]
        change = np.where(gpu >= 0, room_change_of(free, pod.gpu_milli), 0)
        slack = reserve_slack(free_milli, nodes.cpu_left_milli, pod.cpu_milli, change)
        score = np.where(slack < 0, score - PLAN_RESERVE_PENALTY, score)
    return Scores(score=np.where(ok, score, -np.inf), gpu=gpu)


SCORERS: dict[Policy, Callable[[NodeArrays, PodRequest, TypicalShapes], Scores]] = {
    Policy.RANDOM: score_random,
    Policy.DOTPROD: score_dotprod,
    Policy.CLUSTERING: score_clustering,
    Policy.PACKING: score_packing,
    Policy.BESTFIT: score_bestfit,
    Policy.FGD: score_fgd,
    Policy.KUBEGPU: score_kubegpu,
    Policy.KUBEGPU_PLAN: score_kubegpu_plan,
}


def score_nodes(policy: Policy, nodes: NodeArrays, pod: PodRequest, shapes: TypicalShapes) -> Scores:
    """Score every row of ``nodes`` for ``pod`` under ``policy`` (higher wins, ``-inf`` = no fit)."""
    return SCORERS[policy](nodes, pod, shapes)
