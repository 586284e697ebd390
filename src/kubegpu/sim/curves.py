"""From per-arrival records to the paper's curves and headline numbers, averaged over seeds.

The artifact's analysis, exactly: after every arrival it records the allocated GPU share (2
decimals, in %) and the arrived GPU demand (in %, rounded to an integer, half to even); the curve
value at x % is the mean of the allocation values of every arrival whose arrived % rounds to x
(if none does, those within x +- 1), rounded to 2 decimals. Reported numbers are means over seeds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kubegpu.sim.replay import Order, SeedRun
from kubegpu.sim.scoring import FloatArray, Policy

__all__ = ["PolicySummary", "alloc_at", "discrete_curve", "summarise"]


def discrete_curve(arrived_pct: FloatArray, value_pct: FloatArray, points: int) -> FloatArray:
    """Curve value at 0..points-1 % arrived (NaN where no arrival is within 1 point)."""
    bucket = np.round(arrived_pct)
    values = np.round(value_pct, 2)
    out = np.full(points, np.nan)
    if bucket.size and bool(np.all(bucket[1:] >= bucket[:-1])):
        # arrivals only add demand, so each point's arrivals are one slice: the same elements in the
        # same order as the mask below selects, found by bisection instead of a scan per point
        xs = np.arange(points)
        lo, hi = np.searchsorted(bucket, xs, "left").tolist(), np.searchsorted(bucket, xs, "right").tolist()
        near_lo = np.searchsorted(bucket, xs - 1, "left").tolist()
        near_hi = np.searchsorted(bucket, xs + 1, "right").tolist()
        for x in range(points):
            a, b = (lo[x], hi[x]) if hi[x] > lo[x] else (near_lo[x], near_hi[x])
            if b > a:
                out[x] = round(float(values[a:b].mean()), 2)
        return out
    for x in range(points):
        sel = bucket == x
        if not sel.any():
            sel = (bucket >= x - 1) & (bucket <= x + 1)
            if not sel.any():
                continue
        out[x] = round(float(values[sel].mean()), 2)
    return out


def alloc_at(run: SeedRun, pct: int, points: int = 131) -> float | None:
    """One seed's allocation (% of the cluster's GPU) at ``pct`` % arrived: the value that
    ``summarise`` averages over the seeds there (None where the curve has no point)."""
    if not 0 <= pct < points:
        return None
    per_pct = run.total_gpu_milli / 100.0
    value = discrete_curve(run.arrived_milli / per_pct, run.allocated_milli / per_pct, points)[pct]
    return None if np.isnan(value) else float(value)


def _mean_std(curves: Sequence[FloatArray]) -> tuple[FloatArray, FloatArray]:
    """Per-point mean and std over seeds, ignoring seeds without a value there (NaN if none has)."""
    data = np.array(curves, dtype=np.float64)
    have = ~np.isnan(data)
    n = have.sum(axis=0)
    filled = np.where(have, data, 0.0)
    safe = np.maximum(n, 1)
    mean = filled.sum(axis=0) / safe
    var = (np.where(have, data - mean, 0.0) ** 2).sum(axis=0) / safe
    nan = np.full(mean.shape, np.nan)
    return np.where(n > 0, np.round(mean, 2), nan), np.where(n > 0, np.round(np.sqrt(var), 2), nan)


@dataclass(frozen=True, kw_only=True, eq=False)
class PolicySummary:
    """One policy over all seeds: curves (mean and std per point) and headline numbers."""

    policy: Policy
    order: Order
    seeds: tuple[int, ...]
    total_gpus: int
    alloc_mean: FloatArray
    alloc_std: FloatArray
    frag_mean: FloatArray  # fragmentation amount, % of cluster GPUs
    frag_ratio_mean: FloatArray  # fragmented share of idle GPU, %
    empty_frag_pct: float
    failed_by_shape: tuple[tuple[str, float], ...]  # mean failed pods per seed, most first
    arrivals_per_seed: float
    seconds: float  # wall time of all its replays (sum)
    comm_mean: float | None  # mean link cost of placed multi-GPU pods
    comm_p95: float | None
    comm_split_share: float | None  # share of multi-GPU pods above the best cost for their node
    comm_lowest_index_mean: float | None  # the same pods on the lowest-index free GPUs (the artifact)
    comm_lowest_index_split_share: float | None

    def at(self, pct: int) -> tuple[float | None, float | None]:
        """Mean and std of the allocation at ``pct`` % arrived (None past the end of the curve)."""
        if pct >= len(self.alloc_mean) or np.isnan(self.alloc_mean[pct]):
            return None, None
        return float(self.alloc_mean[pct]), float(self.alloc_std[pct])

    def unallocated_gpus(self, pct: int) -> float | None:
        mean, _ = self.at(pct)
        return None if mean is None else round((1 - mean / 100) * self.total_gpus, 1)

    @property
    def pods_per_second(self) -> float:
        return self.arrivals_per_seed * len(self.seeds) / self.seconds if self.seconds > 0 else 0.0


def summarise(runs: Sequence[SeedRun], shape_labels: Sequence[str], points: int = 131) -> PolicySummary:
    """Aggregate the runs of one policy (one per seed)."""
    if not runs:
        raise ValueError("no runs to summarise")
    total_milli = runs[0].total_gpu_milli
    per_pct = total_milli / 100.0
    allocs, frags, ratios = [], [], []
    failed: Counter[str] = Counter()
    for run in runs:
        arrived = run.arrived_milli / per_pct
        allocs.append(discrete_curve(arrived, run.allocated_milli / per_pct, points))
        frags.append(discrete_curve(arrived, run.frag_milli / per_pct, points))
        idle = np.maximum(total_milli - run.allocated_milli, 1)
        ratios.append(discrete_curve(arrived, run.frag_milli / idle * 100.0, points))
        for sid in run.shape[~run.placed]:
            failed[shape_labels[int(sid)]] += 1
    comm = np.concatenate([r.comm_cost for r in runs])
    ideal = np.concatenate([r.comm_ideal for r in runs])
    naive = np.concatenate([r.comm_lowest_index for r in runs])
    alloc_mean, alloc_std = _mean_std(allocs)
    frag_mean, _ = _mean_std(frags)
    ratio_mean, _ = _mean_std(ratios)
    n = len(runs)
    return PolicySummary(
        policy=runs[0].policy,
        order=runs[0].order,
        seeds=tuple(r.seed for r in runs),
        total_gpus=total_milli // 1000,
        alloc_mean=alloc_mean,
        alloc_std=alloc_std,
        frag_mean=frag_mean,
        frag_ratio_mean=ratio_mean,
        empty_frag_pct=float(np.mean([r.empty_frag_milli for r in runs]) / per_pct),
        failed_by_shape=tuple((label, count / n) for label, count in failed.most_common()),
        arrivals_per_seed=float(np.mean([len(r.arrived_milli) for r in runs])),
        seconds=float(sum(r.seconds for r in runs)),
        comm_mean=float(comm.mean()) if comm.size else None,
        comm_p95=float(np.percentile(comm, 95)) if comm.size else None,
        comm_split_share=float((comm > ideal + 1e-9).mean()) if comm.size else None,
        comm_lowest_index_mean=float(naive.mean()) if naive.size else None,
        comm_lowest_index_split_share=float((naive > ideal + 1e-9).mean()) if naive.size else None,
    )
