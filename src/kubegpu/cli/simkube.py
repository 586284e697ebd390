"""`kubegpu sim kube`: a seed's arrivals replayed through a real API server and scheduler (kwok nodes).

Thin layer over ``kubegpu.sim.kube``: load the trace, connect, create the fake nodes, run the replay
with progress lines on stderr, compare with ``kubegpu sim`` for a policy, print a summary or JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from kubegpu.errors import InputError


def compare_with_sim(run: Any, workload: Any, policy: str, inflate: float) -> dict[str, Any]:
    """The sim's figures for the same seed and ``policy``, and how many placements differ."""
    from kubegpu.sim.kube import differences
    from kubegpu.sim.replay import replay
    from kubegpu.sim.scoring import Policy

    try:
        chosen = Policy(policy)
    except ValueError:
        raise InputError(f"--compare {policy!r}: not a policy of kubegpu sim") from None
    sim = replay(workload, chosen, run.seed, inflate=inflate)
    n = run.count
    nodes = [
        workload.node_names[int(r)] if ok else None
        for r, ok in zip(sim.node[:n], sim.placed[:n], strict=True)
    ]
    total = workload.total_gpu_milli
    from kubegpu.sim.curves import discrete_curve

    curve = discrete_curve(sim.arrived_milli[:n] / total * 100, sim.allocated_milli[:n] / total * 100, 131)
    return {
        "policy": policy,
        "allocated_pct_at_130": _num(curve[130]),
        "allocated_pct_end": round(float(sim.allocated_milli[n - 1]) / total * 100, 2) if n else 0.0,
        "placed": int(sim.placed[:n].sum()),
        "different_placements": differences(run, nodes, list(sim.gpus[:n])),
    }


def _num(value: float) -> float | None:
    import math

    return None if math.isnan(value) else round(float(value), 2)  # NaN: no arrival near that point


def run_json(run: Any) -> dict[str, Any]:
    from kubegpu.sim.kube import Outcome

    curve = run.curve()
    return {
        "scheduler": run.scheduler_name,
        "seed": run.seed,
        "pods": run.count,
        "placed": run.placed_count,
        "unschedulable": run.failed(Outcome.UNSCHEDULABLE),
        "failed_admission": run.failed(Outcome.ADMISSION),
        "running_seen": run.running,
        "allocated_pct_at_130": _num(curve[130]),
        "allocated_pct_end": round(run.allocated_pct, 2),
        "seconds": round(run.seconds, 1),
        "pods_per_second": round(run.pods_per_second, 1),
    }


def run_kube(
    *,
    nodes: Path | None,
    pods: Path | None,
    kubeconfig: Path | None,
    scheduler_name: str,
    seed: int,
    inflate: float,
    extender: bool,
    compare: str | None,
    limit: int | None,
    window: int,
    namespace: str,
    keep_nodes: bool,
    as_json: bool,
    whole_milli: bool = False,
) -> None:
    from kubegpu.kubeapi import KubeApi
    from kubegpu.sim.kube import KubeReplay, KubeReplayConfig
    from kubegpu.sim.trace import load_trace
    from kubegpu.sim.workload import prepare

    if limit is not None and limit < 1:
        raise InputError(f"--limit must be at least 1, got {limit}")
    from kubegpu.sim.workload import check_inflate

    check_inflate(inflate)
    from kubegpu.sim.openb import resolve

    files = resolve(nodes, pods)
    trace = load_trace(files.nodes, files.pods)
    workload = prepare(trace)
    api = KubeApi(kubeconfig=str(kubeconfig) if kubeconfig else None)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    engine = KubeReplay(api, trace, workload, say=say)
    engine.create_nodes()
    config = KubeReplayConfig(
        scheduler_name=scheduler_name,
        seed=seed,
        inflate=inflate,
        namespace=namespace,
        window=window,
        limit=limit,
        milli_on_whole=whole_milli,
    )
    try:
        run = engine.run(config, extender=extender)
    finally:
        engine.clear_pods(namespace)
        if not keep_nodes:
            engine.delete_nodes()
    doc = run_json(run)
    if compare:
        doc["sim"] = compare_with_sim(run, workload, compare, inflate)
    if as_json:
        print(json.dumps(doc))
        return
    for key, value in doc.items():
        if key != "sim":
            print(f"{key:20} {value}")
    if compare:
        for key, value in doc["sim"].items():
            print(f"sim {key:16} {value}")
