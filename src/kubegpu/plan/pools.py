"""Pool plan: the first seed's exercise 3, a time-sliced pool for experiments and an exclusive pool.

A development cluster has a few cards, many engineers running small models, and the odd whole-card
training run. The seed's answer: split the cards into a time-sliced pool (``replicas`` virtual GPUs per
card) and an exclusive pool, keep them apart with node labels and taints, cap each experiment pod with
a LimitRange, give experiments a low priority and an ``activeDeadlineSeconds``, watch utilisation, and
warn everyone that time-slicing isolates no memory. Pools are whole nodes, because a device plugin's
sharing config applies to every GPU of a node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from kubegpu.accounts import MAX_REPLICAS
from kubegpu.errors import InputError
from kubegpu.model.gpu import GpuModel

__all__ = [
    "GPU_TAINT",
    "MAX_REPLICAS",
    "POOL_LABEL",
    "PoolKind",
    "PoolPlan",
    "PoolsPlan",
    "PoolsRequest",
    "PriorityClassPlan",
    "Taint",
    "plan_pools",
]

# kubegpu's own label and taint key for the pool a node belongs to (GFD owns nvidia.com/gpu.*).
POOL_LABEL = "kubegpu.io/gpu-pool"
_INT64_MAX = 2**63 - 1  # activeDeadlineSeconds is an int64 in the Kubernetes API
# Bounds that keep a plan a plan (docs/planning.md): far above any cluster it is meant for.
MAX_GPUS = 100_000
MAX_USERS = 1_000_000
MAX_GPUS_PER_NODE = 64
# The seed's GPU node label for node selectors.
GPU_ROLE_LABEL = "node-role.kubernetes.io/gpu"


class PoolKind(StrEnum):
    """The two pools of the seed's exercise 3."""

    TIME_SLICED = "time-sliced"
    EXCLUSIVE = "exclusive"


@dataclass(frozen=True, kw_only=True)
class Taint:
    """A node taint as ``kubectl taint`` writes it: ``key=value:effect``."""

    key: str
    value: str
    effect: str = "NoSchedule"

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}"


# The seed's GPU node taint, applied to every GPU node.
GPU_TAINT = Taint(key="nvidia.com/gpu", value="present")


@dataclass(frozen=True, kw_only=True)
class PoolPlan:
    """One pool: its cards and nodes, what it advertises, and how pods get in."""

    kind: PoolKind
    gpus: int
    nodes: int
    replicas: int
    namespace: str
    priority_class: str
    memory_gb_per_device: float

    @property
    def virtual_gpus(self) -> int:
        """``nvidia.com/gpu`` the pool advertises: ``gpus x replicas``."""
        return self.gpus * self.replicas

    @property
    def node_labels(self) -> dict[str, str]:
        return {POOL_LABEL: self.kind.value, GPU_ROLE_LABEL: "true"}

    @property
    def taints(self) -> tuple[Taint, ...]:
        return (GPU_TAINT, Taint(key=POOL_LABEL, value=self.kind.value))


@dataclass(frozen=True, kw_only=True)
class PriorityClassPlan:
    """A PriorityClass to create; experiments are low and never preempt."""

    name: str
    value: int
    preempt: bool
    description: str


