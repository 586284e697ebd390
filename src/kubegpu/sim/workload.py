"""A trace turned into arrays, and the per-seed arrival sequence of the FGD replay protocol.

``prepare`` does the work shared by every run of a trace once: node and pod arrays, the table of
distinct pod shapes (the scoring cache is keyed by shape), the GPU-model table and FGD's target
workload. ``arrivals`` builds one seed's sequence exactly as the paper's artifact does: pods sorted
by name and shuffled, then inflated by resampling until the arrived GPU demand reaches the target,
with the artifact's stop check. ``node_order`` is the seed's fixed node order that breaks ties.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kubegpu.errors import InputError
from kubegpu.sim.scoring import (
    MILLI,
    BoolArray,
    IntArray,
    PodRequest,
    TypicalShapes,
    typical_shapes,
)
from kubegpu.sim.trace import Trace

__all__ = ["Workload", "arrivals", "node_order", "prepare", "seed_stream"]


@dataclass(frozen=True, kw_only=True, eq=False)
class Workload:
    """Arrays for one trace. Node rows are in file order; pods in name order."""

    node_names: tuple[str, ...]
    models: tuple[str, ...]  # model table; index 0 is "" (no GPU)
    node_cpu_milli: IntArray
    node_memory_mib: IntArray
    node_gpus: IntArray
    node_model: IntArray
    pod_names: tuple[str, ...]
    pod_shape: IntArray  # shape id of each pod
    shape_requests: tuple[PodRequest, ...]
    shape_labels: tuple[str, ...]
    typical: TypicalShapes  # FGD's target workload (memory ignored)
    gpu_width: int
    pods_path: str = ""

    @property
    def total_gpus(self) -> int:
        return int(self.node_gpus.sum())

    @property
    def total_gpu_milli(self) -> int:
        return self.total_gpus * MILLI

    def shape_total_milli(self) -> IntArray:
        out: IntArray = np.array([r.num_gpu * r.gpu_milli for r in self.shape_requests], dtype=np.int64)
        return out


def prepare(trace: Trace, *, coverage: float = 0.95) -> Workload:
    """Build the arrays for ``trace`` (pods sorted by name, as the artifact sorts them)."""
    models: list[str] = [""]
    index: dict[str, int] = {"": 0}
    for n in trace.nodes:
        if n.gpu_model not in index:
            index[n.gpu_model] = len(models)
            models.append(n.gpu_model)
    pods = sorted(trace.pods, key=lambda p: p.name)
    shape_ids: dict[tuple[int, int, int, int, tuple[str, ...]], int] = {}
    requests: list[PodRequest] = []
    labels: list[str] = []
    pod_shape = np.empty(len(pods), dtype=np.int64)

    def model_ok(spec: tuple[str, ...]) -> BoolArray:
        ok = np.zeros(len(models), dtype=bool)
        if not spec:
            ok[:] = True
        for m in spec:
            if m in index:
                ok[index[m]] = True
        return ok

    for i, pod in enumerate(pods):
        key = (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_spec)
        sid = shape_ids.get(key)
        if sid is None:
            sid = len(requests)
            shape_ids[key] = sid
            requests.append(
                PodRequest(
                    cpu_milli=pod.cpu_milli,
                    memory_mib=pod.memory_mib,
                    num_gpu=pod.num_gpu,
                    gpu_milli=pod.gpu_milli,
                    model_ok=model_ok(pod.gpu_spec),
                )
            )
            labels.append(pod.shape_label)
        pod_shape[i] = sid
    # FGD's target workload ignores memory: group by (cpu, milli, count, spec)
    groups: dict[tuple[int, int, int, tuple[str, ...]], int] = {}
    for pod in pods:
        gkey = (pod.cpu_milli, pod.gpu_milli, pod.num_gpu, pod.gpu_spec)
        groups[gkey] = groups.get(gkey, 0) + 1
    keys = list(groups)
    shapes = [(k[0], k[1], k[2], model_ok(k[3]), "|".join(k[3])) for k in keys]
    typical = typical_shapes(
        shapes, [groups[k] for k in keys], n_models=len(models), coverage=coverage, models=tuple(models)
    )
    return Workload(
        node_names=tuple(n.name for n in trace.nodes),
        models=tuple(models),
        node_cpu_milli=np.array([n.cpu_milli for n in trace.nodes], dtype=np.int64),
        node_memory_mib=np.array([n.memory_mib for n in trace.nodes], dtype=np.int64),
        node_gpus=np.array([n.gpu_count for n in trace.nodes], dtype=np.int64),
        node_model=np.array([index[n.gpu_model] for n in trace.nodes], dtype=np.int64),
        pod_names=tuple(p.name for p in pods),
        pod_shape=pod_shape,
        shape_requests=tuple(requests),
        shape_labels=tuple(labels),
        typical=typical,
        gpu_width=max(1, *(n.gpu_count for n in trace.nodes)),
        pods_path=trace.pods_path,
    )


def seed_stream(seed: int, stream: int) -> np.random.Generator:
    """An independent random generator per (seed, purpose): shuffle, inflation, node order, ties..."""
    return np.random.default_rng([seed, stream])


STREAM_SHUFFLE, STREAM_INFLATE, STREAM_NODES, STREAM_TIES, STREAM_RANDOM = range(5)


MAX_INFLATE = 10.0  # arrivals of 10x the GPU capacity: every curve is flat long before


def check_inflate(inflate: float) -> None:
    """Refuse an ``--inflate`` outside 0..``MAX_INFLATE``; NaN too (it would never end ``arrivals``)."""
    if not 0 <= inflate <= MAX_INFLATE:
        raise InputError(
            f"--inflate must be 0 (no inflation) or a multiple of capacity up to {MAX_INFLATE:g},"
            f" got {inflate}"
        )


def arrivals(workload: Workload, seed: int, inflate: float) -> IntArray:
    """Pod indices in arrival order for ``seed``.

    The pods (in name order) are shuffled; then, while the arrived GPU demand is below ``inflate`` x
    capacity, a pod is sampled uniformly with replacement and appended. The artifact's stop check:
    the loop stops at the first sample for which (running total + that pod's *per-GPU* milli)
    exceeds the target, and drops it; accepted samples add their *total* milli. With ``inflate``
    below the trace's own demand, random pods are removed until the demand fits instead; with 0 the
    shuffled trace is replayed as it is.
    """
    check_inflate(inflate)
    n = len(workload.pod_shape)
    order = seed_stream(seed, STREAM_SHUFFLE).permutation(n).astype(np.int64)
    if inflate == 0:
        return order
    per_gpu = np.array([r.gpu_milli for r in workload.shape_requests], dtype=np.int64)[workload.pod_shape]
    total_of = workload.shape_total_milli()[workload.pod_shape]
    total = int(total_of.sum())
    target = inflate * workload.total_gpu_milli
    rng = seed_stream(seed, STREAM_INFLATE)
    if total > target:
        keep = list(order)
        while total > target and keep:
            drop = int(rng.integers(len(keep)))
            total -= int(total_of[keep[drop]])
            del keep[drop]
        return np.array(keep, dtype=np.int64)
    if total == target:
        return order
    if not per_gpu.any():
        raise InputError(
            "cannot inflate a pod list without GPU demand; pass --inflate 0 to replay it as it is"
        )
    extra: list[int] = []
    # draw in blocks: the loop itself is the artifact's, one sample at a time
    while True:
        block = rng.integers(n, size=1024)
        for idx in block:
            i = int(idx)
            if total + int(per_gpu[i]) > target:
                return np.concatenate([order, np.array(extra, dtype=np.int64)])
            total += int(total_of[i])
            extra.append(i)


def node_order(n_nodes: int, seed: int) -> IntArray:
    """The seed's fixed node order (row indices): ties go to the node that comes first."""
    order: IntArray = seed_stream(seed, STREAM_NODES).permutation(n_nodes).astype(np.int64)
    return order
