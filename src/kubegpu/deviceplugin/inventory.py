"""The inventory: which resources this node advertises and which devices each one holds.

Built from a ``Node`` and an ``AgentConfig``, following NVIDIA's rules so users get the names and IDs
they already rely on:

* MIG strategy ``none``: every GPU (MIG-enabled or not) is ``nvidia.com/gpu``; ``single``: MIG
  instances are ``nvidia.com/gpu`` (all GPUs MIG-enabled, each with instances, all of one profile);
  ``mixed``: ``nvidia.com/mig-<profile>`` per profile next to ``nvidia.com/gpu`` for non-MIG GPUs.
* Sharing (time-slicing or MPS): each device of a shared resource becomes ``replicas`` devices with
  IDs ``<UUID>::<i>``, renamed ``<name>.shared`` under ``renameByDefault``. kubegpu adds per-GPU
  replica counts, exclusive GPUs (which stay under the original name) and its own renames.

Every device remembers the physical GPU behind it, so health and topology work for replicas and MIG
instances too. Impossible layouts raise ``ConfigError`` naming the key and the GPU.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import NewType

from kubegpu.deviceplugin.config import AgentConfig, DeviceIdStrategy, MigStrategy, SharingKind
from kubegpu.echo import shorten
from kubegpu.errors import ConfigError, SourceError
from kubegpu.model.node import Gpu, MigInstance, Node, uuid_problem

__all__ = [
    "GPU_RESOURCE",
    "Device",
    "DeviceId",
    "Inventory",
    "Resource",
    "ResourceKind",
    "ResourceName",
    "build_inventory",
    "is_extended_resource_name",
    "mig_resource_name",
]

log = logging.getLogger(__name__)

DeviceId = NewType("DeviceId", str)
ResourceName = NewType("ResourceName", str)

GPU_RESOURCE = ResourceName("nvidia.com/gpu")
REPLICA_SEPARATOR = "::"


class ResourceKind(Enum):
    """Whether a resource's devices are whole GPUs or MIG instances."""

    GPU = "gpu"
    MIG = "mig"


@dataclass(frozen=True, kw_only=True)
class Device:
    """One advertised device: a GPU, a MIG instance, or a replica of either."""

    id: DeviceId
    gpu: int  # index of the physical GPU behind it
    uuid: str  # the GPU's or MIG instance's UUID, without a replica suffix
    mig: MigInstance | None = None
    mig_position: int | None = None  # the instance's position on its GPU (NVIDIA's "<gpu>:<mig>")
    replica: int | None = None
    numa_node: int | None = None
    paths: tuple[str, ...] = ()

    def visible_id(self, strategy: DeviceIdStrategy) -> str:
        """What goes into NVIDIA_VISIBLE_DEVICES / mount / CDI names under ``strategy``."""
        if strategy is DeviceIdStrategy.UUID:
            return self.uuid
        if self.mig_position is not None:
            return f"{self.gpu}:{self.mig_position}"
        return str(self.gpu)


@dataclass(frozen=True, kw_only=True)
class Resource:
    """One extended resource served on its own socket."""

    name: ResourceName
    kind: ResourceKind
    devices: tuple[Device, ...]
    sharing: SharingKind | None = None
    fail_requests_greater_than_one: bool = False
    _by_id: Mapping[str, Device] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {d.id: d for d in self.devices})

    def device(self, device_id: str) -> Device | None:
        return self._by_id.get(device_id)

    @property
    def replicas_per_gpu(self) -> Mapping[int, int]:
        counts: dict[int, int] = {}
        for d in self.devices:
            counts[d.gpu] = counts.get(d.gpu, 0) + 1
        return counts


@dataclass(frozen=True, kw_only=True)
class Inventory:
    """All resources of a node; ``warnings`` are logged by the agent."""

    node: Node
    resources: tuple[Resource, ...]
    warnings: tuple[str, ...] = ()

    def resource(self, name: str) -> Resource | None:
        for r in self.resources:
            if r.name == name:
                return r
        return None


