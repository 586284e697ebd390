"""Small synthetic traces in the openb schema, written by the tests (never the shared trace)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kubegpu.sim.scoring import N_CLASSES, NodeArrays, PodRequest
from kubegpu.sim.trace import NodeRecord, PodRecord, Trace

NodeRow = tuple[str, int, int, int, str]  # sn, cpu_milli, memory_mib, gpu, model
PodRow = tuple[str, int, int, int, int, str]  # name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec


def make_trace(nodes: Sequence[NodeRow], pods: Sequence[PodRow]) -> Trace:
    return Trace(
        nodes=tuple(
            NodeRecord(name=n, cpu_milli=c, memory_mib=m, gpu_count=g, gpu_model=model)
            for n, c, m, g, model in nodes
        ),
        pods=tuple(
            PodRecord(
                name=n,
                cpu_milli=c,
                memory_mib=m,
                num_gpu=k,
                gpu_milli=milli,
                gpu_spec=tuple(s for s in spec.split("|") if s),
            )
            for n, c, m, k, milli, spec in pods
        ),
    )


def node_arrays(
    free: Sequence[Sequence[int]],
    *,
    cpu: Sequence[int] | None = None,
    memory: Sequence[int] | None = None,
    model: Sequence[int] | None = None,
    classes: dict[int, dict[int, int]] | None = None,
    gpus: Sequence[int] | None = None,
) -> NodeArrays:
    """Hand-built node rows: per-GPU free milli (rows padded with 0), CPU, memory, model index."""
    width = max(len(f) for f in free)
    table = np.zeros((len(free), width), dtype=np.int64)
    for i, f in enumerate(free):
        table[i, : len(f)] = f
    rows = len(free)
    counts = np.zeros((rows, N_CLASSES), dtype=np.int64)
    for row, per_class in (classes or {}).items():
        for cls, n in per_class.items():
            counts[row, cls] = n
    return NodeArrays(
        cpu_left_milli=np.array(cpu if cpu is not None else [64_000] * rows, dtype=np.int64),
        memory_left_mib=np.array(memory if memory is not None else [1 << 20] * rows, dtype=np.int64),
        gpu_free_milli=table,
        gpu_count=np.array(gpus if gpus is not None else [len(f) for f in free], dtype=np.int64),
        model_index=np.array(model if model is not None else [1] * rows, dtype=np.int64),
        class_counts=counts,
        frag_milli=np.zeros(rows),
    )


def pod(cpu: int = 1000, num: int = 1, milli: int = 1000, memory: int = 0, models: int = 2) -> PodRequest:
    return PodRequest(
        cpu_milli=cpu, memory_mib=memory, num_gpu=num, gpu_milli=milli, model_ok=np.ones(models, dtype=bool)
    )
