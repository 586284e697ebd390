"""Running many replays (policies x seeds), in worker processes when asked, and reporting them.

Every (policy, seed) pair is an independent job. With ``workers > 1`` the jobs run in a process
pool (forked where the platform allows, so the prepared trace is shared, not copied); results come
back in completion order and are regrouped per policy in seed order, so the output does not depend
on the number of workers.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kubegpu.errors import InputError
from kubegpu.sim.curves import PolicySummary, summarise
from kubegpu.sim.replay import Order, SeedRun, TieMode, replay
from kubegpu.sim.scoring import Policy
from kubegpu.sim.workload import Workload

__all__ = ["SimRequest", "parse_seeds", "report_json", "run_all"]

MAX_SEEDS = 1000


@dataclass(frozen=True, kw_only=True)
class SimRequest:
    """What to replay: policies, seeds, inflation target, tie mode, node order and worker count.

    ``order=None`` gives each policy its default order (``kubegpu``: crc; the others: none).
    """

    policies: tuple[Policy, ...]
    seeds: tuple[int, ...]
    inflate: float = 1.3
    tie: TieMode = TieMode.NODE_ORDER
    order: Order | None = None
    workers: int = 1


def parse_seeds(text: str) -> tuple[int, ...]:
    """``42``, ``42-51`` (inclusive) or ``42,44,47``; raises ``InputError`` otherwise."""
    seeds: list[int] = []
    for raw in text.split(","):
        part = raw.strip()
        try:
            if "-" in part[1:]:
                lo_text, hi_text = part.split("-", 1) if not part.startswith("-") else ("", part)
                lo, hi = int(lo_text), int(hi_text)
                if hi < lo:
                    raise InputError(f"--seeds {text!r}: range {part!r} ends before it starts")
                if hi - lo >= MAX_SEEDS:
                    raise InputError(f"--seeds {text!r}: {hi - lo + 1} seeds; at most {MAX_SEEDS}")
                seeds.extend(range(lo, hi + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            raise InputError(
                f"--seeds {text!r}: {part!r} is not a seed, a range like 42-51 or a list"
            ) from None
    if any(s < 0 for s in seeds):
        raise InputError(f"--seeds {text!r}: seeds are non-negative integers")
    if len(seeds) > MAX_SEEDS:
        raise InputError(f"--seeds {text!r}: {len(seeds)} seeds; at most {MAX_SEEDS}")
    if len(set(seeds)) != len(seeds):
        raise InputError(f"--seeds {text!r}: a seed is listed twice")
    return tuple(seeds)


_WORKLOAD: Workload | None = None


def _init(workload: Workload) -> None:
    global _WORKLOAD  # noqa: PLW0603 - the per-process copy of the prepared trace
    _WORKLOAD = workload
    # Ctrl-C reaches the whole process group: the parent alone answers it (and ends the workers),
    # so a worker neither prints a traceback nor finishes its replay first
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _job(args: tuple[Policy, int, float, TieMode, Order | None]) -> SeedRun:
    policy, seed, inflate, tie, order = args
    assert _WORKLOAD is not None
    return replay(_WORKLOAD, policy, seed, inflate=inflate, tie=tie, order=order)


def run_all(
    workload: Workload,
    request: SimRequest,
    *,
    on_done: Callable[[SeedRun], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> dict[Policy, list[SeedRun]]:
    """Run every (policy, seed) of ``request``; results per policy in seed order.

    ``on_done`` is called after each replay; ``on_progress(done, total)`` within a replay when
    running in this process (``workers == 1``).
    """
    if request.workers < 1:
        raise InputError(f"--workers must be at least 1, got {request.workers}")
    jobs = [(p, s) for p in request.policies for s in request.seeds]
    results: dict[tuple[Policy, int], SeedRun] = {}
    workers = min(request.workers, len(jobs), os.cpu_count() or 1) if len(jobs) > 1 else 1
    if workers <= 1:
        for policy, seed in jobs:
            run = replay(
                workload,
                policy,
                seed,
                inflate=request.inflate,
                tie=request.tie,
                order=request.order,
                on_progress=on_progress,
            )
            results[(policy, seed)] = run
            if on_done is not None:
                on_done(run)
    else:
        # imported here: a one-process run (the common one-seed case) does not pay for it
        import multiprocessing

        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        context = multiprocessing.get_context(method)
        pool = context.Pool(processes=workers, initializer=_init, initargs=(workload,))
        args = [(p, s, request.inflate, request.tie, request.order) for p, s in jobs]
        try:
            for run in pool.imap_unordered(_job, args):
                results[(run.policy, run.seed)] = run
                if on_done is not None:
                    on_done(run)
            pool.close()
        except BaseException:
            # Ctrl-C or a failed replay: end the workers now rather than wait for their replays
            pool.terminate()
            raise
        finally:
            pool.join()
    return {p: [results[(p, s)] for s in request.seeds] for p in request.policies}


def _num(value: float | None, digits: int = 2) -> float | None:
    if value is None or not np.isfinite(value):
        return None
    return round(float(value), digits)


def report_json(
    summaries: Sequence[PolicySummary], *, request: SimRequest, workload: Workload
) -> dict[str, Any]:
    """The ``--json`` document: ``{"policies": {NAME: {...}}, ...}`` (see docs/sim.md)."""
    policies: dict[str, Any] = {}
    for s in summaries:
        curve = [
            {
                "arrived_pct": x,
                "allocated_pct": _num(s.alloc_mean[x]),
                "allocated_pct_std": _num(s.alloc_std[x]),
                "frag_pct": _num(s.frag_mean[x]),
                "frag_ratio_pct": _num(s.frag_ratio_mean[x]),
            }
            for x in range(len(s.alloc_mean))
            if np.isfinite(s.alloc_mean[x])
        ]
        a100, _ = s.at(100)
        a130, sd130 = s.at(130)
        policies[s.policy.value] = {
            "order": s.order.value,
            "curve": curve,
            "allocated_pct_at_100": _num(a100),
            "allocated_pct_at_130": _num(a130),
            "allocated_pct_std_at_130": _num(sd130),
            "unallocated_gpus_at_100": _num(s.unallocated_gpus(100), 1),
            "unallocated_gpus_at_130": _num(s.unallocated_gpus(130), 1),
            "failed_pods_by_shape": {label: round(n, 2) for label, n in s.failed_by_shape},
            "multi_gpu_link_cost_mean": _num(s.comm_mean, 3),
            "multi_gpu_link_cost_p95": _num(s.comm_p95, 3),
            "multi_gpu_split_share": _num(s.comm_split_share, 4),
            "multi_gpu_link_cost_mean_lowest_index": _num(s.comm_lowest_index_mean, 3),
            "multi_gpu_split_share_lowest_index": _num(s.comm_lowest_index_split_share, 4),
            "seconds": round(s.seconds, 3),
            "pods_per_second": round(s.pods_per_second, 1),
        }
    empty = summaries[0].empty_frag_pct if summaries else None
    return {
        "policies": policies,
        "seeds": list(request.seeds),
        "inflate": request.inflate,
        "tie": request.tie.value,
        "order": "auto" if request.order is None else request.order.value,
        "total_gpus": workload.total_gpus,
        "nodes": len(workload.node_names),
        "pods": len(workload.pod_names),
        "typical_shapes": workload.typical.count,
        "empty_cluster_frag_pct": _num(empty, 3),
    }


def summarise_all(
    runs: dict[Policy, list[SeedRun]], workload: Workload, inflate: float
) -> list[PolicySummary]:
    """One summary per policy, curves from 0 to the inflation target (at least 130 % points)."""
    points = max(131, round(inflate * 100) + 1)
    return [summarise(r, workload.shape_labels, points) for r in runs.values()]
