"""The target workload the fragmentation-aware policies (``kubegpu``, ``fgd``) place against.

FGD measures fragmentation against the cluster's popular pod shapes. ``kubegpu sim`` takes them
from the trace it replays; the extender takes them from a pod list in the same CSV schema
(``--workload FILE``, e.g. a month of the cluster's own pods, or the openb trace), or, without one,
from ``DEFAULT_SHAPES``: one shape each of a half-GPU share and 1, 2, 4 and 8 whole GPUs, equally
popular, with no CPU (so only GPUs count).

GPU-model constraints (the pod list's ``gpu_spec``) are part of the shapes, as in the simulator: a
shape pinned to V100M32 is one FGD counts only on V100M32 nodes, and it is not the same shape as the
unpinned pods of its size. The shapes' model table (``TypicalShapes.models``) is ``""`` (every model
the workload does not name) followed by the models it names; the ledger maps each node onto it by the
node's ``nvidia.com/gpu.product`` label. A pod's own constraint is its node affinity, which
kube-scheduler applies before it asks the extender.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from kubegpu.sim.scoring import TypicalShapes, typical_shapes
from kubegpu.sim.trace import PodRecord, load_pods

__all__ = ["DEFAULT_SHAPES", "default_typical", "typical_from_file", "typical_of"]

# (cpu_milli, gpu_milli per GPU, num_gpu), each counted once
DEFAULT_SHAPES = ((0, 500, 1), (0, 1000, 1), (0, 1000, 2), (0, 1000, 4), (0, 1000, 8))


def _typical(
    counts: dict[tuple[int, int, int, tuple[str, ...]], int], models: tuple[str, ...]
) -> TypicalShapes:
    index = {m: i for i, m in enumerate(models)}

    def model_ok(spec: tuple[str, ...]) -> np.ndarray:
        ok = np.zeros(len(models), dtype=bool)
        if not spec:
            ok[:] = True
        for m in spec:
            ok[index[m]] = True
        return ok

    keys = list(counts)
    shapes = [(k[0], k[1], k[2], model_ok(k[3]), "|".join(k[3])) for k in keys]
    return typical_shapes(shapes, [counts[k] for k in keys], n_models=len(models), models=models)


def typical_of(pods: Iterable[PodRecord]) -> TypicalShapes:
    """The popular shapes of ``pods`` as the simulator picks them (grouped by CPU, per-GPU milli, GPU
    count and GPU-model constraint; the shapes covering 95 % of the pods)."""
    counts: dict[tuple[int, int, int, tuple[str, ...]], int] = {}
    for pod in pods:
        key = (pod.cpu_milli, pod.gpu_milli, pod.num_gpu, pod.gpu_spec)
        counts[key] = counts.get(key, 0) + 1
    models = ("", *sorted({m for key in counts for m in key[3]} - {""}))
    return _typical(counts, models)


def typical_from_file(path: str | Path) -> TypicalShapes:
    """``typical_of`` a pod list CSV (the simulator's schema); ``TraceError`` naming the line if bad."""
    return typical_of(load_pods(path))


def default_typical() -> TypicalShapes:
    return _typical(dict.fromkeys(((*shape, ()) for shape in DEFAULT_SHAPES), 1), ("",))
