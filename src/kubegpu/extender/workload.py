"""The target workload the fragmentation-aware policies (``kubegpu``, ``fgd``) place against.

FGD measures fragmentation against the cluster's popular pod shapes. ``kubegpu sim`` takes them
from the trace it replays; the extender takes them from a pod list in the same CSV schema
(``--workload FILE``, e.g. a month of the cluster's own pods, or the openb trace), or, without one,
from ``DEFAULT_SHAPES``: one shape each of a half-GPU share and 1, 2, 4 and 8 whole GPUs, equally
popular, with no CPU (so only GPUs count). GPU-model constraints are not part of the shapes: on a
real cluster they are node selectors, which kube-scheduler applies before it asks the extender.
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


def _typical(counts: dict[tuple[int, int, int], int]) -> TypicalShapes:
    keys = list(counts)
    ok = np.ones(1, dtype=bool)
    shapes = [(k[0], k[1], k[2], ok, "") for k in keys]
    return typical_shapes(shapes, [counts[k] for k in keys], n_models=1)


def typical_of(pods: Iterable[PodRecord]) -> TypicalShapes:
    """The popular shapes of ``pods`` as the simulator picks them (grouped by CPU, per-GPU milli and
    GPU count; the shapes covering 95 % of the pods)."""
    counts: dict[tuple[int, int, int], int] = {}
    for pod in pods:
        key = (pod.cpu_milli, pod.gpu_milli, pod.num_gpu)
        counts[key] = counts.get(key, 0) + 1
    return _typical(counts)


def typical_from_file(path: str | Path) -> TypicalShapes:
    """``typical_of`` a pod list CSV (the simulator's schema); ``TraceError`` naming the line if bad."""
    return typical_of(load_pods(path))


def default_typical() -> TypicalShapes:
    return _typical(dict.fromkeys(DEFAULT_SHAPES, 1))
