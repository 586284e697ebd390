"""The openb trace replayed on the real control plane: kwok nodes, a real kube-scheduler, three setups.

Brings up the e2e rig (building its binaries if needed; run it under the rig lock), starts kwok,
creates one kwok node per openb GPU node, then replays one seed's arrivals (the sim's own arrival
code, up to 130 % of the GPUs) with each scheduler in turn, through a second kube-scheduler process
built from the rig's binaries (`Rig.start_extra_scheduler`):

* `default`       -- stock kube-scheduler, default profile (what users run today);
* `mostallocated` -- stock, NodeResourcesFit MostAllocated on nvidia.com/gpu and kubegpu.io/gpu-milli
                     (weight 3 each, cpu and memory 1), BalancedAllocation off, all nodes scored
                     (the best bin-packing users can configure today);
* `kubegpu-plan` (the extender's default), `kubegpu`, `fgd` -- kube-scheduler +
                     `kubegpu extender --policy P --workload <the trace's pods>`,
                     configured as docs/extender.md says (filter + bind, nodeCacheCapable,
                     percentageOfNodesToScore 100), every pod sent to the extender.

Prints a Markdown table (allocated GPU % at 130 % arrived, `kubegpu sim`'s figure for the same policy
and seed, the difference, pods placed/failed, pods/s, wall time) and writes a plot. Stock schedulers
only count GPUs per node, so the replay plays each node's device plugin (docs/sim.md "kube engine").

    flock /tmp/kubegpu-rig.lock .venv/bin/python bench/kube_replay.py [--seed 42] [--limit N]
        [--scheduler default --scheduler kubegpu ...] [--plot docs/kube_replay.png] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import benchcli
import numpy as np
from openb import NODES, PODS, default_data_dir, trace_missing

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.rig.extender import ExtenderProcess, extender_entry  # noqa: E402
from tests.e2e.rig.rig import Rig, RigError, build, preflight  # noqa: E402

from kubegpu.errors import InputError  # noqa: E402
from kubegpu.kubeapi import KubeApi  # noqa: E402
from kubegpu.sim.curves import discrete_curve  # noqa: E402
from kubegpu.sim.kube import KubeReplay, KubeReplayConfig, KubeRun, Outcome, differences  # noqa: E402
from kubegpu.sim.plot import check_plot_path  # noqa: E402
from kubegpu.sim.replay import replay  # noqa: E402
from kubegpu.sim.scoring import Policy  # noqa: E402
from kubegpu.sim.trace import load_trace  # noqa: E402
from kubegpu.sim.workload import prepare  # noqa: E402

SCHEDULERS = ("default", "mostallocated", "kubegpu-plan", "kubegpu", "fgd")
EXTENDED = ("kubegpu-plan", "kubegpu", "fgd")  # kube-scheduler + `kubegpu extender --policy KIND`
# the stock setups again, with whole-GPU pods asking kubegpu.io/gpu-milli (1000 x k) as well, so that
# the node-level count of GPU milli agrees with the whole GPUs taken (not run unless asked for)
VARIANTS = ("default-milli", "mostallocated-milli")
CLIENT = {"qps": 500, "burst": 1000}
NO_PREEMPTION = {"postFilter": {"disabled": [{"name": "DefaultPreemption"}]}}  # equal priorities: no victims


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def scheduler_config(kind: str, url: str | None = None) -> dict[str, Any]:
    """The extra kube-scheduler's configuration for one setup; its profile's schedulerName is ``kind``."""
    if kind.endswith("-milli"):
        config = scheduler_config(kind.removesuffix("-milli"))
        config["profiles"][0]["schedulerName"] = kind
        return config
    if kind == "default":
        return {"clientConnection": CLIENT, "profiles": [{"schedulerName": kind, "plugins": NO_PREEMPTION}]}
    if kind == "mostallocated":
        strategy = {
            "type": "MostAllocated",
            "resources": [
                {"name": "cpu", "weight": 1},
                {"name": "memory", "weight": 1},
                {"name": "nvidia.com/gpu", "weight": 3},
                {"name": "kubegpu.io/gpu-milli", "weight": 3},
            ],
        }
        return {
            "clientConnection": CLIENT,
            "percentageOfNodesToScore": 100,
            "profiles": [
                {
                    "schedulerName": kind,
                    "plugins": {
                        **NO_PREEMPTION,
                        "score": {"disabled": [{"name": "NodeResourcesBalancedAllocation"}]},
                    },
                    "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": strategy}}],
                }
            ],
        }
    if url is None:
        raise ValueError(f"the {kind} setup needs the extender's URL")
    return {
        "clientConnection": CLIENT,
        "percentageOfNodesToScore": 100,
        "profiles": [{"schedulerName": kind, "plugins": NO_PREEMPTION}],
        # no managedResources: every pod goes to the extender, CPU-only pods too (the sim places
        # those with the policy as well)
        "extenders": [extender_entry(url)],
    }


def sim_figures(workload: Any, policy: str, seed: int, inflate: float, n: int) -> dict[str, Any]:
    sim = replay(workload, Policy(policy), seed, inflate=inflate)
    total = workload.total_gpu_milli
    curve = discrete_curve(sim.arrived_milli[:n] / total * 100, sim.allocated_milli[:n] / total * 100, 131)
    nodes = [
        workload.node_names[int(r)] if ok else None
        for r, ok in zip(sim.node[:n], sim.placed[:n], strict=True)
    ]
    return {
        "curve": curve,
        "end_pct": float(sim.allocated_milli[n - 1]) / total * 100,
        "nodes": nodes,
        "gpus": list(sim.gpus[:n]),
    }


def fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None or np.isnan(value) else f"{value:.{digits}f}"


def headline(curve: np.ndarray, end_pct: float) -> float:
    """Allocated GPU % at 130 % arrived (the sim's curve point), else after the last arrival (short runs)."""
    return end_pct if np.isnan(curve[130]) else float(curve[130])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=default_data_dir())
    parser.add_argument("--seed", type=benchcli.seed, default=42)
    parser.add_argument("--inflate", type=benchcli.inflate, default=1.3)
    parser.add_argument(
        "--limit", type=benchcli.count, default=None, help="only the first N arrivals (a short run)"
    )
    parser.add_argument(
        "--scheduler",
        action="append",
        choices=SCHEDULERS + VARIANTS,
        help=f"repeatable; default: {', '.join(SCHEDULERS)}",
    )
    parser.add_argument("--window", type=benchcli.count, default=32)
    parser.add_argument("--plot", type=Path, default=None, help="PNG: allocated GPU %% vs arrived %%")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = parser.parse_args()
    # the run takes a quarter of an hour or more: refuse output paths it could not write now, not after
    try:
        if args.plot is not None:
            check_plot_path(args.plot)
        if args.json is not None and (args.json.is_dir() or not args.json.parent.is_dir()):
            raise InputError(f"--json {args.json}: not a file in an existing folder")
    except InputError as exc:
        print(f"kube_replay: {exc}", file=sys.stderr)
        return 2
    if trace_missing(args.data, "kube_replay"):
        return 0
    # a background job started by a shell ignores SIGINT: make SIGINT and SIGTERM stop the run with its
    # clean-up (scheduler, extender, kwok, the rig if it was started here)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t_all = time.monotonic()
    trace = load_trace(args.data / NODES, args.data / PODS)
    workload = prepare(trace)
    rig = Rig()
    started_here = False
    logs = Path(os.environ.get("KUBEGPU_REPLAY_LOGS", "/tmp/kubegpu-kube-replay"))
    logs.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    try:
        if not rig.is_up():
            problems = preflight(rig.paths, binaries=False)
            if problems:
                raise SystemExit("the rig cannot start:\n" + "\n".join(f"  - {p}" for p in problems))
            say(f"rig build (cached binaries are reused): {build(rig.paths):.1f} s")
            rig.up()
            started_here = True
        rig.start_kwok()
        api = KubeApi(kubeconfig=str(rig.paths.kubeconfig))
        engine = KubeReplay(api, trace, workload, say=say)
        nodes_s = engine.create_nodes()
        for kind in args.scheduler or SCHEDULERS:
            t0 = time.monotonic()
            extender = None
            if kind in EXTENDED:
                extender = ExtenderProcess(
                    rig.paths.kubeconfig,
                    logs / f"extender-{kind}.log",
                    "--policy",
                    kind,
                    "--workload",
                    str(args.data / PODS),
                    "--log-level",
                    "warning",
                    "--scheduler-name",  # the extender binds only pods of the schedulers it serves
                    kind,
                )
                extender.start()
            try:
                rig.start_extra_scheduler(scheduler_config(kind, extender.url if extender else None))
                config = KubeReplayConfig(
                    scheduler_name=kind,
                    seed=args.seed,
                    inflate=args.inflate,
                    window=args.window,
                    limit=args.limit,
                    milli_on_whole=kind.endswith("-milli"),
                )
                run: KubeRun = engine.run(config, extender=extender is not None)
            finally:
                rig.stop_extra_scheduler()
                if extender is not None:
                    extender.stop()
            engine.clear_pods(config.namespace)
            wall = time.monotonic() - t0
            curve = run.curve()
            row: dict[str, Any] = {
                "scheduler": kind,
                "allocated_pct_at_130": headline(curve, run.allocated_pct),
                "curve": curve,
                "placed": run.placed_count,
                "unschedulable": run.failed(Outcome.UNSCHEDULABLE),
                "admission": run.failed(Outcome.ADMISSION),
                "pods": run.count,
                "running_seen": run.running,
                "pods_per_second": run.pods_per_second,
                "seconds": run.seconds,
                "wall_s": wall,
            }
            if extender is not None:
                sim = sim_figures(workload, kind, args.seed, args.inflate, run.count)
                row["sim_pct"] = headline(sim["curve"], sim["end_pct"])
                row["sim_curve"] = sim["curve"]
                row["different"] = differences(run, sim["nodes"], sim["gpus"])
            rows.append(row)
            say(
                f"{kind}: {row['allocated_pct_at_130']:.2f} % allocated, "
                f"{run.placed_count}/{run.count} placed"
            )
        engine.delete_nodes()
    except RigError as exc:
        raise SystemExit(f"rig: {exc}") from exc
    finally:
        rig.stop_kwok()
        if started_here and os.environ.get("KUBEGPU_RIG_KEEP") != "1":
            rig.down()
    total_s = time.monotonic() - t_all

    n = rows[0]["pods"] if rows else 0
    print(
        f"### openb on the real control plane: seed {args.seed}, {len(engine.gpu_nodes())} kwok nodes, "
        f"{n} arrivals (inflate {args.inflate}{'' if args.limit is None else f', first {args.limit}'})\n"
    )
    head = ["scheduler", "allocated GPU % at 130 %", "`kubegpu sim` (same policy, seed)", "difference (pp)"]
    head += ["placements ≠ sim", "pods placed", "failed (unschedulable + admission)", "pods/s", "wall s"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        sim_pct = r.get("sim_pct")
        diff = None if sim_pct is None else r["allocated_pct_at_130"] - sim_pct
        cells = [
            f"`{r['scheduler']}`",
            fmt(r["allocated_pct_at_130"]),
            fmt(sim_pct),
            "—" if diff is None else f"{diff:+.2f}",
            str(r.get("different", "—")),
            str(r["placed"]),
            f"{r['unschedulable'] + r['admission']} ({r['unschedulable']} + {r['admission']})",
            fmt(r["pods_per_second"], 1),
            fmt(r["wall_s"], 0),
        ]
        print("| " + " | ".join(cells) + " |")
    print(f"\nnodes created and Ready in {nodes_s:.0f} s; whole run {total_s:.0f} s\n")
    if args.json:
        doc = [{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in r.items()} for r in rows]
        args.json.write_text(json.dumps({"seed": args.seed, "rows": doc}, indent=1) + "\n")
    if args.plot:
        plot(rows, args.plot, args.seed)
    return 0


def plot(rows: list[dict[str, Any]], path: Path, seed: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (full, zoom) = plt.subplots(1, 2, figsize=(12, 4.8))
    x = np.arange(131)
    for r in rows:
        (line,) = full.plot(x, r["curve"], label=f"{r['scheduler']} (kube)", linewidth=1.4)
        zoom.plot(x[80:], r["curve"][80:], color=line.get_color(), linewidth=1.4)
        if "sim_curve" in r:
            full.plot(
                x, r["sim_curve"], color=line.get_color(), linestyle=":", label=f"{r['scheduler']} (sim)"
            )
            zoom.plot(x[80:], r["sim_curve"][80:], color=line.get_color(), linestyle=":")
    full.plot(x, np.minimum(x, 100), color="grey", linewidth=0.8, linestyle="--", label="ideal")
    for ax in (full, zoom):
        ax.set_xlabel("arrived GPU demand (% of capacity)")
        ax.set_ylabel("allocated GPU (%)")
        ax.grid(alpha=0.3)
    full.set_title(f"openb seed {seed} on kwok nodes: real kube-scheduler")
    zoom.set_title("from 80 % arrived")
    full.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    benchcli.run_main(main)
