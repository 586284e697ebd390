"""Where a replay's idle GPU is at the end, and why no typical pod can use it.

At 130 % arrived the cluster is full; what stays idle is the policy's loss. Each GPU's free milli
at the end of a replay falls in one of three kinds, judged against the workload's typical 1-GPU
shapes (``Workload.typical``, FGD's target workload):

* **leftover**: no typical shape fits in it by milli (190 milli beside an 810-milli pod);
* **CPU-stranded**: a typical shape fits by milli and model, but none of those fits the node's
  free CPU as well (the node's cores ran out before its GPUs);
* **fits a typical share** (``usable_milli``): some typical shape fits it whole (milli, model and
  CPU), but none arrived after the room opened (mostly the rarer small shares).

``idle_by_class`` sums them per node class (GPUs and cores per node), beside each class's GPU and CPU use:
the per-class bound (``kubegpu.sim.bound``) balances CPU over a class as a whole, a replay has to do it node
by node (docs/research/placement-issue-30.md, "Where the rest of the gap is").  The other side of the same
loss is what the replay refused: ``refused_by_kind`` counts the refused pods per kind (CPU-only, shares,
whole-GPU pods by their GPU count), their GPU as a share of the cluster's, and how far into the arrivals
each kind was first refused (docs/research/placement-issue-30.md, "Multi-GPU pods when the untouched GPUs
run out").

Pure: numpy, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kubegpu.errors import InputError
from kubegpu.sim.replay import SeedRun
from kubegpu.sim.scoring import MILLI, IntArray
from kubegpu.sim.workload import Workload

__all__ = [
    "ClassIdle",
    "FillPoint",
    "FinalState",
    "KindRefusals",
    "fill_timeline",
    "final_state",
    "idle_by_class",
    "mean_by_class",
    "refused_by_kind",
]


@dataclass(frozen=True, kw_only=True, eq=False)
class FinalState:
    """Per node row of the node file: free milli per GPU (padded with 0), free CPU and memory."""

    gpu_free_milli: IntArray
    cpu_left_milli: IntArray
    memory_left_mib: IntArray


@dataclass(frozen=True, kw_only=True)
class ClassIdle:
    """One node class (GPUs and cores per node) at the end of a replay, in milli (CPU: milli-cores)."""

    gpus_per_node: int
    cores_per_node: float
    nodes: int
    gpu_milli: int
    gpu_used_milli: int
    cpu_milli: int
    cpu_used_milli: int
    leftover_milli: int
    stranded_milli: int
    usable_milli: int

    @property
    def idle_milli(self) -> int:
        return self.leftover_milli + self.stranded_milli + self.usable_milli

    @property
    def gpu_used_pct(self) -> float:
        return 100.0 * self.gpu_used_milli / self.gpu_milli if self.gpu_milli else 0.0

    @property
    def cpu_used_pct(self) -> float:
        return 100.0 * self.cpu_used_milli / self.cpu_milli if self.cpu_milli else 0.0


def final_state(workload: Workload, run: SeedRun) -> FinalState:
    """The cluster after ``run``: every placed arrival applied to the empty cluster."""
    rows = len(workload.node_names)
    if len(run.gpus) != len(run.node) or len(run.shape) != len(run.node):
        raise InputError("idle: the replay has no GPU indices per arrival (a run from an older kubegpu?)")
    free = np.zeros((rows, max(1, workload.gpu_width)), dtype=np.int64)
    for row, count in enumerate(workload.node_gpus.tolist()):
        free[row, :count] = MILLI
    cpu = workload.node_cpu_milli.astype(np.int64).copy()
    memory = workload.node_memory_mib.astype(np.int64).copy()
    requests = workload.shape_requests
    for node, gpus, sid in zip(run.node.tolist(), run.gpus, run.shape.tolist(), strict=True):
        if node < 0:
            continue
        pod = requests[sid]
        cpu[node] -= pod.cpu_milli
        memory[node] -= pod.memory_mib
        for gpu in gpus:
            free[node, gpu] -= pod.gpu_milli
    if (free < 0).any() or (cpu < 0).any() or (memory < 0).any():
        raise InputError("idle: the replay does not fit its own cluster (a run of another node file?)")
    return FinalState(gpu_free_milli=free, cpu_left_milli=cpu, memory_left_mib=memory)


def idle_by_class(workload: Workload, run: SeedRun) -> list[ClassIdle]:
    """Per node class with GPUs, most GPUs first: use, and the idle milli by kind (module docstring)."""
    state = final_state(workload, run)
    typical = workload.typical
    one = (typical.num_gpu == 1) & (typical.gpu_milli > 0)
    milli = typical.gpu_milli[one]
    cores = typical.cpu_milli[one]
    model_ok = typical.model_ok[one]
    keys: dict[tuple[int, int], list[int]] = {}
    for row in np.flatnonzero(workload.node_gpus > 0).tolist():
        keys.setdefault((int(workload.node_gpus[row]), int(workload.node_cpu_milli[row])), []).append(row)
    out: list[ClassIdle] = []
    for (gpus, cpu), rows in sorted(keys.items(), key=lambda kv: (-kv[0][0] * len(kv[1]), kv[0])):
        leftover = stranded = usable = 0
        for row in rows:
            ok = model_ok[:, workload.node_model[row]] if model_ok.size else np.zeros(0, dtype=bool)
            fits_cpu = cores <= state.cpu_left_milli[row]
            for f in state.gpu_free_milli[row, : workload.node_gpus[row]].tolist():
                if f <= 0:
                    continue
                by_size = ok & (milli <= f)
                if not by_size.any():
                    leftover += f
                elif not (by_size & fits_cpu).any():
                    stranded += f
                else:
                    usable += f
        n = len(rows)
        free = int(sum(state.gpu_free_milli[r, : workload.node_gpus[r]].sum() for r in rows))
        cpu_left = int(state.cpu_left_milli[rows].sum())
        out.append(
            ClassIdle(
                gpus_per_node=gpus,
                cores_per_node=cpu / 1000,
                nodes=n,
                gpu_milli=n * gpus * MILLI,
                gpu_used_milli=n * gpus * MILLI - free,
                cpu_milli=n * cpu,
                cpu_used_milli=n * cpu - cpu_left,
                leftover_milli=leftover,
                stranded_milli=stranded,
                usable_milli=usable,
            )
        )
    return out


def mean_by_class(runs: Sequence[list[ClassIdle]]) -> list[ClassIdle]:
    """The per-class means of several replays of one workload (rounded to whole milli)."""
    if not runs:
        return []
    first = runs[0]
    if any(len(r) != len(first) for r in runs):
        raise InputError("idle: the replays are of different node files")

    def mean(values: Sequence[int]) -> int:
        return round(sum(values) / len(values))

    return [
        ClassIdle(
            gpus_per_node=c.gpus_per_node,
            cores_per_node=c.cores_per_node,
            nodes=c.nodes,
            gpu_milli=c.gpu_milli,
            gpu_used_milli=mean([r[i].gpu_used_milli for r in runs]),
            cpu_milli=c.cpu_milli,
            cpu_used_milli=mean([r[i].cpu_used_milli for r in runs]),
            leftover_milli=mean([r[i].leftover_milli for r in runs]),
            stranded_milli=mean([r[i].stranded_milli for r in runs]),
            usable_milli=mean([r[i].usable_milli for r in runs]),
        )
        for i, c in enumerate(first)
    ]


@dataclass(frozen=True, kw_only=True)
class FillPoint:
    """A replay after its first ``arrivals`` arrivals (``fill_timeline``)."""

    arrivals: int
    share_of_arrivals: float  # arrivals / all the replay's arrivals
    untouched_gpus: int  # GPUs no pod has used yet
    lone_shares: dict[int, int]  # share milli -> GPUs holding one share of it and nothing else
    refused: dict[int, int]  # shape id -> its pods refused so far


def fill_timeline(workload: Workload, run: SeedRun, points: int = 20) -> list[FillPoint]:
    """``run`` at ``points`` evenly spaced points of its arrivals (the last one: the end)."""
    if points < 1:
        raise InputError(f"idle: the timeline needs at least one point (got {points})")
    if len(run.gpus) != len(run.node) or len(run.shape) != len(run.node):
        raise InputError("idle: the replay has no GPU indices per arrival (a run from an older kubegpu?)")
    count = len(run.node)
    marks = sorted({max(1, round(count * k / points)) for k in range(1, points + 1)} if count else set())
    requests = workload.shape_requests
    held: dict[tuple[int, int], list[int]] = {}  # (node row, GPU) -> milli of each pod on it
    refused: dict[int, int] = {}
    out: list[FillPoint] = []
    step = 0
    for mark in marks:
        for node, gpus, sid in zip(
            run.node[step:mark].tolist(), run.gpus[step:mark], run.shape[step:mark].tolist(), strict=True
        ):
            if node < 0:
                refused[sid] = refused.get(sid, 0) + 1
                continue
            pod = requests[sid]
            for gpu in gpus:
                held.setdefault((node, gpu), []).append(pod.gpu_milli if pod.num_gpu == 1 else MILLI)
        step = mark
        lone: dict[int, int] = {}
        for content in held.values():
            if len(content) == 1 and content[0] < MILLI:
                lone[content[0]] = lone.get(content[0], 0) + 1
        out.append(
            FillPoint(
                arrivals=mark,
                share_of_arrivals=mark / count,
                untouched_gpus=workload.total_gpus - len(held),
                lone_shares=lone,
                refused=dict(refused),
            )
        )
    return out


@dataclass(frozen=True, kw_only=True)
class KindRefusals:
    """One kind of pod in a replay (``refused_by_kind``): how many arrived and were refused."""

    num_gpu: int  # GPUs per pod: 0 CPU-only, 1 for shares and 1-GPU pods
    shared: bool  # a share of one GPU (under 1000 milli)
    arrived: int
    refused: int
    refused_milli: int  # GPU milli the refused pods asked for
    first_refused: float | None  # share of the arrivals before its first refusal; None: never refused

    @property
    def label(self) -> str:
        if self.num_gpu == 0:
            return "CPU-only"
        if self.shared:
            return "shares"
        return "1 GPU" if self.num_gpu == 1 else f"{self.num_gpu} GPUs"


def refused_by_kind(workload: Workload, run: SeedRun) -> list[KindRefusals]:
    """Per kind of pod that arrived (CPU-only, shares, then whole-GPU pods by GPU count): arrivals,
    refusals, the GPU milli refused and when the kind was first refused."""
    if len(run.shape) != len(run.node):
        raise InputError("idle: the replay has no node per arrival (a run from an older kubegpu?)")
    requests = workload.shape_requests
    count = len(run.node)
    kinds: dict[tuple[int, bool], list[int]] = {}  # kind -> [arrived, refused, milli, first index]
    for index, (node, sid) in enumerate(zip(run.node.tolist(), run.shape.tolist(), strict=True)):
        pod = requests[sid]
        key = (pod.num_gpu, pod.num_gpu == 1 and pod.gpu_milli < MILLI)
        entry = kinds.setdefault(key, [0, 0, 0, -1])
        entry[0] += 1
        if node < 0:
            entry[1] += 1
            entry[2] += pod.num_gpu * pod.gpu_milli
            if entry[3] < 0:
                entry[3] = index
    return [
        KindRefusals(
            num_gpu=num_gpu,
            shared=shared,
            arrived=arrived,
            refused=refused,
            refused_milli=milli,
            first_refused=first / count if first >= 0 else None,
        )
        for (num_gpu, shared), (arrived, refused, milli, first) in sorted(
            kinds.items(), key=lambda kv: (kv[0][0], not kv[0][1])
        )
    ]
