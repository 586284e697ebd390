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

Bounds: the ledger's arithmetic is int64 (``kubegpu.sim.policy``), and the API server accepts
quantities far beyond it (``cpu: 10P``). A pod to be placed that asks for more than ``MAX_CPU_MILLI``,
``MAX_MEMORY_MIB`` or ``MAX_GPUS_PER_POD`` is refused (``PlacementError``); a pod already bound
(``bound=True``) is read with those values clamped to the bounds, so it still counts, as a pod that
takes everything a node has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np

from kubegpu.errors import PlacementError
from kubegpu.sim.scoring import MILLI, N_CLASSES, PodRequest

__all__ = [
    "GPU_MILLI_RESOURCE",
    "GPU_RESOURCE",
    "MAX_CPU_MILLI",
    "MAX_GPUS_PER_NODE",
    "MAX_GPUS_PER_POD",
    "MAX_MEMORY_MIB",
    "Ask",
    "ask_of",
    "parse_quantity",
]

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

# Bounds of what the ledger represents: a node's (and a pod's) CPU and memory stay far enough below
# int64 that a node's sum over millions of pods cannot overflow (2**40 * 2**22 < 2**63).
MAX_CPU_MILLI = 2**40  # about 1.1e9 cores
MAX_MEMORY_MIB = 2**40  # 1 EiB
MAX_GPUS_PER_NODE = 1024  # a node claiming more GPUs is unreadable (kubegpu.extender.node)
MAX_GPUS_PER_POD = N_CLASSES - 1  # the simulator's state counts k-GPU pods in column k (16)


def parse_quantity(text: object) -> Decimal:
    """A Kubernetes quantity (``500m``, ``2``, ``1.5Gi``, ``1e3``) as a number; ``PlacementError``
    when it is not one."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float, Decimal)):
        raise PlacementError(f"{str(text)[:40]!r} is not a Kubernetes quantity")
    raw = str(text).strip()
    number, suffix = raw, ""
    for candidate in sorted(_SUFFIX, key=len, reverse=True):
        if candidate and raw.endswith(candidate):
            number, suffix = raw[: -len(candidate)], candidate
            break
    try:
        value = Decimal(number) * _SUFFIX[suffix]
    except (ArithmeticError, ValueError) as exc:  # decimal's InvalidOperation and Overflow included
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


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    """``value`` when it is a JSON object (``{}`` for null); ``PlacementError`` for any other type."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PlacementError(f"{what} must be an object, got {type(value).__name__}")
    return value


def _list(value: object, what: str) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PlacementError(f"{what} must be a list, got {type(value).__name__}")
    return [_mapping(v, what) for v in value]


def _resources(container: Mapping[str, Any]) -> dict[str, Decimal]:
    res = _mapping(container.get("resources"), "a container's resources")
    requests = _mapping(res.get("requests"), "resources.requests")
    limits = _mapping(res.get("limits"), "resources.limits")
    out: dict[str, Decimal] = {}
    for name in {*requests, *limits}:
        out[str(name)] = parse_quantity(requests[name] if name in requests else limits[name])
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


def _whole(name: str, value: Decimal, bound: int, *, clamp: bool) -> int:
    if value > bound:  # compared first: int() of 1e999999 would take a megabyte and seconds
        if clamp:
            return bound
        raise PlacementError(f"{name} asks for more than {bound}")
    if value != value.to_integral_value():
        raise PlacementError(f"{name} must be a whole number, got {value}")
    return int(value)


def _bounded(name: str, value: Decimal, unit: Decimal, bound: int, *, clamp: bool) -> int:
    """``value`` in ``unit`` (rounded up), at most ``bound`` (clamped, or refused); compared before
    it is divided, so a quantity near decimal's own limit cannot overflow."""
    if value > bound * unit:
        if clamp:
            return bound
        raise PlacementError(f"{name} request is more than any node can hold")
    return int((value / unit).to_integral_value(rounding="ROUND_CEILING"))


def ask_of(pod: Mapping[str, Any], *, bound: bool = False) -> Ask:
    """The pod's ``Ask``; ``PlacementError`` (naming the resource) for an ask no node can meet, or a
    pod object that is not one. ``bound``: the pod is on a node already, and asks beyond the bounds
    are clamped to them rather than refused (it must still count)."""
    try:
        return _ask_of(pod, clamp=bound)
    except ArithmeticError as exc:  # decimal overflow of a sum of huge quantities
        raise PlacementError(f"a resource quantity is out of range: {exc!r}") from exc


def _ask_of(pod: Mapping[str, Any], *, clamp: bool) -> Ask:
    spec = _mapping(_mapping(pod, "the pod").get("spec"), "the pod's spec")
    total = _effective(
        _list(spec.get("containers"), "spec.containers"),
        _list(spec.get("initContainers"), "spec.initContainers"),
    )
    for name, value in _mapping(spec.get("overhead"), "spec.overhead").items():
        total[str(name)] = total.get(str(name), Decimal(0)) + parse_quantity(value)
    cpu = _bounded("cpu", total.get("cpu", Decimal(0)), Decimal("0.001"), MAX_CPU_MILLI, clamp=clamp)
    memory = _bounded("memory", total.get("memory", Decimal(0)), Decimal(2**20), MAX_MEMORY_MIB, clamp=clamp)
    gpus = _whole(
        GPU_RESOURCE,
        total.get(GPU_RESOURCE, Decimal(0)),
        MAX_GPUS_PER_NODE if clamp else MAX_GPUS_PER_POD,
        clamp=clamp,
    )
    milli = _whole(GPU_MILLI_RESOURCE, total.get(GPU_MILLI_RESOURCE, Decimal(0)), 10**9, clamp=False)
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
