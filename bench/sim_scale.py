"""How the simulator's replay grows with its input (issue 57, item 5): the openb trace ×N.

The trace's nodes and pods are replicated N times (``--scale``; node ``x`` becomes ``x``, ``x-r1``,
..., pod likewise), so the cluster and the arrivals both grow N-fold with the same mix; one seed of
each ``--policies`` is replayed (``kubegpu.sim.replay.replay``, in this process) at ×1 and at every
scale asked, and the table shows wall and CPU seconds (the machine may be shared: CPU seconds move
less with other jobs), arrivals, CPU microseconds per arrival and the growth over ×1 (linear work
keeps microseconds per arrival flat). ``PYTHONPATH=OTHER/src`` measures another checkout.
``--profile`` prints the top functions of a cProfile of the largest replay. The trace is read from
``--data DIR`` or ``KUBEGPU_OPENB_DIR`` (never from the repository); without it the script says so
and exits 0.

    .venv/bin/python bench/sim_scale.py [--data DIR] [--scale 1,10,30] [--policies kubegpu-plan]
        [--seed 42] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchcli
from openb import NODES, PODS, default_data_dir, trace_missing

from kubegpu.sim.replay import replay
from kubegpu.sim.scoring import Policy
from kubegpu.sim.trace import Trace, load_trace
from kubegpu.sim.workload import prepare


def scaled(trace: Trace, n: int) -> Trace:
    """``trace`` with every node and pod ``n`` times (copies named ``-r1`` ... ``-r{n-1}``)."""
    if n == 1:
        return trace
    nodes = tuple(replace(x, name=f"{x.name}-r{k}" if k else x.name) for k in range(n) for x in trace.nodes)
    pods = tuple(replace(p, name=f"{p.name}-r{k}" if k else p.name) for k in range(n) for p in trace.pods)
    return Trace(nodes=nodes, pods=pods, nodes_path=trace.nodes_path, pods_path=trace.pods_path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=default_data_dir(), help="the openb trace's folder")
    parser.add_argument("--scale", type=benchcli.counts, default=(1, 10, 30), help="e.g. 1,10,30")
    parser.add_argument("--policies", default="kubegpu-plan", help="comma-separated policy names")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--profile", action="store_true", help="cProfile the largest replay")
    args = parser.parse_args()
    if trace_missing(args.data, "sim_scale"):
        return 0
    base = load_trace(args.data / NODES, args.data / PODS)
    policies = [Policy(p.strip()) for p in args.policies.split(",") if p.strip()]
    scales = sorted({1, *args.scale})
    rows = []
    for n in scales:
        t = time.perf_counter()
        workload = prepare(scaled(base, n))
        prep_s = time.perf_counter() - t
        for policy in policies:
            profiler = cProfile.Profile() if args.profile and n == scales[-1] else None
            if profiler is not None:
                profiler.enable()
            cpu = time.process_time()
            run = replay(workload, policy, args.seed)
            cpu_s = time.process_time() - cpu
            if profiler is not None:
                profiler.disable()
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(18)
                print(out.getvalue(), file=sys.stderr)
            arrivals = len(run.placed)
            rows.append((n, len(workload.node_names), policy.value, prep_s, run.seconds, cpu_s, arrivals))
            print(
                f"[{time.strftime('%H:%M:%S')}] x{n}: {policy.value} {run.seconds:.1f} s, "
                f"{arrivals:,} arrivals",
                file=sys.stderr,
                flush=True,
            )
    base_s = {r[2]: r[5] for r in rows if r[0] == 1}
    base_a = {r[2]: r[6] for r in rows if r[0] == 1}
    print(
        "| scale | nodes | policy | prepare | replay (wall) | replay (CPU) | arrivals | CPU µs per arrival "
        "| CPU vs ×1 (input ×) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n, nodes, name, prep_s, seconds, cpu_s, arrivals in rows:
        growth = cpu_s / base_s[name]
        print(
            f"| ×{n} | {nodes:,} | {name} | {prep_s:.1f} s | {seconds:.1f} s | {cpu_s:.1f} s | {arrivals:,} "
            f"| {cpu_s / arrivals * 1e6:.0f} | ×{growth:.1f} (×{arrivals / base_a[name]:.0f}) |"
        )
    return 0


if __name__ == "__main__":
    benchcli.run_main(main)
