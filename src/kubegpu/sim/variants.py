"""Trace variants: the default pod list resampled with a different mix of pod kinds.

The FGD paper also evaluates workloads with more CPU-only, more GPU-sharing, more multi-GPU and
more GPU-model-constrained pods; those pod lists are not provided here, so kubegpu generates such
variants from any pod list with documented knobs (docs/sim.md):

* ``cpu_only``: fraction of all pods that request no GPU;
* ``shared``: fraction of GPU pods that request part of one GPU;
* ``multi_gpu``: fraction of GPU pods that request two or more GPUs;
* ``gpu_spec``: fraction of GPU pods constrained to one GPU model (drawn in proportion to the
  cluster's GPUs of each model among the models whose nodes are big enough for the pod).

Unset knobs keep the input's own fraction. Pods are drawn with replacement from the input's pods
of each kind, so every pod of a variant is a real pod shape; the same seed gives the same file.

``gpushare_variant`` is the FGD artifact's own definition of its GPU-sharing pod lists
(``openb_pod_list_gpushare{20,40,60,80,100}.csv``, read from the published files): the CPU-only
pods are kept as they are, the number of GPU pods is kept, and the sharing pods make up the given
percentage of the GPU *demand* (not of the pods); sharing and non-sharing GPU pods are drawn with
replacement from the input's pods of each kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from kubegpu.errors import InputError
from kubegpu.sim.trace import MILLI_PER_GPU, NodeRecord, PodRecord

__all__ = [
    "GPUSHARE_PRESETS",
    "MAX_VARIANT_PODS",
    "VariantKnobs",
    "gpushare_variant",
    "make_variant",
    "pod_mix",
]

MAX_VARIANT_PODS = 1_000_000  # over 100x the openb trace; more only makes the file slow to write
GPUSHARE_PRESETS = (20, 40, 60, 80, 100)  # the artifact's openb_pod_list_gpushareNN.csv


@dataclass(frozen=True, kw_only=True)
class VariantKnobs:
    """Target mix of a variant; ``None`` keeps the input's fraction."""

    cpu_only: float | None = None
    shared: float | None = None
    multi_gpu: float | None = None
    gpu_spec: float | None = None
    count: int | None = None  # pods in the variant; default: as many as the input
    seed: int = 0


def _kind(pod: PodRecord) -> str:
    if pod.num_gpu == 0:
        return "cpu_only"
    if pod.num_gpu == 1 and pod.gpu_milli < MILLI_PER_GPU:
        return "shared"
    if pod.num_gpu > 1:
        return "multi_gpu"
    return "whole"


def pod_mix(pods: Sequence[PodRecord]) -> dict[str, float]:
    """The fractions the knobs talk about, measured on ``pods``."""
    kinds = [_kind(p) for p in pods]
    total = len(kinds)
    gpu = sum(1 for k in kinds if k != "cpu_only")
    return {
        "cpu_only": kinds.count("cpu_only") / total if total else 0.0,
        "shared": kinds.count("shared") / gpu if gpu else 0.0,
        "multi_gpu": kinds.count("multi_gpu") / gpu if gpu else 0.0,
        "gpu_spec": sum(1 for p in pods if p.num_gpu and p.gpu_spec) / gpu if gpu else 0.0,
    }


def _check(name: str, value: float | None) -> None:
    if value is not None and not 0.0 <= value <= 1.0:
        raise InputError(f"--{name.replace('_', '-')} must be a fraction between 0 and 1, got {value}")


