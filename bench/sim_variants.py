"""kubegpu vs FGD on workload variants of the default trace (more CPU-only, shared, multi-GPU, pinned pods).

The FGD paper's variant pod lists are not provided, so the variants are generated from the default
pod list with ``kubegpu sim variant``'s generator (``kubegpu.sim.variants``) into a temporary folder.
For each variant it prints the allocation at 130 % arrived (mean +- std over the seeds) of ``fgd`` and
``kubegpu`` under both tie modes. Without the trace it prints why and exits 0.

    python bench/sim_variants.py [--data DIR] [--seeds 42-51] [--workers 2]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import benchcli
from openb import NODES, PODS, default_data_dir, trace_missing

from kubegpu.sim.replay import TieMode
from kubegpu.sim.run import SimRequest, run_all, summarise_all
from kubegpu.sim.scoring import Policy
from kubegpu.sim.trace import load_nodes, load_pods, load_trace, write_pods
from kubegpu.sim.variants import VariantKnobs, make_variant, pod_mix
from kubegpu.sim.workload import prepare

VARIANTS = {
    "cpu-only 30 %": VariantKnobs(cpu_only=0.30, seed=1),
    "shared 80 % of GPU pods": VariantKnobs(shared=0.80, seed=2),
    "multi-GPU 20 % of GPU pods": VariantKnobs(multi_gpu=0.20, seed=3),
    "model-pinned 33 % of GPU pods": VariantKnobs(gpu_spec=0.33, seed=4),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--seeds", type=benchcli.seeds, default="42-51")
    ap.add_argument("--workers", type=benchcli.count, default=2)
    args = ap.parse_args()
    if trace_missing(args.data, "sim_variants"):
        return 0
    nodes_path, pods_path = args.data / NODES, args.data / PODS
    seeds = args.seeds
    nodes, pods = load_nodes(nodes_path), load_pods(pods_path)
    print(
        "| variant | cpu-only / shared / multi / pinned | fgd node-order | fgd random | kubegpu node-order "
        "| kubegpu random |"
    )
    print("|---|---|---|---|---|---|")
    worse = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, knobs in VARIANTS.items():
            path = Path(tmp) / "pods.csv"
            made = make_variant(pods, nodes, knobs)
            write_pods(path, made)
            workload = prepare(load_trace(nodes_path, path))
            mix = pod_mix(made)
            cells = []
            best: dict[tuple[Policy, TieMode], float] = {}
            for policy in (Policy.FGD, Policy.KUBEGPU):
                for tie in (TieMode.NODE_ORDER, TieMode.RANDOM):
                    request = SimRequest(policies=(policy,), seeds=seeds, tie=tie, workers=args.workers)
                    (summary,) = summarise_all(run_all(workload, request), workload, 1.3)
                    mean, std = summary.at(130)
                    best[(policy, tie)] = mean or 0.0
                    cells.append("-" if mean is None else f"{mean:.2f} ± {std:.2f}")
            if best[(Policy.KUBEGPU, TieMode.RANDOM)] < best[(Policy.FGD, TieMode.NODE_ORDER)]:
                worse += 1
            shares = " / ".join(
                f"{mix[k] * 100:.0f}%" for k in ("cpu_only", "shared", "multi_gpu", "gpu_spec")
            )
            print(f"| {name} | {shares} | " + " | ".join(cells) + " |", flush=True)
    return 1 if worse else 0


if __name__ == "__main__":
    benchcli.run_main(main)
