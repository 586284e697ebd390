"""How much of a policy's distance to the online bound the CPU-only pods it had to place explain.

The online bound (``kubegpu.sim.online_bound``) may leave out any CPU-only pod: they allocate no
GPU, and its LP spends their cores on GPU pods instead. A policy under the online rules places every
CPU-only pod that fits when it arrives, so its cores are gone. This script replays each policy,
counts the CPU-only pods it placed per shape, and solves the online bound again with exactly those
forced in (``online_bound(..., cpu_only_placed=...)``): the best any placement that takes at least
those pods could reach. That is **not** a bound for every policy (another one may refuse CPU-only
pods earlier), but it splits each policy's distance to the online bound in two:

* the CPU-only pods: online bound - the bound given the policy's CPU-only pods;
* the rest, the GPU pods' packing: the bound given its CPU-only pods - the policy's allocation.

Means over the seeds, in % of the cluster's GPU at 130 % arrived. Without the trace it prints why
and exits 0.

    python bench/bound_given_cpu_only.py [--data DIR] [--seeds 42-45] [--variants gpushare100]
        [--workers 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import benchcli
import numpy as np
from openb import default_data_dir, trace_missing, variant_workload, variants_and_seeds

from kubegpu.errors import InputError
from kubegpu.sim.online_bound import online_bound
from kubegpu.sim.replay import replay
from kubegpu.sim.scoring import MILLI, Policy

POLICIES = (Policy.FGD, Policy.KUBEGPU, Policy.KUBEGPU_PLAN)


@dataclass(frozen=True)
class Row:
    """One policy on one seed: % of the cluster's GPU, and cores."""

    allocated: float
    bound: float  # the online bound (the same for every policy of a seed)
    given: float  # the online bound given the policy's CPU-only pods
    cpu_only_placed: float  # cores
    cpu_only_arrived: float  # cores


def _job(data: Path, name: str, seed: int) -> tuple[str, int, dict[Policy, Row]]:
    workload = variant_workload(data, name)
    total = workload.total_gpus * MILLI
    bound = online_bound(workload, seed).bound_pct
    cores = np.array([r.cpu_milli / 1000.0 if r.num_gpu == 0 else 0.0 for r in workload.shape_requests])
    out: dict[Policy, Row] = {}
    for policy in POLICIES:
        run = replay(workload, policy, seed, inflate=1.3)
        placed = np.bincount(run.shape[run.placed], minlength=len(cores))
        out[policy] = Row(
            allocated=100.0 * int(run.allocated_milli[-1]) / total,
            bound=bound,
            given=online_bound(workload, seed, cpu_only_placed=placed).bound_pct,
            cpu_only_placed=float(cores[run.shape[run.placed]].sum()),
            cpu_only_arrived=float(cores[run.shape].sum()),
        )
    return name, seed, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--seeds", default="42-45")
    ap.add_argument("--variants", default="gpushare100")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    if trace_missing(args.data, "bound_given_cpu_only"):
        return 0
    problem = "" if args.workers >= 1 else "--workers at least 1"
    try:
        names, seeds = variants_and_seeds("bound_given_cpu_only", args.variants, args.seeds, problem=problem)
    except InputError as exc:
        print(exc)
        return 2
    jobs = [(name, seed) for name in names for seed in seeds]
    rows: dict[tuple[str, Policy], list[Row]] = {(n, p): [] for n in names for p in POLICIES}
    with ProcessPoolExecutor(max_workers=min(args.workers, len(jobs))) as pool:
        futures = [pool.submit(_job, args.data, name, seed) for name, seed in jobs]
        for done, future in enumerate(futures, start=1):
            name, seed, result = future.result()
            for policy, row in result.items():
                rows[(name, policy)].append(row)
            plan = result[Policy.KUBEGPU_PLAN]
            print(
                f"bound_given_cpu_only: {name} seed {seed} ({done}/{len(jobs)}): online bound"
                f" {plan.bound:.3f} %, given kubegpu-plan's CPU-only pods {plan.given:.3f} %",
                file=sys.stderr,
                flush=True,
            )
    print(f"seeds {seeds[0]}-{seeds[-1]} ({len(seeds)}), 130 % arrived\n")
    print(
        "| variant | policy | allocated | CPU-only cores placed (arrived) | online bound |"
        " online bound given its CPU-only pods | its distance to the online bound |"
        " of it: the CPU-only pods | of it: the rest |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        for policy in POLICIES:
            group = rows[(name, policy)]

            def mean(field: str, group: list[Row] = group) -> float:
                return statistics.fmean(getattr(r, field) for r in group)

            allocated, bound, given = mean("allocated"), mean("bound"), mean("given")
            print(
                f"| {name} | {policy.value} | {allocated:.2f} | {mean('cpu_only_placed') / 1000:.1f}k"
                f" ({mean('cpu_only_arrived') / 1000:.1f}k) | {bound:.2f} | {given:.2f} |"
                f" {bound - allocated:.2f} | {bound - given:.2f} | {given - allocated:.2f} |"
            )
    return 0


if __name__ == "__main__":
    benchcli.run_main(main)
