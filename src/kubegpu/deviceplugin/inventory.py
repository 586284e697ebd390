"""The inventory: which resources this node advertises and which devices each one holds.

Built from a ``Node`` and an ``AgentConfig``, following NVIDIA's rules so users get the names and IDs
they already rely on:

* MIG strategy ``none``: every GPU (MIG-enabled or not) is ``nvidia.com/gpu``; ``single``: MIG
  instances are ``nvidia.com/gpu`` (all GPUs MIG-enabled, each with instances, all of one profile);
  ``mixed``: ``nvidia.com/mig-<profile>`` per profile next to ``nvidia.com/gpu`` for non-MIG GPUs.
* Sharing (time-slicing or MPS): each device of a shared resource becomes ``replicas`` devices with
  IDs ``<UUID>::<i>``, renamed ``<name>.shared`` under ``renameByDefault``. kubegpu adds per-GPU
  replica counts, exclusive GPUs (which stay under the original name) and its own renames.

``build_inventory`` is three steps, each its own function: ``resolve_sharing`` (the config's sharing
against this node's GPUs), ``split_resources`` (full GPUs / MIG instances / replicas and their names)
and ``check_names`` (valid resource names, no two resources with one name).

Every device remembers the physical GPU behind it, so health and topology work for replicas and MIG
instances too. Impossible layouts raise ``ConfigError`` naming the key and the GPU.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import NewType

from kubegpu.deviceplugin.config import (
    SHARED_SUFFIX,
    AgentConfig,
    DeviceIdStrategy,
    MigStrategy,
    Sharing,
    SharingKind,
)
from kubegpu.echo import shorten
from kubegpu.errors import ConfigError, SourceError
from kubegpu.model.cdi import NO_MIG_MINORS, MigMinors
from kubegpu.model.names import is_dns_subdomain
from kubegpu.model.node import Gpu, MigInstance, Node, uuid_problem

__all__ = [
    "GPU_RESOURCE",
    "MILLI_PER_GPU",
    "MILLI_RESOURCE",
    "Candidate",
    "Device",
    "DeviceId",
    "Inventory",
    "Resource",
    "ResourceKind",
    "ResourceName",
    "SharedAs",
    "SharingPlan",
    "build_inventory",
    "check_names",
    "is_extended_resource_name",
    "mig_resource_name",
    "milli_resource",
    "resolve_sharing",
    "split_resources",
]

log = logging.getLogger(__name__)

DeviceId = NewType("DeviceId", str)
ResourceName = NewType("ResourceName", str)

GPU_RESOURCE = ResourceName("nvidia.com/gpu")
MILLI_RESOURCE = ResourceName("kubegpu.io/gpu-milli")
MILLI_PER_GPU = 1000  # devices of kubegpu.io/gpu-milli per whole GPU
REPLICA_SEPARATOR = "::"


class ResourceKind(Enum):
    """Whether a resource's devices are whole GPUs, MIG instances or thousandths of a GPU."""

    GPU = "gpu"
    MIG = "mig"
    MILLI = "milli"  # kubegpu.io/gpu-milli: tokens; the GPU a container gets is the extender's choice


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