_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def is_extended_resource_name(name: str) -> bool:
    """kubelet's ``IsExtendedResourceName`` as the protocol reference describes it."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    qualified = "requests." + name
    if qualified.count("/") != 1:
        return False
    prefix, short = qualified.split("/")
    return (
        0 < len(prefix) <= 253
        and bool(_DNS1123_SUBDOMAIN.match(prefix))
        and 0 < len(short) <= 63
        and bool(_QUALIFIED_NAME.match(short))
    )


def mig_resource_name(profile: str) -> ResourceName:
    """``1g.10gb+me`` -> ``nvidia.com/mig-1g.10gb.me``."""
    return ResourceName("nvidia.com/mig-" + profile.replace("+", "."))


def _gpu_paths(gpu: Gpu) -> tuple[str, ...]:
    return (f"/dev/nvidia{gpu.index}",)


def _whole(gpu: Gpu) -> Device:
    return Device(
        id=DeviceId(gpu.uuid), gpu=gpu.index, uuid=gpu.uuid, numa_node=gpu.numa_node, paths=_gpu_paths(gpu)
    )


def _mig(gpu: Gpu, position: int, mig: MigInstance) -> Device:
    return Device(
        id=DeviceId(mig.uuid),
        gpu=gpu.index,
        uuid=mig.uuid,
        mig=mig,
        mig_position=position,
        numa_node=gpu.numa_node,
        paths=_gpu_paths(gpu),
    )


def _base_resources(node: Node, strategy: MigStrategy) -> tuple[dict[ResourceName, list[Device]], list[str]]:
    out: dict[ResourceName, list[Device]] = {}
    warnings: list[str] = []
    if strategy is MigStrategy.NONE:
        out[GPU_RESOURCE] = [_whole(g) for g in node.gpus]
        return out, warnings
    mig_gpus = [g for g in node.gpus if g.mig_enabled]
    if strategy is MigStrategy.SINGLE:
        if not mig_gpus:
            out[GPU_RESOURCE] = [_whole(g) for g in node.gpus]
            return out, warnings
        plain = [g for g in node.gpus if not g.mig_enabled]
        if plain:
            raise ConfigError(
                f"flags.migStrategy: single needs every GPU MIG-enabled or none; GPU {plain[0].index} "
                f"has MIG disabled while GPU {mig_gpus[0].index} has it enabled (use mixed)"
            )
        profiles: set[str] = set()
        for g in mig_gpus:
            if not g.mig_instances:
                raise ConfigError(
                    f"flags.migStrategy: single: GPU {g.index} is MIG-enabled but has no MIG instances"
                )
            profiles |= {m.profile for m in g.mig_instances}
        if len(profiles) > 1:
            raise ConfigError(
                f"flags.migStrategy: single needs MIG instances of one profile, found "
                f"{', '.join(sorted(profiles))} (use mixed)"
            )
        out[GPU_RESOURCE] = [_mig(g, i, m) for g in mig_gpus for i, m in enumerate(g.mig_instances)]
        return out, warnings
    # mixed
    for g in node.gpus:
        if not g.mig_enabled:
            out.setdefault(GPU_RESOURCE, []).append(_whole(g))
            continue
        if not g.mig_instances:
            warnings.append(
                f"GPU {g.index} is MIG-enabled but has no MIG instances; nothing advertised for it"
            )
        for i, m in enumerate(g.mig_instances):
            out.setdefault(mig_resource_name(m.profile), []).append(_mig(g, i, m))
    return out, warnings


def _gpu_index(node: Node, ref: str, where: str) -> int:
    if ref.isdigit():
        index = int(ref)
        if 0 <= index < len(node.gpus):
            return index
        raise ConfigError(f"{where}: no GPU {index} on this node (GPUs 0..{len(node.gpus) - 1})")
    for g in node.gpus:
        if g.uuid.lower() == ref.lower() or any(m.uuid.lower() == ref.lower() for m in g.mig_instances):
            return g.index
    raise ConfigError(f"{where}: no GPU with UUID {shorten(ref)} on this node")


def _replicate(device: Device, count: int) -> list[Device]:
    return [
        Device(
            id=DeviceId(f"{device.uuid}{REPLICA_SEPARATOR}{i}"),
            gpu=device.gpu,
            uuid=device.uuid,
            mig=device.mig,
            mig_position=device.mig_position,
            replica=i,
            numa_node=device.numa_node,
            paths=device.paths,
        )
        for i in range(count)
    ]


def _check_uuids(node: Node) -> None:
    """Refuse a UUID from any source (NVML, spec, capture) that is unsafe as a device ID."""
    for gpu in node.gpus:
        for what, uuid in (("UUID", gpu.uuid), *(("MIG instance UUID", m.uuid) for m in gpu.mig_instances)):
            problem = uuid_problem(uuid)
            if problem is not None:
                raise SourceError(
                    f"GPU {gpu.index}: {what} {shorten(uuid)} {problem}; it would become a device ID, "
                    "an NVIDIA_VISIBLE_DEVICES entry and a mount path, so nothing is advertised"
                )


def build_inventory(node: Node, config: AgentConfig) -> Inventory:
    """Resources and devices for ``node`` under ``config``; raises ``ConfigError`` on impossible mixes
    and ``SourceError`` for a UUID unsafe as a device ID."""
    _check_uuids(node)
    base, warnings = _base_resources(node, config.mig_strategy)
    kinds = {
        name: (ResourceKind.MIG if any(d.mig is not None for d in devs) else ResourceKind.GPU)
        for name, devs in base.items()
    }
    sharing = config.sharing
    resources: list[Resource] = []
    shared_names = {r.name for r in sharing.resources} if sharing else set()
    if sharing is not None:
        prefix = f"sharing.{sharing.kind.value}"
        if sharing.kind is SharingKind.MPS and any(k is ResourceKind.MIG for k in kinds.values()):
            raise ConfigError(f"{prefix}: MPS sharing is not supported with MIG devices")
        for i, res in enumerate(sharing.resources):
            if res.name not in base:
                warnings.append(
                    f"{prefix}.resources[{i}]: {res.name} is not advertised on this node; ignored"
                )
        per_gpu = {
            _gpu_index(node, ref, f"kubegpu.sharing.replicas.{ref}"): n for ref, n in sharing.per_gpu_replicas
        }
        exclusive = {
            _gpu_index(node, ref, f"kubegpu.sharing.exclusive[{j}]")
            for j, ref in enumerate(sharing.exclusive)
        }
    for name, devices in base.items():
        if sharing is None or name not in shared_names:
            resources.append(Resource(name=name, kind=kinds[name], devices=tuple(devices)))
            continue
        i, spec = next((i, r) for i, r in enumerate(sharing.resources) if r.name == name)
        where = f"sharing.{sharing.kind.value}.resources[{i}]"
        shared_name = ResourceName(spec.rename or (f"{name}.shared" if sharing.rename_by_default else name))
        if not is_extended_resource_name(shared_name):
            key = f"kubegpu.sharing.rename.{name}" if spec.rename else f"{where}.name"
            raise ConfigError(f"{key}: {shorten(shared_name)} is not a valid extended resource name")
        # As NVIDIA's plugin runs it, every device of the resource is shared; kubegpu's exclusive GPUs
        # are the only ones kept whole.
        kept: list[Device] = []
        shared: list[Device] = []
        for d in devices:
            if d.gpu in exclusive:
                kept.append(d)
            else:
                shared.extend(_replicate(d, per_gpu.get(d.gpu, spec.replicas)))
        if kept and shared_name == name:
            raise ConfigError(
                f"{where}: some GPUs stay unshared while others are shared under the same name {name}; "
                f"set renameByDefault: true or kubegpu.sharing.rename"
            )
        if kept:
            resources.append(Resource(name=name, kind=kinds[name], devices=tuple(kept)))
        if shared:
            resources.append(
                Resource(
                    name=shared_name,
                    kind=kinds[name],
                    devices=tuple(shared),
                    sharing=sharing.kind,
                    fail_requests_greater_than_one=sharing.fail_requests_greater_than_one,
                )
            )
    names = [r.name for r in resources]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"sharing: two resources would both be called {name}; choose distinct renames")
    return Inventory(node=node, resources=tuple(r for r in resources if r.devices), warnings=tuple(warnings))
