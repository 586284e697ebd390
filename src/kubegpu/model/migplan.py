"""A MIG repartition planned: from the layout a node has to the one a named mig-parted config asks.

The MIG manager (``kubegpu.node.migmanager``) follows the node label ``nvidia.com/mig.config``. Here,
without I/O, is what it decides: which GPUs a config changes (``plan_transition``; an invalid config is
refused with ``MigLayoutError`` before anything is touched), which pods stand in the way
(``blocking_pods``: the holders of any device backed by a changed GPU), and what the node looks like
afterwards (``repartitioned``, which the simulated backend uses and the NVML backend checks against).
A GPU counts as unchanged when its MIG mode and its multiset of profiles already match: instances are
compared by profile, not by start slot, so a layout someone created with other placements is left as it
is rather than torn down for nothing.

``MigBackend`` is the one interface both backends implement (simulated GPUs: the node's instances and a
state file; real GPUs: NVML). The state label values are NVIDIA's MIG manager's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Protocol

from kubegpu.model.holder import DeviceHolder, holders_of
from kubegpu.model.mig import PlacedInstance
from kubegpu.model.migparted import DesiredMigLayout, GpuMigTarget, MigConfig, desired_mig_layout
from kubegpu.model.node import Gpu, GpuUuid, MigInstance, Node

__all__ = [
    "MIG_CONFIG_LABEL",
    "MIG_STATE_LABEL",
    "MigBackend",
    "MigConfigState",
    "MigManagerSettings",
    "MigTransition",
    "blocking_pods",
    "gpu_matches",
    "plan_transition",
    "repartitioned",
]

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"


class MigConfigState(Enum):
    """``nvidia.com/mig.config.state``, as NVIDIA's MIG manager writes it."""

    PENDING = "pending"
    SUCCESS = "success"
    FAILED = "failed"


@dataclass(frozen=True, kw_only=True)
class MigManagerSettings:
    """``kubegpu.migManager`` in the agent's config file (docs/mig.md, "The MIG manager").

    ``config_file``: the mig-parted file (a mounted ConfigMap's key, or ``builtin:NAME``); ``drain``:
    evict pods holding devices of a GPU that must change instead of waiting for them; ``state_file``:
    simulated GPUs only, where the applied layout is kept across agent restarts ("" = not kept);
    ``recheck_s``: how often the label and the blocking pods are looked at again.
    """

    enabled: bool = False
    config_file: str = "builtin:mig-parted-default"
    drain: bool = False
    state_file: str = ""
    recheck_s: float = 1.0


@dataclass(frozen=True, kw_only=True)
class MigTransition:
    """What applying ``config`` to a node changes: ``affected`` GPUs get their ``desired`` target."""

    config: str
    desired: DesiredMigLayout
    affected: tuple[int, ...]

    @property
    def targets(self) -> tuple[GpuMigTarget, ...]:
        """The targets of the affected GPUs, in index order (what a backend must do)."""
        return tuple(t for t in self.desired.targets if t.index in self.affected)

    def describe(self) -> str:
        if not self.affected:
            return f"{self.config}: the GPUs already have this layout"
        parts = []
        for t in self.targets:
            if not t.mig_enabled:
                parts.append(f"GPU {t.index}: MIG off")
            elif t.placement is None or not t.placement.instances:
                parts.append(f"GPU {t.index}: MIG on, no instances")
            else:
                parts.append(f"GPU {t.index}: " + ", ".join(str(i) for i in t.placement.instances))
        return f"{self.config}: " + "; ".join(parts)


def _wanted_profiles(target: GpuMigTarget) -> list[str]:
    if target.placement is None:
        return []
    return sorted(i.profile.name for i in target.placement.instances)


def gpu_matches(gpu: Gpu, target: GpuMigTarget) -> bool:
    """Whether ``gpu`` already has what ``target`` asks: the MIG mode, and the same profiles."""
    if not target.mig_enabled:
        return not gpu.mig_enabled
    return gpu.mig_enabled and sorted(m.profile for m in gpu.mig_instances) == _wanted_profiles(target)


def plan_transition(
    node: Node, config: MigConfig, *, device_ids: Mapping[int, int] | None = None
) -> MigTransition:
    """The GPUs ``config`` changes on ``node``; ``MigLayoutError`` (nothing changes) when it is invalid."""
    desired = desired_mig_layout(node, config, device_ids=device_ids)
    by_index = {g.index: g for g in node.gpus}
    affected = tuple(t.index for t in desired.targets if not gpu_matches(by_index[t.index], t))
    return MigTransition(config=config.name, desired=desired, affected=affected)


def blocking_pods(
    holders: Iterable[DeviceHolder], affected: Iterable[int], index_of: Mapping[str, int]
) -> tuple[tuple[str, str], ...]:
    """(namespace, pod), sorted, each once: pods holding a device backed by an affected GPU (the GPU
    itself, one of its replicas, one of its MIG devices). ``index_of`` maps GPU and MIG UUIDs to the
    index of their physical GPU."""
    every = list(holders)
    pods = {(h.namespace, h.pod) for g in set(affected) for h in holders_of(every, g, index_of)}
    return tuple(sorted(pods))


def repartitioned(
    node: Node, transition: MigTransition, *, mig_uuid: Callable[[Gpu, PlacedInstance], GpuUuid]
) -> Node:
    """``node`` with every affected GPU given its target: MIG mode, and instances in creation order
    (GPU-instance index = position) with UUIDs from ``mig_uuid``. Unaffected GPUs are kept as they are."""
    targets = {t.index: t for t in transition.targets}
    gpus = []
    for gpu in node.gpus:
        target = targets.get(gpu.index)
        if target is None:
            gpus.append(gpu)
            continue
        placed = target.placement.instances if target.mig_enabled and target.placement is not None else ()
        instances = tuple(
            MigInstance(profile=p.profile.name, start_slot=p.start_slot, uuid=mig_uuid(gpu, p), gi_index=gi)
            for gi, p in enumerate(placed)
        )
        gpus.append(replace(gpu, mig_enabled=target.mig_enabled, mig_instances=instances))
    return replace(node, gpus=tuple(gpus))


class MigBackend(Protocol):
    """Applies a transition to the GPUs and reports the node afterwards.

    ``apply`` gets the node as the agent serves it now and returns it as it is after the change (the
    agent advertises exactly that). It raises ``MigApplyError`` naming the GPU and the step when the
    GPUs refuse; a backend leaves a GPU it could not finish with MIG instances destroyed rather than
    half-built, and the caller re-reads the node (``current``) to advertise what is really there.
    """

    def apply(self, node: Node, transition: MigTransition) -> Node: ...

    def current(self, node: Node) -> Node: ...
