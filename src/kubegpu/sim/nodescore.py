"""Per-node scores in pure Python, equal bit for bit to ``kubegpu.sim.scoring``'s vectorised ones.

Why it exists: the replay rescores only the nodes bound since a pod shape's last arrival, usually a
handful. numpy's fixed cost per call (a few microseconds, about twenty calls per scoring) is then
most of the time, while the same arithmetic on Python ints and floats over one node takes a few
microseconds in all. The replay uses these scorers for small rescorings and the vectorised ones
(``kubegpu.sim.scoring``) for large ones; both give the same scores and GPUs (tested property).

Exactness: every expression mirrors the vectorised one operation for operation (integer arithmetic
where numpy uses integers, the same float operations in the same order where it uses float64, both
IEEE double). FGD's ``floor(100 * sigmoid(x / 1000))`` is not recomputed with ``math.exp`` (its last
bit may differ from numpy's); it is looked up among the 100 values of ``x`` where numpy's own
function steps to the next integer (``score_steps``).

``FragTable`` is FGD's node fragmentation F_n(M), memoised by what it depends on: the GPU model,
which typical CPU requests fit, and the sorted free milli of the GPUs.
"""

from __future__ import annotations

import weakref
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from functools import cache

import numpy as np

from kubegpu.sim.scoring import (
    KUBEGPU_CORES_PER_GPU,
    KUBEGPU_SPREAD_BONUS,
    KUBEGPU_STRANDING_WEIGHT,
    MAX_SPEC_CPU_MILLI,
    MAX_SPEC_GPU_MILLI,
    MILLI,
    NodeArrays,
    PodRequest,
    Policy,
    TypicalShapes,
    _sigmoid100,
    kubegpu_target,
    pod_class,
    wasteful_milli,
)

__all__ = ["FragTable", "NodeRows", "NodeScorer", "node_scorer", "score_steps"]

NodeScorer = Callable[[int], tuple[float, int]]
NEG_INF = float("-inf")


def _to_ordered(x: float) -> int:
    """An integer that orders like the double ``x`` (adjacent doubles: adjacent integers)."""
    bits = int(np.array([x], dtype=np.float64).view(np.int64)[0])
    return bits if bits >= 0 else -(bits & 0x7FFF_FFFF_FFFF_FFFF)


def _from_ordered(keys: list[int]) -> np.ndarray:
    bits = [k if k >= 0 else (-k) | -0x8000_0000_0000_0000 for k in keys]
    return np.array(bits, dtype=np.int64).view(np.float64)


