"""How tight the online bound is: the node-level bound and every other pivot beside it, per workload.

The online bound (``kubegpu.sim.online_bound``) prices one GPU at a time, holds each node class's
CPU and memory to the class's total, and takes one pivot share. Two ways to tighten it, both valid
upper bounds for every policy that places each pod that fits on arrival:

* **node-level columns** (``solve_bound(..., cpu_step=...)``, ``kubegpu.sim.node_pricing``): a column
  is a whole node's content, so no node holds more cores than it has (the class rows let a class
  pool them);
* **another pivot**: any shared shape gives a valid bound, so the lowest over every share with at
  least 2 % of the arrived GPU demand is one too.

For each workload (the default trace and the FGD artifact's sharing variants) and seed it prints
the offline and online bounds both ways, the lowest online bound over the other pivots, FGD's and
``kubegpu-plan``'s allocation at 130 % arrived, and the share of FGD's gap to the tightest online
bound that ``kubegpu-plan`` closes (``bench/sim_gap.py`` reports it against the per-GPU one).
Means over the seeds; the node-level solves take about a minute per seed on the openb cluster.
Without the trace it prints why and exits 0.

    python bench/bound_tightness.py [--data DIR] [--seeds 42] [--variants default,gpushare100]
        [--cpu-step 0.25] [--workers 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import benchcli
import numpy as np
from openb import VARIANTS, default_data_dir, trace_missing, variant_workload, variants_and_seeds

from kubegpu.errors import InputError
from kubegpu.sim.bound import Column, bound_problem
from kubegpu.sim.online_bound import choose_pivot, online_bound, pivot_bound
from kubegpu.sim.replay import replay
from kubegpu.sim.scoring import MILLI, Policy
from kubegpu.sim.workload import Workload, arrivals

OTHER_PIVOT_DEMAND = 0.02  # a share tried as the pivot has at least this share of the GPU demand


@dataclass(frozen=True)
class Row:
    """One seed of one workload, in % of the cluster's GPU."""

    offline: float
    offline_node: float
    online: float
    online_node: float
    other_pivots: float  # the lowest online bound over the other pivots (per GPU)
    pivots_tried: int
    fgd: float
    plan: float
    node_seconds: float


def _other_pivots(workload: Workload, seed: int) -> tuple[float, int]:
    sequence = workload.pod_shape[arrivals(workload, seed, 1.3)]
    counts = np.bincount(sequence, minlength=len(workload.shape_requests)).astype(np.int64)
    milli = workload.shape_total_milli()
    demand = float(counts @ milli)
    chosen = choose_pivot(workload, counts)
    problem = bound_problem(workload, counts)
    pool: list[Column] = []
    values = [
        pivot_bound(workload, sequence, sid, problem=problem, pool=pool)[0]
        for sid, r in enumerate(workload.shape_requests)
        if r.shared and sid != chosen and counts[sid] * milli[sid] >= OTHER_PIVOT_DEMAND * demand
    ]
    return (min(values) if values else float("inf")), len(values)


def _job(data: Path, name: str, seed: int, cpu_step: float) -> tuple[str, int, Row]:
    workload = variant_workload(data, name)
    total = workload.total_gpus * MILLI
    per_gpu = online_bound(workload, seed)
    started = time.perf_counter()
    node = online_bound(workload, seed, cpu_step=cpu_step)
    node_seconds = time.perf_counter() - started
    other, tried = _other_pivots(workload, seed)
    final = {
        p: 100.0 * int(replay(workload, p, seed, inflate=1.3).allocated_milli[-1]) / total
        for p in (Policy.FGD, Policy.KUBEGPU_PLAN)
    }
    return (
        name,
        seed,
        Row(
            offline=per_gpu.offline_pct,
            offline_node=node.offline_pct,
            online=per_gpu.bound_pct,
            online_node=node.bound_pct,
            other_pivots=min(100.0 * other / total, per_gpu.offline_pct),
            pivots_tried=tried,
            fgd=final[Policy.FGD],
            plan=final[Policy.KUBEGPU_PLAN],
            node_seconds=node_seconds,
        ),
    )


def _closed(plan: float, fgd: float, bound: float) -> str:
    return f"{100.0 * (plan - fgd) / (bound - fgd):.1f} %" if bound > fgd else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--seeds", default="42")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--cpu-step", type=float, default=0.25, help="the node-level bound's core grid")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    if trace_missing(args.data, "bound_tightness"):
        return 0
    ok = 0.01 <= args.cpu_step <= 8 and args.workers >= 1
    problem = "" if ok else "--cpu-step 0.01-8 cores, --workers at least 1"
    try:
        names, seeds = variants_and_seeds("bound_tightness", args.variants, args.seeds, problem=problem)
    except InputError as exc:
        print(exc)
        return 2
    jobs = [(name, seed) for name in names for seed in seeds]
    rows: dict[str, list[Row]] = {name: [] for name in names}
    with ProcessPoolExecutor(max_workers=min(args.workers, len(jobs))) as pool:
        futures = [pool.submit(_job, args.data, name, seed, args.cpu_step) for name, seed in jobs]
        for done, future in enumerate(futures, start=1):
            name, seed, row = future.result()
            rows[name].append(row)
            print(
                f"bound_tightness: {name} seed {seed} ({done}/{len(jobs)}): online {row.online:.3f} %,"
                f" node-level {row.online_node:.3f} % ({row.node_seconds:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    print(
        f"seeds {seeds[0]}-{seeds[-1]} ({len(seeds)}), 130 % arrived,"
        f" node-level core grid {args.cpu_step:g}\n"
    )
    print(
        "| variant | offline bound | offline, node-level | online bound | online, node-level |"
        " online, lowest other pivot (tried) | FGD | kubegpu-plan | share of FGD's gap closed:"
        " online bound | the tightest |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in names:

        def mean(field: str, name: str = name) -> float:
            return statistics.fmean(getattr(r, field) for r in rows[name])

        tightest = statistics.fmean(min(r.online, r.online_node, r.other_pivots) for r in rows[name])
        fgd, plan = mean("fgd"), mean("plan")
        tried = max(r.pivots_tried for r in rows[name])
        print(
            f"| {name} | {mean('offline'):.3f} | {mean('offline_node'):.3f} | {mean('online'):.3f} |"
            f" {mean('online_node'):.3f} | {mean('other_pivots'):.3f} ({tried}) | {fgd:.2f} | {plan:.2f} |"
            f" {_closed(plan, fgd, mean('online'))} | {_closed(plan, fgd, tightest)} |"
        )
    return 0


if __name__ == "__main__":
    benchcli.run_main(main)