def make_variant(
    pods: Sequence[PodRecord], nodes: Sequence[NodeRecord], knobs: VariantKnobs
) -> tuple[PodRecord, ...]:
    """A new pod list with the mix of ``knobs``, drawn from ``pods``; see the module docstring."""
    for name in ("cpu_only", "shared", "multi_gpu", "gpu_spec"):
        _check(name, getattr(knobs, name))
    if knobs.count is not None and not 1 <= knobs.count <= MAX_VARIANT_PODS:
        raise InputError(f"--count must be between 1 and {MAX_VARIANT_PODS}, got {knobs.count}")
    if knobs.seed < 0:
        raise InputError(f"--seed must not be negative, got {knobs.seed}")
    base = pod_mix(pods)
    cpu_only = base["cpu_only"] if knobs.cpu_only is None else knobs.cpu_only
    shared = base["shared"] if knobs.shared is None else knobs.shared
    multi = base["multi_gpu"] if knobs.multi_gpu is None else knobs.multi_gpu
    spec = base["gpu_spec"] if knobs.gpu_spec is None else knobs.gpu_spec
    if shared + multi > 1.0 + 1e-9:
        raise InputError(f"--shared {shared:g} and --multi-gpu {multi:g} add up to more than all GPU pods")
    pools: dict[str, list[PodRecord]] = {"cpu_only": [], "shared": [], "whole": [], "multi_gpu": []}
    for pod in pods:
        pools[_kind(pod)].append(pod)
    weights = {
        "cpu_only": cpu_only,
        "shared": (1 - cpu_only) * shared,
        "multi_gpu": (1 - cpu_only) * multi,
        "whole": (1 - cpu_only) * max(0.0, 1 - shared - multi),
    }
    for kind, weight in weights.items():
        if weight > 0 and not pools[kind]:
            raise InputError(f"the pod list has no {kind.replace('_', '-')} pods to draw a variant from")
    kinds = [k for k, w in weights.items() if w > 0]
    probs = np.array([weights[k] for k in kinds])
    probs = probs / probs.sum()
    rng = np.random.default_rng([knobs.seed, 7])
    count = knobs.count or len(pods)
    drawn = rng.choice(len(kinds), size=count, p=probs)
    models: dict[str, int] = {}
    biggest: dict[str, int] = {}
    for n in nodes:
        if n.gpu_count:
            models[n.gpu_model] = models.get(n.gpu_model, 0) + n.gpu_count
            biggest[n.gpu_model] = max(biggest.get(n.gpu_model, 0), n.gpu_count)
    out: list[PodRecord] = []
    for i, k in enumerate(drawn):
        pool = pools[kinds[int(k)]]
        pod = pool[int(rng.integers(len(pool)))]
        gpu_spec: tuple[str, ...] = ()
        if pod.num_gpu and models and rng.random() < spec:
            fit = [m for m in sorted(models) if biggest[m] >= pod.num_gpu]
            if fit:
                w = np.array([models[m] for m in fit], dtype=float)
                gpu_spec = (fit[int(rng.choice(len(fit), p=w / w.sum()))],)
        elif pod.num_gpu:
            gpu_spec = pod.gpu_spec if knobs.gpu_spec is None else ()
        out.append(replace(pod, name=f"variant-pod-{i:05d}", gpu_spec=gpu_spec))
    return tuple(out)


def gpushare_variant(pods: Sequence[PodRecord], percent: int, *, seed: int = 0) -> tuple[PodRecord, ...]:
    """The FGD artifact's ``gpushare{percent}`` pod list drawn from ``pods``.

    CPU-only pods are kept, in input order; the GPU pod count stays the same; ``n_shared`` of them
    are sharing pods, chosen so that sharing pods' expected share of the GPU demand is ``percent``
    (with the input's mean demand per sharing pod ``s`` and per other GPU pod ``o``:
    ``n_shared = p o G / ((1 - p) s + p o)``, rounded); both kinds are drawn uniformly with
    replacement from the input's pods of that kind. Names are ``gpushareNN-pod-NNNNN``.
    """
    if percent not in GPUSHARE_PRESETS:
        choices = ", ".join(f"gpushare{p}" for p in GPUSHARE_PRESETS)
        raise InputError(f"--preset gpushare{percent}: unknown preset; choose from {choices}")
    if seed < 0:
        raise InputError(f"--seed must not be negative, got {seed}")
    cpu_only = [p for p in pods if p.num_gpu == 0]
    shared = [p for p in pods if _kind(p) == "shared"]
    other = [p for p in pods if p.num_gpu > 0 and _kind(p) != "shared"]
    gpu_pods = len(shared) + len(other)
    share = percent / 100
    if not shared or (share < 1 and not other):
        missing = "sharing" if not shared else "whole-GPU"
        raise InputError(f"--preset gpushare{percent}: the pod list has no {missing} GPU pods to draw from")
    s_mean = float(np.mean([p.total_gpu_milli for p in shared]))
    o_mean = float(np.mean([p.total_gpu_milli for p in other])) if other else 0.0
    n_shared = (
        gpu_pods if share >= 1 else round(share * o_mean * gpu_pods / ((1 - share) * s_mean + share * o_mean))
    )
    rng = np.random.default_rng([seed, 11, percent])
    drawn = [shared[int(i)] for i in rng.integers(len(shared), size=n_shared)]
    if gpu_pods > n_shared:
        drawn += [other[int(i)] for i in rng.integers(len(other), size=gpu_pods - n_shared)]
    return tuple(
        replace(pod, name=f"gpushare{percent}-pod-{i:05d}") for i, pod in enumerate([*cpu_only, *drawn])
    )
