"""Every `kubegpu sim` table of docs/benchmarks.md, regenerated from one script.

Sections (``--only`` picks some, comma-separated; default: all):

* ``fidelity``: every policy, seeds 42-51, both tie modes, next to the FGD paper's published means;
* ``ordering``: ``kubegpu`` against FGD with and without the fixed CRC-32 node order, under both tie
  modes, so the score's own gain and the order's gain are reported apart (plus held-out seeds);
* ``multigpu``: multi-GPU link cost per policy (from the fidelity runs);
* ``variants``: FGD and ``kubegpu`` on workload variants of the default trace (sharing-heavy ones
  included), both tie modes;
* ``speed``: ``bench/sim_speed.py``'s measurements (whole process, through the command line).

    python bench/sim_tables.py [--data DIR] [--seeds 42-51] [--held-out 100-109] [--workers 2]
        [--only fidelity,ordering,multigpu,variants,speed]

Without the trace it prints why and exits 0. Numbers are means over the seeds of the allocation
(% of GPU capacity) at 130 % arrived demand, +- the std over seeds.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchcli
from openb import NODES, PODS, default_data_dir, trace_missing
from sim_fidelity import PUBLISHED, TOLERANCE

from kubegpu.sim.curves import PolicySummary
from kubegpu.sim.replay import Order, TieMode
from kubegpu.sim.run import SimRequest, run_all, summarise_all
from kubegpu.sim.scoring import Policy
from kubegpu.sim.trace import load_nodes, load_pods, load_trace, write_pods
from kubegpu.sim.variants import VariantKnobs, make_variant, pod_mix
from kubegpu.sim.workload import Workload, prepare

SECTIONS = ("fidelity", "ordering", "multigpu", "variants", "speed")
VARIANTS = {
    "shared 40 % of GPU pods": VariantKnobs(shared=0.40, seed=0),
    "shared 60 % of GPU pods": VariantKnobs(shared=0.60, seed=0),
    "shared 80 % of GPU pods": VariantKnobs(shared=0.80, seed=0),
    "shared 100 % of GPU pods": VariantKnobs(shared=1.00, multi_gpu=0.0, seed=0),
    "cpu-only 30 %": VariantKnobs(cpu_only=0.30, seed=1),
    "multi-GPU 20 % of GPU pods": VariantKnobs(multi_gpu=0.20, seed=3),
    "model-pinned 33 % of GPU pods": VariantKnobs(gpu_spec=0.33, seed=4),
}


def _runs(  # noqa: PLR0917 - a private helper called positionally throughout this script
    workload: Workload,
    policies: tuple[Policy, ...],
    seeds: tuple[int, ...],
    tie: TieMode,
    workers: int,
    order: Order | None = None,
) -> dict[Policy, PolicySummary]:
    request = SimRequest(policies=policies, seeds=seeds, tie=tie, order=order, workers=workers)
    return {s.policy: s for s in summarise_all(run_all(workload, request), workload, 1.3)}


def _cell(s: PolicySummary | None, pct: int = 130) -> str:
    if s is None:
        return ""
    mean, std = s.at(pct)
    return "-" if mean is None else f"{mean:.2f} ± {std:.2f}"


def _mean(s: PolicySummary) -> float:
    mean, _ = s.at(130)
    return mean if mean is not None else float("nan")


def _table(header: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|---" * len(header) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(flush=True)


def fidelity(
    workload: Workload, seeds: tuple[int, ...], workers: int
) -> tuple[dict[Policy, PolicySummary], dict[Policy, PolicySummary]]:
    started = time.perf_counter()
    order = _runs(workload, tuple(Policy), seeds, TieMode.NODE_ORDER, workers)
    rand = _runs(workload, tuple(Policy), seeds, TieMode.RANDOM, workers)
    print(f"## Fidelity (seeds {seeds[0]}-{seeds[-1]}, {time.perf_counter() - started:.0f} s)\n")
    rows = []
    for policy in Policy:
        pub, s, r = PUBLISHED.get(policy), order[policy], rand[policy]
        a130, _ = s.at(130)
        a100, _ = s.at(100)
        tol = TOLERANCE.get(policy)
        diff = verdict = frag = ratio = ""
        if pub is not None and a130 is not None and tol is not None:
            diff = f"{a130 - pub[1]:+.2f}"
            verdict = f"{'ok' if abs(a130 - pub[1]) <= tol else 'OUT'} {tol}"
            frag = f"{pub[2]:.2f} / {s.frag_mean[90]:.2f}"
            ratio = f"{pub[3]:.1f} / {s.frag_ratio_mean[90]:.1f}"
        name = policy.value if policy is not Policy.KUBEGPU else f"**{policy.value}** (order {s.order.value})"
        rows.append(
            [
                name,
                "" if pub is None else f"{pub[1]:.2f}",
                _cell(s),
                diff,
                verdict,
                _cell(r),
                "" if pub is None else f"{pub[0]:.2f}",
                "-" if a100 is None else f"{a100:.2f}",
                frag,
                ratio,
            ]
        )
    _table(
        [
            "policy",
            "published @130",
            "node-order @130",
            "diff",
            "tol",
            "random-ties @130",
            "published @100",
            "node-order @100",
            "frag @90 pub/ours",
            "frag ratio @90 pub/ours",
        ],
        rows,
    )
    print(f"empty-cluster fragmentation: {order[Policy.FGD].empty_frag_pct:.3f} %\n")
    return order, rand


def ordering(
    workload: Workload,
    seeds: tuple[int, ...],
    held_out: tuple[int, ...],
    workers: int,
    base: tuple[dict[Policy, PolicySummary], dict[Policy, PolicySummary]] | None,
) -> None:
    started = time.perf_counter()
    pair = (Policy.FGD, Policy.KUBEGPU)
    cells: dict[tuple[Policy, Order, TieMode], PolicySummary] = {}
    for tie in TieMode:
        for order in Order:
            have = None
            if base is not None:
                known = base[0] if tie is TieMode.NODE_ORDER else base[1]
                have = {p: known[p] for p in pair if known[p].order is order}
            todo = tuple(p for p in pair if not have or p not in have)
            got = _runs(workload, todo, seeds, tie, workers, order) if todo else {}
            for p in pair:
                cells[(p, order, tie)] = (have or {}).get(p) or got[p]
    print(
        f"## kubegpu against FGD, node order and score apart (seeds {seeds[0]}-{seeds[-1]}, "
        f"{time.perf_counter() - started:.0f} s)\n"
    )
    rows = []
    for policy in pair:
        for order in Order:
            rows.append(
                [
                    f"{policy.value}, order {order.value}",
                    _cell(cells[(policy, order, TieMode.NODE_ORDER)]),
                    _cell(cells[(policy, order, TieMode.RANDOM)]),
                ]
            )
    _table(["policy, node order", "node-order ties", "random ties"], rows)
    rows = []
    for tie in TieMode:
        fgd_none = _mean(cells[(Policy.FGD, Order.NONE, tie)])
        fgd_crc = _mean(cells[(Policy.FGD, Order.CRC, tie)])
        kg_none = _mean(cells[(Policy.KUBEGPU, Order.NONE, tie)])
        kg_crc = _mean(cells[(Policy.KUBEGPU, Order.CRC, tie)])
        rows.append(
            [
                tie.value,
                f"{fgd_crc - fgd_none:+.2f}",
                f"{kg_none - fgd_none:+.2f}",
                f"{kg_crc - fgd_crc:+.2f}",
                f"{kg_crc - fgd_none:+.2f}",
            ]
        )
    _table(
        [
            "ties",
            "order's gain (fgd crc - fgd none)",
            "score's gain, no order (kubegpu none - fgd none)",
            "score's gain, both crc",
            "kubegpu default - fgd default",
        ],
        rows,
    )
    if held_out:
        rows = []
        for tie in TieMode:
            got = {}
            for order in Order:
                got[order] = _runs(workload, pair, held_out, tie, workers, order)
            rows.append(
                [tie.value]
                + [_cell(got[order][p]) for p in pair for order in Order]
                + [f"{_mean(got[Order.CRC][Policy.KUBEGPU]) - _mean(got[Order.NONE][Policy.FGD]):+.2f}"]
            )
        print(f"held-out seeds {held_out[0]}-{held_out[-1]}:\n")
        _table(
            [
                "ties",
                "fgd none",
                "fgd crc",
                "kubegpu none",
                "kubegpu crc (default)",
                "kubegpu default - fgd default",
            ],
            rows,
        )


def multigpu(order: dict[Policy, PolicySummary], rand: dict[Policy, PolicySummary]) -> None:
    print("## Multi-GPU link cost (node-order ties)\n")
    rows = []
    for policy, s in order.items():
        if s.comm_mean is None:
            continue
        rows.append(
            [
                policy.value,
                f"{s.comm_mean:.2f}",
                f"{s.comm_p95:.0f}",
                f"{(s.comm_split_share or 0) * 100:.1f} %",
                f"{s.comm_lowest_index_mean or 0:.2f}",
                f"{(s.comm_lowest_index_split_share or 0) * 100:.1f} %",
            ]
        )
    _table(
        ["policy", "cost mean", "cost p95", "split", "lowest-index: cost mean", "lowest-index: split"], rows
    )
    r = rand[Policy.FGD]
    if r.comm_mean is not None:
        print(
            f"fgd with random ties: {r.comm_mean:.2f} / {r.comm_p95:.0f} / "
            f"{(r.comm_split_share or 0) * 100:.1f} % (lowest-index split "
            f"{(r.comm_lowest_index_split_share or 0) * 100:.1f} %)\n"
        )


def variants(
    data: Path, seeds: tuple[int, ...], workers: int, *, sharing_only: bool = False, ties: tuple[TieMode, ...]
) -> int:
    """Print the variants table row by row (each row is minutes of replays); 1 if kubegpu < fgd."""
    nodes_path, pods_path = data / NODES, data / PODS
    nodes, pods = load_nodes(nodes_path), load_pods(pods_path)
    worse = 0
    print(f"## Workload variants (seeds {seeds[0]}-{seeds[-1]})\n")
    header = ["variant", "cpu-only / shared / multi / pinned"]
    for tie in ties:
        header += [f"fgd {tie.value}", f"kubegpu {tie.value}", f"kubegpu - fgd ({tie.value})"]
    print("| " + " | ".join(header) + " |")
    print("|---" * len(header) + "|", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, knobs in VARIANTS.items():
            if sharing_only and knobs.shared is None:
                continue
            path = Path(tmp) / "pods.csv"
            made = make_variant(pods, nodes, knobs)
            write_pods(path, made)
            workload = prepare(load_trace(nodes_path, path))
            mix = pod_mix(made)
            shares = " / ".join(
                f"{mix[k] * 100:.0f}%" for k in ("cpu_only", "shared", "multi_gpu", "gpu_spec")
            )
            row = [name, shares]
            for tie in ties:
                got = _runs(workload, (Policy.FGD, Policy.KUBEGPU), seeds, tie, workers)
                fgd, kg = got[Policy.FGD], got[Policy.KUBEGPU]
                if _mean(kg) < _mean(fgd):
                    worse += 1
                row += [_cell(fgd), _cell(kg), f"{_mean(kg) - _mean(fgd):+.2f}"]
            print("| " + " | ".join(row) + " |", flush=True)
    print()
    return worse


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--seeds", type=benchcli.seeds, default="42-51")
    ap.add_argument(
        "--held-out",
        type=benchcli.seeds_or_none,
        default="100-109",
        help="extra seeds for the ordering table ('' = none)",
    )
    ap.add_argument("--workers", type=benchcli.count, default=2)
    ap.add_argument("--only", default=",".join(SECTIONS))
    ap.add_argument("--sharing-only", action="store_true", help="variants: only the sharing-heavy ones")
    ap.add_argument(
        "--variant-ties",
        type=benchcli.tie_modes,
        default="node-order,random",
        help="variants: tie modes, comma-separated",
    )
    args = ap.parse_args()
    if trace_missing(args.data, "sim_tables"):
        return 0
    nodes, pods = args.data / NODES, args.data / PODS
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = only - set(SECTIONS)
    if unknown:
        print(
            f"sim_tables: unknown section(s) {', '.join(sorted(unknown))}; choose from {', '.join(SECTIONS)}"
        )
        return 2
    seeds, held_out = args.seeds, args.held_out
    workload = prepare(load_trace(nodes, pods))
    status = 0
    base = None
    if only & {"fidelity", "multigpu"}:
        base = fidelity(workload, seeds, args.workers)
        if "multigpu" in only:
            multigpu(*base)
    if "ordering" in only:
        ordering(workload, seeds, held_out, args.workers, base)
    if "variants" in only and variants(
        args.data,
        seeds,
        args.workers,
        sharing_only=args.sharing_only,
        ties=args.variant_ties,
    ):
        status = 1
    if "speed" in only:
        here = Path(__file__).resolve().parent
        print("## Speed\n", flush=True)
        speed = subprocess.run(
            [
                sys.executable,
                str(here / "sim_speed.py"),
                "--data",
                str(args.data),
                "--workers",
                str(args.workers),
            ],
            check=False,
        )
        status = status or speed.returncode
    return status


if __name__ == "__main__":
    benchcli.run_main(main)