@cache
def score_steps() -> tuple[float, ...]:
    """For k = 1..100, the smallest double x with ``floor(_sigmoid100(x)) >= k`` (inf if none).

    Found by bisection over the doubles with numpy's own function, so ``bisect_right(steps, x)`` is
    that function's integer score for every x, given that it never decreases as x grows (checked
    around every step by the tests).
    """
    lo = [_to_ordered(-1e7)] * 100  # scores 0 here ...
    hi = [_to_ordered(1e7)] * 100  # ... and 100 here
    want = np.arange(1, 101, dtype=np.float64)
    for _ in range(70):
        mid = [(a + b) // 2 for a, b in zip(lo, hi, strict=True)]
        at = np.floor(_sigmoid100(_from_ordered(mid))) >= want
        for k, ok in enumerate(at.tolist()):
            if ok:
                hi[k] = mid[k]
            else:
                lo[k] = mid[k]
    top = np.floor(_sigmoid100(np.array([1e7]))) >= want
    values = _from_ordered(hi).tolist()
    return tuple(v if ok else float("inf") for v, ok in zip(values, top.tolist(), strict=True))


class FragTable:
    """F_n(M) of one node state, memoised; equal to ``scoring.fragmentation`` of that row.

    ``FragTable.of_shapes`` shares one table (and its memo) among every user of the same
    ``TypicalShapes``, e.g. all the replays of a trace in one process.
    """

    __slots__ = ("__weakref__", "_by_fit", "_cpu_steps", "_memo", "_none", "_shapes", "_target", "_total")

    def __init__(self, shapes: TypicalShapes) -> None:
        self._shapes = weakref.ref(shapes)
        self._target: FragTable | None = None
        self._total = int(shapes.weight_total)
        self._none = shapes.popularity.size == 0
        self._cpu_steps = (*sorted({int(c) for c in shapes.cpu_milli.tolist()}), 1 << 62)
        cpu = shapes.cpu_milli.tolist()
        milli = shapes.gpu_milli.tolist()
        num = shapes.num_gpu.tolist()
        weight = shapes.weight.tolist()
        ok = shapes.model_ok.tolist()
        n_models = shapes.model_ok.shape[1]
        # per (model, CPU step): the shapes that pass the model and CPU checks, as (milli, count, weight)
        self._by_fit: dict[tuple[int, int], tuple[tuple[int, int, int], ...]] = {}
        for model in range(n_models):
            for step in range(len(self._cpu_steps) + 1):
                cpu_left = self._cpu_steps[step - 1] if step else -1
                self._by_fit[model, step] = tuple(
                    (milli[m], num[m], weight[m])
                    for m in range(len(cpu))
                    if ok[m][model] and cpu_left >= cpu[m]
                )
        self._memo: dict[tuple[int, int, tuple[int, ...]], float] = {}

    @classmethod
    def of_shapes(cls, shapes: TypicalShapes) -> FragTable:
        """The shared table of ``shapes`` (built on first use, dropped with ``shapes``)."""
        table = _TABLES.get(shapes)
        if table is None:
            table = _TABLES[shapes] = cls(shapes)
        return table

    def target(self) -> FragTable:
        """The table of kubegpu's target workload (``scoring.kubegpu_target`` of these shapes).

        ``self`` when the target is the shapes themselves; built on first use and kept.
        """
        if self._target is None:
            shapes = self.shapes()
            target = kubegpu_target(shapes)
            self._target = self if target is shapes else FragTable.of_shapes(target)
        return self._target

    def shapes(self) -> TypicalShapes:
        """The typical shapes this table is for."""
        shapes = self._shapes()
        if shapes is None:
            raise ValueError("the typical shapes of this FragTable no longer exist")
        return shapes

    def wasteful_milli(self) -> frozenset[int]:
        """The share sizes these shapes make wasteful (``scoring.wasteful_milli``)."""
        return wasteful_milli(self.shapes())

    def step(self, cpu_left: int) -> int:
        """Which typical CPU requests fit: the number of distinct ones at most ``cpu_left``."""
        return bisect_right(self._cpu_steps, cpu_left)

    def of(self, model: int, cpu_left: int, free_sorted: tuple[int, ...]) -> float:
        """F_n(M) of a node with GPU model ``model``, ``cpu_left`` and these free milli (sorted)."""
        key = (model, bisect_right(self._cpu_steps, cpu_left), free_sorted)
        out = self._memo.get(key)
        if out is None:
            out = self._compute(key)
            self._memo[key] = out
        return out

    def _compute(self, key: tuple[int, int, tuple[int, ...]]) -> float:
        free = key[2]  # sorted ascending
        idle = sum(free)
        if self._none:
            return float(idle)
        width = len(free)
        room = [0] * (width + 1)  # room[i]: free milli of the GPUs from the i-th smallest on
        for i in range(width - 1, -1, -1):
            room[i] = room[i + 1] + free[i]
        kept = 0
        for milli, num, weight in self._by_fit.get(key[:2], ()):
            i = bisect_left(free, milli)  # GPUs i.. have at least milli free
            if width - i >= num:
                kept += weight * room[i]
        return (idle * self._total - kept) / self._total


_TABLES: weakref.WeakKeyDictionary[TypicalShapes, FragTable] = weakref.WeakKeyDictionary()


class NodeRows:
    """The node state as Python lists, one entry per row of a ``NodeArrays`` (kept in step by the caller)."""

    __slots__ = ("classes", "count", "cpu", "frag", "free", "memory", "model")

    def __init__(self, nodes: NodeArrays) -> None:
        self.free: list[list[int]] = nodes.gpu_free_milli.tolist()
        self.cpu: list[int] = nodes.cpu_left_milli.tolist()
        self.memory: list[int] = nodes.memory_left_mib.tolist()
        self.count: list[int] = nodes.gpu_count.tolist()
        self.model: list[int] = nodes.model_index.tolist()
        self.frag: list[float] = nodes.frag_milli.tolist()
        self.classes: list[list[int]] = nodes.class_counts.tolist()


def _best_fit_gpu(free: list[int], milli: int) -> int:
    best, where = MILLI + 1, 0
    for g, f in enumerate(free):
        key = f if f >= milli else MILLI + 1
        if key < best:
            best, where = key, g
    return where


def _plan_scorer(kube: NodeScorer, pod: PodRequest, rows: NodeRows, frag: FragTable) -> NodeScorer:
    """kubegpu-plan's score of a row (``scoring.score_kubegpu_plan``) around kubegpu's (``kube``)."""
    from kubegpu.sim.plan import (
        PLAN_BUCKET_MILLI,
        PLAN_CPU_PRICES,
        PLAN_RESERVE_CORES,
        PLAN_RESERVE_PENALTY,
        PLAN_VALUE_UNIT,
        cpu_match_step,
        room,
        room_change,
        value_plan_of,
    )

    plan = value_plan_of(frag.shapes())
    if plan.flat or not (pod.shared or plan.reserve):
        return kube
    free_of, cpu_of = rows.free, rows.cpu
    pod_cpu = pod.cpu_milli

    def slack(r: int, change: int) -> int:
        """``plan.reserve_slack`` of row ``r``."""
        rooms = sum(room(f) for f in free_of[r])
        return cpu_of[r] - pod_cpu - PLAN_RESERVE_CORES * rooms + PLAN_RESERVE_CORES * change

    if not pod.shared:

        def score_held(r: int) -> tuple[float, int]:
            base, hint = kube(r)
            if base == NEG_INF or slack(r, 0) >= 0:
                return base, hint
            return base - PLAN_RESERVE_PENALTY, hint

        return score_held

    table: list[list[int]] = plan.node_table.tolist()
    priced = list(zip(table, PLAN_CPU_PRICES, strict=True))
    milli = pod.gpu_milli
    unit = PLAN_BUCKET_MILLI * PLAN_VALUE_UNIT
    match_cpu, held = plan.cpu_match, plan.reserve

    def score_kubegpu_plan(r: int) -> tuple[float, int]:
        base, hint = kube(r)
        if base == NEG_INF:
            return base, hint
        # a GPU over-committed by pods bound elsewhere (below 0 free) is full, as plan.usable_milli says
        free, cpu = [f if f > 0 else 0 for f in free_of[r]], cpu_of[r]
        # the node's value before and after (plan.ValuePlan.buckets), in the same integers
        sums = [sum(row[f] for f in free) for row in table]
        before = min(s + price * cpu for s, (_, price) in zip(sums, priced, strict=True))
        cpu_after = cpu - pod_cpu
        best, first, at_hint = NEG_INF, -1, NEG_INF
        lost: dict[int, float] = {}
        for g, f in enumerate(free):
            if f >= milli:
                b = lost.get(f)
                if b is None:
                    after = min(
                        s - row[f] + row[f - milli] + price * cpu_after
                        for s, (row, price) in zip(sums, priced, strict=True)
                    )
                    b = lost[f] = float((after - before) // unit)
                if b > best:
                    best, first = b, g
                if g == hint:
                    at_hint = b
        gpu = hint if hint >= 0 and at_hint == best else first
        if match_cpu:
            score = best * 1e6 + cpu_match_step(cpu, sum(free), pod_cpu, milli) * 1000.0 + base
        else:
            score = best * 1000.0 + base
        if held and gpu >= 0 and slack(r, room_change(free[gpu], milli)) < 0:
            score -= PLAN_RESERVE_PENALTY
        return score, gpu

    return score_kubegpu_plan


def node_scorer(policy: Policy, pod: PodRequest, rows: NodeRows, frag: FragTable) -> NodeScorer:
    """``score(row) -> (score, gpu)`` for ``pod`` under ``policy``, as ``score_nodes`` gives for that row."""
    cpu_req, mem_req, k, milli = pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli
    model_ok = pod.model_ok.tolist()
    shared = pod.shared
    free_of, cpu_of, mem_of, model_of = rows.free, rows.cpu, rows.memory, rows.model

    def fits(r: int) -> bool:
        if cpu_of[r] < cpu_req or mem_of[r] < mem_req:
            return False
        if k == 1:
            return model_ok[model_of[r]] and max(free_of[r]) >= milli
        if k:  # at least k GPUs with room: the k-th largest free milli is enough
            free = free_of[r]
            return model_ok[model_of[r]] and k <= len(free) and sorted(free)[-k] >= milli
        return True

    if policy is Policy.KUBEGPU_PLAN:
        return _plan_scorer(node_scorer(Policy.KUBEGPU, pod, rows, frag), pod, rows, frag)

    if policy in {Policy.FGD, Policy.KUBEGPU}:
        steps = score_steps()
        # kubegpu scores FGD's gradient under its own target workload (scoring.kubegpu_target): the
        # fragmentation before is then that table's, not the state's (rows.frag, under the shapes)
        table = frag.target() if policy is Policy.KUBEGPU else frag
        frag_of, before_of = table.of, rows.frag
        own_before = table is not frag
        # kubegpu's spreading bonus (scoring.score_kubegpu) for shares that are not wasteful
        wasteful = frag.wasteful_milli() if policy is Policy.KUBEGPU else frozenset()
        spread = shared and bool(KUBEGPU_SPREAD_BONUS) and bool(wasteful) and milli not in wasteful
        bonus = KUBEGPU_SPREAD_BONUS * MILLI
        per_gpu = KUBEGPU_CORES_PER_GPU

        def fgd(r: int) -> tuple[float, int, float]:
            """(FGD's integer score, GPU, fragmentation decrease) of a row where the pod fits."""
            free = free_of[r]
            model = model_of[r]
            cpu_after = cpu_of[r] - cpu_req
            before = frag_of(model, cpu_of[r], tuple(sorted(free))) if own_before else before_of[r]
            if not shared:
                if k:
                    after = list(free)
                    left = k
                    for g, f in enumerate(after):
                        if f == MILLI and left:
                            after[g] = 0
                            left -= 1
                    key = tuple(sorted(after))
                else:
                    key = tuple(sorted(free))
                delta = before - frag_of(model, cpu_after, key)
                return float(bisect_right(steps, delta)), -1, delta
            best, gpu, best_delta = -1, -1, NEG_INF
            seen: list[int] = []
            # a GPU in use, or a node narrower than the widest (its padding is 0): scoring._spread_bonus
            boost = spread and min(free) < MILLI and cpu_after >= per_gpu * (sum(free) - milli)
            for g, f in enumerate(free):
                if f < milli or f in seen:
                    seen.append(f)
                    continue
                seen.append(f)
                after = list(free)
                after[g] = f - milli
                delta = before - frag_of(model, cpu_after, tuple(sorted(after)))
                if boost and f == MILLI:
                    delta = delta + bonus
                score = bisect_right(steps, delta)
                if score > best:
                    best, gpu, best_delta = score, g, delta
            return float(best), gpu, best_delta

        if policy is Policy.FGD:

            def score_fgd(r: int) -> tuple[float, int]:
                if not fits(r):
                    return NEG_INF, -1
                score, gpu, _ = fgd(r)
                return score, gpu

            return score_fgd

        weight = KUBEGPU_STRANDING_WEIGHT
        taken = milli * k

        def stranded(idle: int, cpu_left: int) -> float:
            deficit = per_gpu * (idle / MILLI) - cpu_left / MILLI
            return max(0.0, deficit) / per_gpu

        def score_kubegpu(r: int) -> tuple[float, int]:
            if not fits(r):
                return NEG_INF, -1
            _, gpu, delta = fgd(r)
            idle = sum(free_of[r])
            cpu_left = cpu_of[r]
            gain = delta - weight * MILLI * (
                stranded(idle - taken, cpu_left - cpu_req) - stranded(idle, cpu_left)
            )
            return float(bisect_right(steps, gain)), gpu

        return score_kubegpu

    if policy is Policy.RANDOM:

        def score_random(r: int) -> tuple[float, int]:
            return (0.0, -1) if fits(r) else (NEG_INF, -1)

        return score_random

    if policy is Policy.DOTPROD:
        p0 = cpu_req / float(MAX_SPEC_CPU_MILLI)
        p1 = (milli * k) / float(MAX_SPEC_GPU_MILLI)

        def score_dotprod(r: int) -> tuple[float, int]:
            if not fits(r):
                return NEG_INF, -1
            n0 = cpu_of[r] / float(MAX_SPEC_CPU_MILLI)
            n1 = sum(free_of[r]) / float(MAX_SPEC_GPU_MILLI)
            dot = (n0 * p0 + n1 * p1) / 2.0
            return float(int(100.0 * (1.0 - dot))), _best_fit_gpu(free_of[r], milli) if shared else -1

        return score_dotprod

    if policy is Policy.BESTFIT:
        taken_gpu = milli * k

        def score_bestfit(r: int) -> tuple[float, int]:
            if not fits(r):
                return NEG_INF, -1
            cpu = (cpu_of[r] - cpu_req) / float(MAX_SPEC_CPU_MILLI) * 0.5
            gpu = (sum(free_of[r]) - taken_gpu) / float(MAX_SPEC_GPU_MILLI) * 0.5
            return float(int((1.0 - (cpu + gpu)) * 100.0)), _best_fit_gpu(free_of[r], milli) if shared else -1

        return score_bestfit

    count_of = rows.count
    if policy is Policy.PACKING:
        whole_raw = max(50 - k, 33)

        def score_packing(r: int) -> tuple[float, int]:
            if not fits(r):
                return NEG_INF, -1
            if not k:
                return 0.0, -1
            free = free_of[r]
            fully_free = free.count(MILLI)
            gpu = _best_fit_gpu(free, milli) if shared else -1
            if fully_free == count_of[r]:
                raw = max(33 - fully_free, fully_free)
            elif shared:
                chosen = free[gpu]
                raw = 49 if chosen == MILLI else max(100 - (chosen * 100 // MILLI) // 10, 50)
            else:
                raw = whole_raw
            return float(raw), gpu

        return score_packing

    if policy is Policy.CLUSTERING:
        cls = pod_class(k, milli)
        classes_of = rows.classes

        def score_clustering(r: int) -> tuple[float, int]:
            if not fits(r):
                return NEG_INF, -1
            if cls < 0:
                return 0.0, -1
            free = free_of[r]
            base = 25 * (MAX_SPEC_GPU_MILLI - sum(free)) // MAX_SPEC_GPU_MILLI
            counts = classes_of[r]
            present = sum(1 for c in counts if c > 0)
            mine = counts[cls] > 0
            band = (75 if present == 1 else 50) if mine else (25 if present == 0 else 0)
            return float(base + band), _best_fit_gpu(free, milli) if shared else -1

        return score_clustering

    raise ValueError(f"no per-node scorer for policy {policy!r}")
