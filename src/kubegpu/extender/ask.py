"""What a pod asks of a node, read from its Pod object: CPU, memory, and GPUs or a share of one GPU.

Why here: the extender places pods with the simulator's policies, which take a ``PodRequest``
(CPU milli, memory MiB, GPU count, per-GPU milli). This module turns a Pod's containers into that,
the way kube-scheduler sums a pod's requests: the containers' requests added up, at least the
largest init container's, plus the pod's ``overhead``; a container's limit counts as its request
when the request is missing.

GPU asks (``docs/extender.md``):

* ``nvidia.com/gpu: k`` -- k whole GPUs (1000 milli each), never shared;
* ``kubegpu.io/gpu-milli: m`` (1-1000) -- a share of one GPU; two 500 pods can share a GPU, a
  1000 pod takes a GPU alone. Asking for both resources is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np

from kubegpu.errors import PlacementError
from kubegpu.sim.scoring import MILLI, PodRequest

__all__ = ["GPU_MILLI_RESOURCE", "GPU_RESOURCE", "Ask", "ask_of", "parse_quantity"]

GPU_RESOURCE = "nvidia.com/gpu"
GPU_MILLI_RESOURCE = "kubegpu.io/gpu-milli"

_SUFFIX = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def parse_quantity(text: object) -> Decimal:
    """A Kubernetes quantity (``500m``, ``2``, ``1.5Gi``, ``1e3``) as a number; ``PlacementError``
    when it is not one."""
    raw = str(text).strip()
    number, suffix = raw, ""
    for candidate in sorted(_SUFFIX, key=len, reverse=True):
        if candidate and raw.endswith(candidate):
            number, suffix = raw[: -len(candidate)], candidate
            break
    try:
        value = Decimal(number) * _SUFFIX[suffix]
    except (InvalidOperation, ValueError) as exc:
        raise PlacementError(f"{raw[:40]!r} is not a Kubernetes quantity") from exc
    if not value.is_finite() or value < 0:
        raise PlacementError(f"{raw[:40]!r} is not a non-negative quantity")
    return value


@dataclass(frozen=True, kw_only=True)
class Ask:
    """A pod's demand on one node; ``gpu_milli`` is per GPU (1000 for whole GPUs, 0 without GPUs)."""

    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int

    @property
    def wants_gpu(self) -> bool:
        return self.num_gpu > 0

    def request(self, n_models: int = 1) -> PodRequest:
        """The simulator's ``PodRequest`` against a model table of ``n_models`` (every GPU model
        accepted: model constraints are the pod's node affinity, which kube-scheduler has applied
        before it asks the extender)."""
        return PodRequest(
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            num_gpu=self.num_gpu,
            gpu_milli=self.gpu_milli,
            model_ok=np.ones(n_models, dtype=bool),
        )


def _resources(container: Mapping[str, Any]) -> dict[str, Decimal]:
    res = container.get("resources") or {}
    requests = res.get("requests") or {}
    limits = res.get("limits") or {}
    out: dict[str, Decimal] = {}
    for name in {*requests, *limits}:
        out[name] = parse_quantity(requests[name] if name in requests else limits[name])
    return out


def _effective(
    containers: Iterable[Mapping[str, Any]], inits: Iterable[Mapping[str, Any]]
) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for c in containers:
        for name, value in _resources(c).items():
            total[name] = total.get(name, Decimal(0)) + value
    for c in inits:
        for name, value in _resources(c).items():
            total[name] = max(total.get(name, Decimal(0)), value)
    return total


def _whole(name: str, value: Decimal) -> int:
    if value != value.to_integral_value():
        raise PlacementError(f"{name} must be a whole number, got {value}")
    return int(value)


def ask_of(pod: Mapping[str, Any]) -> Ask:
    """The pod's ``Ask``; ``PlacementError`` (naming the resource) for an ask no node can meet."""
    spec = pod.get("spec") or {}
    total = _effective(spec.get("containers") or [], spec.get("initContainers") or [])
    for name, value in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, Decimal(0)) + parse_quantity(value)
    cpu = int((total.get("cpu", Decimal(0)) * 1000).to_integral_value(rounding="ROUND_CEILING"))
    memory = int((total.get("memory", Decimal(0)) / 2**20).to_integral_value(rounding="ROUND_CEILING"))
    gpus = _whole(GPU_RESOURCE, total.get(GPU_RESOURCE, Decimal(0)))
    milli = _whole(GPU_MILLI_RESOURCE, total.get(GPU_MILLI_RESOURCE, Decimal(0)))
    if milli and gpus:
        raise PlacementError(
            f"ask for {GPU_MILLI_RESOURCE} (a share of one GPU) or {GPU_RESOURCE} (whole GPUs), not both"
        )
    if milli > MILLI:
        raise PlacementError(
            f"{GPU_MILLI_RESOURCE} is a share of one GPU, 1-{MILLI}; got {milli} "
            f"(ask {GPU_RESOURCE} for more than one GPU)"
        )
    if milli:
        return Ask(cpu_milli=cpu, memory_mib=memory, num_gpu=1, gpu_milli=milli)
    return Ask(cpu_milli=cpu, memory_mib=memory, num_gpu=gpus, gpu_milli=MILLI if gpus else 0)