_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def is_extended_resource_name(name: str) -> bool:
    """kubelet's ``IsExtendedResourceName`` as the protocol reference describes it."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    qualified = "requests." + name
    if qualified.count("/") != 1:
        return False
    prefix, short = qualified.split("/")
    return is_dns_subdomain(prefix) and 0 < len(short) <= 63 and bool(_QUALIFIED_NAME.fullmatch(short))


def mig_resource_name(profile: str) -> ResourceName:
    """``1g.10gb+me`` -> ``nvidia.com/mig-1g.10gb.me``."""
    return ResourceName("nvidia.com/mig-" + profile.replace("+", "."))


def _gpu_paths(gpu: Gpu) -> tuple[str, ...]:
    return (f"/dev/nvidia{gpu.index}",)


def _whole(gpu: Gpu) -> Device:
    return Device(
        id=DeviceId(gpu.uuid), gpu=gpu.index, uuid=gpu.uuid, numa_node=gpu.numa_node, paths=_gpu_paths(gpu)
    )


def _mig(gpu: Gpu, position: int, mig: MigInstance, minors: MigMinors) -> Device:
    # NVIDIA: the parent's node plus the nvidia-caps nodes of the GPU instance and of its compute
    # instance (kubegpu's MIG devices hold one full-size compute instance, ID 0)
    return Device(
        id=DeviceId(mig.uuid),
        gpu=gpu.index,
        uuid=mig.uuid,
        mig=mig,
        mig_position=position,
        numa_node=gpu.numa_node,
        paths=(*_gpu_paths(gpu), *minors.caps_paths(gpu.index, mig.gi_index)),
    )


def _base_resources(
    node: Node, strategy: MigStrategy, minors: MigMinors = NO_MIG_MINORS
) -> tuple[dict[ResourceName, list[Device]], list[str]]:
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
        out[GPU_RESOURCE] = [_mig(g, i, m, minors) for g in mig_gpus for i, m in enumerate(g.mig_instances)]
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
            out.setdefault(mig_resource_name(m.profile), []).append(_mig(g, i, m, minors))
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


@dataclass(frozen=True, kw_only=True)
class SharedAs:
    """How one shared resource is advertised: the name of its replicas and the config key that chose
    that name, ``replicas`` per GPU unless ``SharingPlan.per_gpu_replicas`` says otherwise."""

    name: ResourceName
    name_key: str
    entry: str  # its sharing.<kind>.resources[i]
    replicas: int


@dataclass(frozen=True, kw_only=True)
class SharingPlan:
    """The config's sharing resolved against the node: GPU references are GPU indices."""

    kind: SharingKind
    fail_requests_greater_than_one: bool
    resources: Mapping[ResourceName, SharedAs]  # by the name of the resource that is shared
    per_gpu_replicas: Mapping[int, int] = field(default_factory=dict)
    exclusive: frozenset[int] = frozenset()


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A resource the split produced, with the config key that chose its name (None: NVIDIA's fixed
    names, ``nvidia.com/gpu`` and ``nvidia.com/mig-<profile>``). Its devices may be empty."""

    resource: Resource
    name_key: str | None = None


def resolve_sharing(node: Node, sharing: Sharing | None) -> SharingPlan | None:
    """Step 1: which resources are shared, under which name, with how many replicas on which GPU,
    and which GPUs stay whole. Raises ``ConfigError`` for a GPU the node does not have."""
    if sharing is None:
        return None
    prefix = f"sharing.{sharing.kind.value}"
    resources: dict[ResourceName, SharedAs] = {}
    for i, res in enumerate(sharing.resources):
        entry = f"{prefix}.resources[{i}]"
        if res.rename:
            name, key = res.rename, f"kubegpu.sharing.rename.{res.name}"
        else:
            name = f"{res.name}{SHARED_SUFFIX}" if sharing.rename_by_default else res.name
            key = f"{entry}.name"
        shared = SharedAs(name=ResourceName(name), name_key=key, entry=entry, replicas=res.replicas)
        resources.setdefault(ResourceName(res.name), shared)
    per_gpu = {
        _gpu_index(node, ref, f"kubegpu.sharing.replicas.{ref}"): n for ref, n in sharing.per_gpu_replicas
    }
    exclusive = frozenset(
        _gpu_index(node, ref, f"kubegpu.sharing.exclusive[{j}]") for j, ref in enumerate(sharing.exclusive)
    )
    return SharingPlan(
        kind=sharing.kind,
        fail_requests_greater_than_one=sharing.fail_requests_greater_than_one,
        resources=resources,
        per_gpu_replicas=per_gpu,
        exclusive=exclusive,
    )


def split_resources(
    node: Node, mig_strategy: MigStrategy, plan: SharingPlan | None, mig_minors: MigMinors = NO_MIG_MINORS
) -> tuple[list[Candidate], list[str]]:
    """Step 2: the node's devices as resources: full GPUs and MIG instances under the MIG strategy,
    then each shared resource split into its exclusive GPUs (original name) and its replicas (the
    plan's name; present even when empty, so that its name is checked). Returns the candidates and
    warnings; raises ``ConfigError`` on layouts NVIDIA refuses. ``mig_minors`` gives MIG devices their
    ``nvidia-caps`` device nodes."""
    base, warnings = _base_resources(node, mig_strategy, mig_minors)
    kinds = {
        name: (ResourceKind.MIG if any(d.mig is not None for d in devs) else ResourceKind.GPU)
        for name, devs in base.items()
    }
    if plan is not None:
        if plan.kind is SharingKind.MPS and any(k is ResourceKind.MIG for k in kinds.values()):
            raise ConfigError(f"sharing.{plan.kind.value}: MPS sharing is not supported with MIG devices")
        for name, planned in plan.resources.items():
            if name not in base:
                warnings.append(f"{planned.entry}: {name} is not advertised on this node; ignored")
    out: list[Candidate] = []
    for name, devices in base.items():
        shared_as = plan.resources.get(name) if plan is not None else None
        if plan is None or shared_as is None:
            out.append(Candidate(resource=Resource(name=name, kind=kinds[name], devices=tuple(devices))))
            continue
        # As NVIDIA's plugin runs it, every device of the resource is shared; kubegpu's exclusive GPUs
        # are the only ones kept whole.
        kept = [d for d in devices if d.gpu in plan.exclusive]
        shared = [
            replica
            for d in devices
            if d.gpu not in plan.exclusive
            for replica in _replicate(d, plan.per_gpu_replicas.get(d.gpu, shared_as.replicas))
        ]
        if kept and shared_as.name == name:
            raise ConfigError(
                f"{shared_as.entry}: some GPUs stay unshared while others are shared under the same name "
                f"{name}; set renameByDefault: true or kubegpu.sharing.rename"
            )
        if kept:
            out.append(Candidate(resource=Resource(name=name, kind=kinds[name], devices=tuple(kept))))
        replicas = Resource(
            name=shared_as.name,
            kind=kinds[name],
            devices=tuple(shared),
            sharing=plan.kind,
            fail_requests_greater_than_one=plan.fail_requests_greater_than_one,
        )
        out.append(Candidate(resource=replicas, name_key=shared_as.name_key))
    return out, warnings


def milli_resource(node: Node, resources: Sequence[Resource]) -> Resource:
    """``kubegpu.io/gpu-milli``: ``MILLI_PER_GPU`` devices ``<UUID>::<i>`` for every GPU this node
    serves whole (a ``nvidia.com/gpu`` device without MIG; MIG-enabled GPUs and the DRA driver's GPUs are
    not shared). Each device remembers its GPU, so all of a GPU's go Unhealthy with it."""
    whole = {d.gpu for r in resources if r.kind is ResourceKind.GPU for d in r.devices if d.mig is None}
    devices = tuple(
        replace(_whole(g), id=DeviceId(f"{g.uuid}{REPLICA_SEPARATOR}{i}"), replica=i)
        for g in node.gpus
        if g.index in whole and not g.mig_enabled
        for i in range(MILLI_PER_GPU)
    )
    return Resource(name=MILLI_RESOURCE, kind=ResourceKind.MILLI, devices=devices)


def check_names(candidates: Sequence[Candidate]) -> None:
    """Step 3: every name the config chose is a valid extended resource name (the error names the
    key), and no two resources that advertise devices share a name."""
    for c in candidates:
        if c.name_key is not None and not is_extended_resource_name(c.resource.name):
            raise ConfigError(
                f"{c.name_key}: {shorten(c.resource.name)} is not a valid extended resource name"
            )
    seen: set[str] = set()
    for c in candidates:
        if not c.resource.devices:
            continue  # not advertised
        if c.resource.name in seen:
            raise ConfigError(
                f"sharing: two resources would both be called {c.resource.name}; choose distinct renames"
            )
        seen.add(c.resource.name)


def build_inventory(node: Node, config: AgentConfig, *, mig_minors: MigMinors = NO_MIG_MINORS) -> Inventory:
    """Resources and devices for ``node`` under ``config``: resolve sharing, split resources, check
    names. Raises ``ConfigError`` on impossible mixes and ``SourceError`` for a UUID unsafe as a device
    ID; nothing is built then. ``mig_minors`` (``/proc/driver/nvidia-caps/mig-minors``) adds each MIG
    device's ``nvidia-caps`` nodes to its paths."""
    _check_uuids(node)
    plan = resolve_sharing(node, config.sharing)
    candidates, warnings = split_resources(node, config.mig_strategy, plan, mig_minors)
    check_names(candidates)
    dra = config.dra_gpus
    if dra.any:
        missing = sorted(i for i in dra.indexes if not any(g.index == i for g in node.gpus))
        if missing:
            raise ConfigError(
                f"kubegpu.dra.gpus: GPU {', '.join(map(str, missing))} is not on this node "
                f"(GPUs {', '.join(str(g.index) for g in node.gpus) or 'none'})"
            )
        # GPUs the DRA driver serves are not advertised here: one GPU, one owner
        candidates = [
            replace(
                c,
                resource=replace(
                    c.resource, devices=tuple(d for d in c.resource.devices if not dra.serves(d.gpu))
                ),
            )
            for c in candidates
        ]
    resources = tuple(c.resource for c in candidates if c.resource.devices)
    if config.fractional:
        milli = milli_resource(node, resources)
        if milli.devices:
            resources = (*resources, milli)
        else:
            warnings.append(
                "kubegpu.fractional: no whole GPU on this node to share; kubegpu.io/gpu-milli not served"
            )
    return Inventory(node=node, resources=resources, warnings=tuple(warnings))
