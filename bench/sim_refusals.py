"""What each policy refuses at 130 % arrived, per kind of pod, and how early each kind is first refused.

For each workload (the default trace or an FGD-artifact sharing variant, as in ``bench/sim_gap.py``) it
replays each policy on the seeds and prints, per kind of pod (CPU-only, shares, whole-GPU pods by their GPU
count; ``kubegpu.sim.idle.refused_by_kind``), the means over the seeds of: pods arrived and refused, the GPU
they asked for as a share of the cluster's, and the share of the arrivals before the kind's first refusal
(over the seeds that refused it at all). A k-GPU pod needs k free GPUs on one node, so once the untouched
GPUs run out it is refused for good: the earlier a policy uses them up, the more GPU it gives up to
multi-GPU pods (docs/research/placement-issue-30.md, "Multi-GPU pods when the untouched GPUs run out").
Without the trace it prints why and exits 0.

    python bench/sim_refusals.py [--data DIR] [--variants gpushare60,gpushare80] [--seeds 42-51]
        [--workers 2] [--policy fgd --policy kubegpu-plan ...]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import benchcli
from openb import VARIANTS, default_data_dir, trace_missing, variant_workload

from kubegpu.sim.idle import KindRefusals, refused_by_kind
from kubegpu.sim.run import SimRequest, run_all
from kubegpu.sim.scoring import Policy


def rows(policy: str, allocated: float, per_seed: list[list[KindRefusals]], total_milli: int) -> list[str]:
    """One table row per kind of pod: means over the seeds that drew it."""
    kinds: dict[str, list[KindRefusals]] = {}
    for run in per_seed:
        for k in run:
            kinds.setdefault(k.label, []).append(k)
    out = []
    for label, ks in kinds.items():
        firsts = [k.first_refused for k in ks if k.first_refused is not None]
        first = (
            f"{100 * statistics.fmean(firsts):.0f} % ({len(firsts)} of {len(per_seed)})"
            if firsts
            else "never"
        )
        out.append(
            f"| {policy} | {allocated:.2f} | {label} | {statistics.fmean(k.arrived for k in ks):.0f} | "
            f"{statistics.fmean(k.refused for k in ks):.0f} | "
            f"{100 * statistics.fmean(k.refused_milli for k in ks) / total_milli:.2f} | {first} |"
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument(
        "--variants", default="gpushare60,gpushare80", help="comma-separated: " + ", ".join(VARIANTS)
    )
    ap.add_argument("--seeds", type=benchcli.seeds, default="42-51")
    ap.add_argument("--workers", type=benchcli.count, default=2)
    ap.add_argument("--policy", action="append", choices=[p.value for p in Policy])
    args = ap.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        ap.error(
            f"--variants: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(VARIANTS)}"
        )
    if trace_missing(args.data, "sim_refusals"):
        return 0
    policies = tuple(Policy(p) for p in (args.policy or ["fgd", "kubegpu", "kubegpu-plan"]))
    seeds = args.seeds
    for variant in variants:
        workload = variant_workload(args.data, variant)
        runs = run_all(workload, SimRequest(policies=policies, seeds=seeds, workers=args.workers))
        total = workload.total_gpu_milli
        print(f"\n{variant}, seeds {seeds[0]}-{seeds[-1]} ({len(seeds)}), 130 % arrived\n")
        print(
            "| policy | allocated GPU % | pods | arrived | refused | their GPU, % of the cluster's |"
            " first refused at (% of the arrivals; seeds) |"
        )
        print("|---|---|---|---|---|---|---|")
        for policy in policies:
            allocated = statistics.fmean(100 * int(r.allocated_milli[-1]) / total for r in runs[policy])
            per_seed = [refused_by_kind(workload, run) for run in runs[policy]]
            for line in rows(policy.value, allocated, per_seed, total):
                print(line)
    return 0


if __name__ == "__main__":
    benchcli.run_main(main)