@dataclass(frozen=True, kw_only=True)
class PoolsRequest:
    """The cards, who uses them, and how to split them."""

    gpus: int
    gpu: GpuModel
    users: int
    exclusive: int | None = None
    replicas: int = 4
    gpus_per_node: int = 1
    deadline_hours: float = 8.0
    experiment_namespace: str = "gpu-experiments"
    training_namespace: str = "gpu-training"

    @property
    def exclusive_gpus(self) -> int:
        """Cards kept whole; half of them (rounded down, to whole nodes) when not given."""
        if self.exclusive is not None:
            return self.exclusive
        nodes = self.gpus // self.gpus_per_node
        return (nodes // 2) * self.gpus_per_node


@dataclass(frozen=True, kw_only=True)
class PoolsPlan:
    """Both pools and the policy objects and advice that go with them."""

    request: PoolsRequest
    pools: tuple[PoolPlan, ...]
    users_per_virtual_gpu: float | None
    priority_classes: tuple[PriorityClassPlan, ...]
    active_deadline_seconds: int
    memory_fraction_per_replica: float
    warnings: tuple[str, ...]
    advice: tuple[str, ...]

    def pool(self, kind: PoolKind) -> PoolPlan | None:
        return next((p for p in self.pools if p.kind is kind), None)


def _validate(req: PoolsRequest) -> None:
    if not 1 <= req.gpus <= MAX_GPUS:
        raise InputError(f"--gpus must be between 1 and {MAX_GPUS}, got {req.gpus}")
    if not 1 <= req.users <= MAX_USERS:
        raise InputError(f"--users must be between 1 and {MAX_USERS}, got {req.users}")
    if not 2 <= req.replicas <= MAX_REPLICAS:
        raise InputError(
            f"--replicas must be between 2 (NVIDIA's time-slicing minimum) and {MAX_REPLICAS} (the most"
            f" kubegpu's agent accepts per GPU), got {req.replicas}"
        )
    if not 1 <= req.gpus_per_node <= MAX_GPUS_PER_NODE:
        raise InputError(
            f"--gpus-per-node must be between 1 and {MAX_GPUS_PER_NODE}, got {req.gpus_per_node}"
        )
    if not (math.isfinite(req.deadline_hours) and 1 <= round(req.deadline_hours * 3600) <= _INT64_MAX):
        raise InputError(
            f"--deadline-hours must be a positive number of hours (one second to Kubernetes' int64"
            f" activeDeadlineSeconds), got {req.deadline_hours:g}"
        )
    if req.gpus % req.gpus_per_node:
        raise InputError(f"--gpus {req.gpus} is not a whole number of {req.gpus_per_node}-GPU nodes")
    if req.exclusive is not None and not 0 <= req.exclusive <= req.gpus:
        raise InputError(f"--exclusive must be between 0 and --gpus ({req.gpus}), got {req.exclusive}")
    if req.exclusive_gpus % req.gpus_per_node:
        raise InputError(
            f"--exclusive {req.exclusive_gpus} is not a whole number of {req.gpus_per_node}-GPU nodes:"
            " pools are whole nodes because the sharing config applies to every GPU of a node"
        )


def plan_pools(req: PoolsRequest) -> PoolsPlan:
    """Split ``req.gpus`` cards into a time-sliced and an exclusive pool, as the seed's exercise 3."""
    _validate(req)
    exclusive = req.exclusive_gpus
    shared = req.gpus - exclusive
    experiment_pc = PriorityClassPlan(
        name="gpu-experiment",
        value=-100,
        preempt=False,
        description="GPU experiments on the time-sliced pool: below pods without a class, never preempts.",
    )
    training_pc = PriorityClassPlan(
        name="gpu-training",
        value=10000,
        preempt=True,
        description="Whole-card training jobs on the exclusive pool.",
    )
    pools: list[PoolPlan] = []
    if shared:
        pools.append(
            PoolPlan(
                kind=PoolKind.TIME_SLICED,
                gpus=shared,
                nodes=shared // req.gpus_per_node,
                replicas=req.replicas,
                namespace=req.experiment_namespace,
                priority_class=experiment_pc.name,
                memory_gb_per_device=req.gpu.memory_gb / req.replicas,
            )
        )
    if exclusive:
        pools.append(
            PoolPlan(
                kind=PoolKind.EXCLUSIVE,
                gpus=exclusive,
                nodes=exclusive // req.gpus_per_node,
                replicas=1,
                namespace=req.training_namespace,
                priority_class=training_pc.name,
                memory_gb_per_device=float(req.gpu.memory_gb),
            )
        )
    virtual = shared * req.replicas
    fraction = 1.0 / req.replicas
    warnings = [
        "time-slicing isolates no memory: one user's out-of-memory can take down everyone on the same"
        f" card; each replica should hold itself to {req.gpu.memory_gb / req.replicas:g} GB"
        f" (e.g. vLLM --gpu-memory-utilization {fraction * 0.95:.2f})",
        "time-slicing has no performance isolation either: step times of neighbours jitter",
    ]
    if not shared:
        warnings.append("no time-sliced pool: every card is exclusive")
    if not exclusive:
        warnings.append("no exclusive pool: whole-card training has nowhere to run")
    if virtual and req.users > virtual:
        warnings.append(
            f"{req.users} users share {virtual} virtual GPUs: at most {virtual} experiments run at once;"
            " the rest stay Pending (the LimitRange and deadline keep the queue moving)"
        )
    advice = (
        f"separate the pools with the node label {POOL_LABEL}=<pool> and the taint {POOL_LABEL}=<pool>:"
        f"NoSchedule on top of {GPU_TAINT}; pods select and tolerate their pool",
        f"LimitRange in {req.experiment_namespace}: at most 1 nvidia.com/gpu per pod and default CPU/memory"
        " limits per container, so no one fills the pool",
        f"experiments run at PriorityClass {experiment_pc.name} (low, never preempts) with"
        f" activeDeadlineSeconds {round(req.deadline_hours * 3600)}, so forgotten pods are reclaimed",
        "watch DCGM_FI_DEV_GPU_UTIL per pod (dcgm-exporter) and remind owners of pods that idle for hours",
    )
    return PoolsPlan(
        request=req,
        pools=tuple(pools),
        users_per_virtual_gpu=req.users / virtual if virtual else None,
        priority_classes=(experiment_pc, training_pc),
        active_deadline_seconds=round(req.deadline_hours * 3600),
        memory_fraction_per_replica=fraction,
        warnings=tuple(warnings),
        advice=advice,
    )
