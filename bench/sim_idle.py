"""Where each policy's idle GPU is at 130 % arrived, per node class, and why no typical pod used it.

For one workload (the default trace or an FGD-artifact sharing variant, as in ``bench/sim_gap.py``)
it replays each policy on the seeds and prints, per node class (GPUs and cores per node; the
largest classes first), the means over the seeds of: GPU and CPU used, and the class's idle GPU
split by why no typical pod can use it (``kubegpu.sim.idle``): too small for any typical share
(leftover), the node's free CPU too small for every share that would fit (CPU-stranded), or room
a typical share would fit but none arrived after it opened. Figures are % of the class's GPU
milli; the last row of each policy sums the cluster. Without the trace it prints why and exits 0.

    python bench/sim_idle.py [--data DIR] [--variant gpushare100] [--seeds 0-2] [--workers 2]
        [--policy fgd --policy kubegpu-plan ...] [--classes 6]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import benchcli
from openb import VARIANTS, default_data_dir, trace_missing, variant_workload

from kubegpu.sim.idle import ClassIdle, idle_by_class, mean_by_class
from kubegpu.sim.run import SimRequest, run_all
from kubegpu.sim.scoring import MILLI, Policy


def _pct(milli: int, whole: int) -> str:
    return f"{100.0 * milli / whole:.1f}" if whole else "-"


def rows(policy: str, classes: list[ClassIdle], shown: int) -> list[str]:
    out = []
    for c in classes[:shown]:
        out.append(
            f"| {policy} | {c.gpus_per_node} GPUs, {c.cores_per_node:g} cores x {c.nodes} | "
            f"{c.gpu_used_pct:.1f} | {c.cpu_used_pct:.1f} | {_pct(c.leftover_milli, c.gpu_milli)} | "
            f"{_pct(c.stranded_milli, c.gpu_milli)} | {_pct(c.usable_milli, c.gpu_milli)} |"
        )
    total = sum(c.gpu_milli for c in classes)
    cpu = sum(c.cpu_milli for c in classes)
    out.append(
        f"| {policy} | **cluster** ({total // MILLI} GPUs) | "
        f"{_pct(sum(c.gpu_used_milli for c in classes), total)} | "
        f"{_pct(sum(c.cpu_used_milli for c in classes), cpu)} | "
        f"{_pct(sum(c.leftover_milli for c in classes), total)} | "
        f"{_pct(sum(c.stranded_milli for c in classes), total)} | "
        f"{_pct(sum(c.usable_milli for c in classes), total)} |"
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--variant", default="gpushare100", choices=VARIANTS)
    ap.add_argument("--seeds", type=benchcli.seeds, default="0-2")
    ap.add_argument("--workers", type=benchcli.count, default=2)
    ap.add_argument("--policy", action="append", choices=[p.value for p in Policy])
    ap.add_argument(
        "--classes", type=benchcli.count, default=6, help="node classes shown per policy (the largest)"
    )
    args = ap.parse_args()
    if trace_missing(args.data, "sim_idle"):
        return 0
    policies = tuple(Policy(p) for p in (args.policy or ["fgd", "kubegpu", "kubegpu-plan"]))
    seeds = args.seeds
    workload = variant_workload(args.data, args.variant)
    runs = run_all(workload, SimRequest(policies=policies, seeds=seeds, workers=args.workers))
    print(
        f"{args.variant}, seeds {seeds[0]}-{seeds[-1]} ({len(seeds)}), 130 % arrived; % of the class's GPU\n"
    )
    print(
        "| policy | node class | GPU used | CPU used | idle: leftover | idle: CPU-stranded |"
        " idle: fits a typical share |"
    )
    print("|---|---|---|---|---|---|---|")
    for policy in policies:
        classes = mean_by_class([idle_by_class(workload, run) for run in runs[policy]])
        for line in rows(policy.value, classes, args.classes):
            print(line)
    return 0


if __name__ == "__main__":
    benchcli.run_main(main)
