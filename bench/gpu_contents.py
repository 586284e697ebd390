"""What each GPU holds at the end: the online bound's LP against one policy's replay.

The online bound (``kubegpu.sim.online_bound``) is an LP over per-GPU configurations; where it has its value
(``lp_at_bound``: the pivot interval, or with ``--pivots 2-5`` the joint box of the pivots),
``configuration_use`` says how many GPUs each configuration fills and ``placed_per_shape`` how many pods of
each shape it places. This script prints both beside one replay of the same arrivals, the rows that differ
most first, and when each stops accepting the pivot (the LP: after its last placed pivot; the replay: its
first refusal). On openb's sharing-heavy variants the difference is mostly GPUs that hold one 810-milli pod
and nothing else (docs/research/placement-issue-30.md, "The bound given a policy's CPU-only pods"); against
the five-pivot bound (``--pivots 5 --whole-pivots``, the tightest, 2-3 minutes a seed) the LP places every
share but the 810s (docs/research/placement-issue-30.md, "Hindsight prices"). With ``--timeline`` it also
prints how the replay filled the cluster (``kubegpu.sim.idle.fill_timeline``): at every 5 % of the arrivals,
the GPUs no pod has touched, the GPUs holding a single share, and the pods refused so far
(docs/research/placement-issue-30.md, "Opening GPUs for the shares to come"). Without the trace it prints
why and exits 0.

    python bench/gpu_contents.py [--data DIR] [--variant gpushare100] [--seed 42]
        [--policy kubegpu-plan] [--top 12] [--pivots 1-5] [--whole-pivots] [--timeline]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import benchcli
import numpy as np
from openb import VARIANTS, default_data_dir, trace_missing, variant_workload

from kubegpu.sim.bound import Column, configuration_use, placed_per_shape
from kubegpu.sim.idle import fill_timeline
from kubegpu.sim.online_bound import MAX_PIVOTS, lp_at_bound, online_bound
from kubegpu.sim.replay import SeedRun, replay
from kubegpu.sim.scoring import MILLI, Policy
from kubegpu.sim.workload import Workload, arrivals


def _label(content: tuple[int, ...]) -> str:
    return " + ".join(str(m) for m in content) if content else "nothing"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--variant", default="gpushare100")
    ap.add_argument("--seed", type=benchcli.seed, default=42)
    ap.add_argument("--policy", default=Policy.KUBEGPU_PLAN.value)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--pivots", type=int, default=1, help=f"the online bound's pivots, 1-{MAX_PIVOTS}")
    ap.add_argument("--whole-pivots", action="store_true", help="whole-GPU shapes among the pivots")
    ap.add_argument("--timeline", action="store_true", help="also how the replay filled the cluster")
    args = ap.parse_args()
    if trace_missing(args.data, "gpu_contents"):
        return 0
    policies = [p.value for p in Policy]
    if (
        args.variant not in VARIANTS
        or args.policy not in policies
        or args.top < 1
        or not 1 <= args.pivots <= MAX_PIVOTS
    ):
        print(
            f"gpu_contents: --variant from {', '.join(VARIANTS)}, --policy from {', '.join(policies)},"
            f" --top at least 1, --pivots 1 to {MAX_PIVOTS}"
        )
        return 2
    workload = variant_workload(args.data, args.variant)
    sequence = workload.pod_shape[arrivals(workload, args.seed, 1.3)]
    bound = online_bound(workload, args.seed, pivots=args.pivots, whole_pivots=args.whole_pivots)
    if not bound.pivot_shapes:
        print(f"gpu_contents: {args.variant} seed {args.seed} has no pivot share: nothing to compare")
        return 0
    pivot = bound.pivot_shapes[0]
    pool: list[Column] = []
    problem, lp = lp_at_bound(workload, args.seed, bound, pool=pool)
    planned = configuration_use(problem, pool, lp)
    num_gpu = np.array([r.num_gpu for r in workload.shape_requests], dtype=np.int64)
    planned_pods = placed_per_shape(problem, pool, lp, num_gpu)

    run = replay(workload, Policy(args.policy), args.seed, inflate=1.3)
    held: dict[tuple[int, int], list[int]] = {}
    for i in np.flatnonzero(run.placed):
        request = workload.shape_requests[int(run.shape[i])]
        milli = request.gpu_milli if request.num_gpu == 1 else MILLI
        for gpu in run.gpus[i]:
            held.setdefault((int(run.node[i]), int(gpu)), []).append(milli)
    actual: dict[tuple[int, ...], float] = {}
    for content in held.values():
        key = tuple(sorted(content, reverse=True))
        actual[key] = actual.get(key, 0.0) + 1.0
    actual[()] = float(workload.total_gpus - len(held))

    total = float(workload.total_gpus)
    at = np.flatnonzero(sequence == pivot)
    last = round(planned_pods.get(pivot, 0.0))  # the LP's pivots placed: it takes the first ones
    lp_stop = (int(at[last]) if last < len(at) else len(sequence)) / len(sequence)
    refused = at[~run.placed[at]]
    run_stop = (int(refused[0]) if len(refused) else len(sequence)) / len(sequence)
    pivot_milli = workload.shape_requests[pivot].gpu_milli

    def idle(use: dict[tuple[int, ...], float]) -> float:
        return 100.0 * sum(n * (MILLI - sum(k)) for k, n in use.items()) / (total * MILLI)

    labels = workload.shape_labels
    box = bound.joint_placed or ((bound.placed_low, bound.placed_high),)
    where = ", ".join(
        f"{low}-{high} of {int((sequence == s).sum())} {labels[s]}"
        for s, (low, high) in zip(bound.pivot_shapes, box, strict=True)
    )
    lp_is = (
        "the offline LP: no pivot's bound is lower"
        if bound.offline_milli <= bound.bound_milli
        else f"{len(bound.pivot_shapes)} pivot(s); the LP of {where} placed"
    )
    print(
        f"{args.variant}, seed {args.seed}, 130 % arrived: the online bound {bound.bound_pct:.3f} %"
        f" ({lp_is}), {args.policy} {100.0 * int(run.allocated_milli[-1]) / (total * MILLI):.3f} %"
    )
    print(
        f"the {pivot_milli}-milli pivot accepted until {100 * lp_stop:.1f} % of the arrivals by the LP,"
        f" {100 * run_stop:.1f} % by {args.policy}\n"
    )
    print(
        f"| GPU holds | the online bound's LP | {args.policy} |",
        "difference x idle milli, % of the cluster |",
    )
    print("|---|---|---|---|")
    keys = sorted(
        set(planned) | set(actual),
        key=lambda k: -abs((actual.get(k, 0.0) - planned.get(k, 0.0)) * (MILLI - sum(k))),
    )
    for key in keys[: args.top]:
        a, p = actual.get(key, 0.0), planned.get(key, 0.0)
        cost = 100.0 * (a - p) * (MILLI - sum(key)) / (total * MILLI)
        print(f"| {_label(key)} | {p:,.0f} | {a:,.0f} | {cost:+.2f} |")
    print(f"| idle milli, % of the cluster | {idle(planned):.2f} | {idle(actual):.2f} | |")
    whole = (MILLI,)
    print(
        f"\nGPUs holding whole-GPU pods: {planned.get(whole, 0.0):,.0f} in the LP,"
        f" {actual.get(whole, 0.0):,.0f} in the replay"
    )
    _print_shapes(workload, sequence, run, planned_pods, args.top)
    if args.timeline:
        _print_timeline(workload, run)
    return 0


def _print_shapes(
    workload: Workload, sequence: np.ndarray, run: SeedRun, planned: dict[int, float], top: int
) -> None:
    """Pods placed per GPU shape, the LP against the replay, the largest GPU differences first."""
    arrived = np.bincount(sequence, minlength=len(workload.shape_requests))
    placed = np.bincount(run.shape[run.placed], minlength=len(workload.shape_requests))
    total = float(workload.total_gpus * MILLI)
    rows = []
    for shape, request in enumerate(workload.shape_requests):
        if request.num_gpu == 0 or arrived[shape] == 0:
            continue
        milli = request.num_gpu * request.gpu_milli
        lp = planned.get(shape, 0.0)
        rows.append((100.0 * (int(placed[shape]) - lp) * milli / total, shape, lp))
    rows.sort(key=lambda row: -abs(row[0]))
    print(f"\nGPU pods placed per shape (the {top} largest differences)\n")
    print(f"| shape | arrived | the LP | {run.policy.value} | difference, % of the cluster's GPU |")
    print("|---|---|---|---|---|")
    for diff, shape, lp in rows[:top]:
        print(
            f"| {workload.shape_labels[shape]} | {int(arrived[shape]):,} | {lp:,.0f} |"
            f" {int(placed[shape]):,} | {diff:+.2f} |"
        )


def _print_timeline(workload: Workload, run: SeedRun) -> None:
    def label(sid: int) -> str:
        r = workload.shape_requests[sid]
        cores = f"{r.cpu_milli / 1000:g}c"
        if r.num_gpu == 0:
            return f"CPU-only {cores}"
        if r.num_gpu == 1 and r.gpu_milli < MILLI:
            return f"{r.gpu_milli} m {cores}"
        return f"{r.num_gpu} GPU {cores}"

    print(f"\n{run.policy.value} as the arrivals come (refused: so far, the five most refused shapes)\n")
    print("| arrived | untouched GPUs | GPUs holding one share (milli: GPUs) | refused so far |")
    print("|---|---|---|---|")
    for point in fill_timeline(workload, run):
        lone = sorted(point.lone_shares.items(), key=lambda kv: -kv[1])[:5]
        refused = sorted(point.refused.items(), key=lambda kv: -kv[1])[:5]
        print(
            f"| {100 * point.share_of_arrivals:.0f} % | {point.untouched_gpus:,} |"
            f" {', '.join(f'{m}: {n}' for m, n in lone) or '-'} |"
            f" {', '.join(f'{label(sid)}: {n}' for sid, n in refused) or '-'} |"
        )


if __name__ == "__main__":
    benchcli.run_main(main)
