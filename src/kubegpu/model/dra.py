"""What kubegpu's DRA driver publishes: devices with attributes, ResourceSlices, and per-claim CDI specs.

Pure: a ``Node`` in, JSON-ready dicts out (``resource.k8s.io/v1`` and CDI 0.6.0), so the publisher and
the kubelet plugin only move them. Facts: the resource.k8s.io/v1 API and the CDI 0.6.0 spec (``docs/dra.md``).

Devices. A GPU without MIG is one device ``gpu-<index>``; a GPU in MIG mode is its MIG instances,
``gpu-<index>-mig-<profile>-<start slot>`` (the whole GPU is not allocatable while MIG is on).
Attributes (driver domain unless prefixed): ``type`` (``gpu``/``mig``), ``uuid``, ``index``,
``productName``, ``architecture``, ``cudaComputeCapability`` and ``driverVersion`` (semver),
``resource.kubernetes.io/pcieRoot`` and ``resource.kubernetes.io/pciBusID``, ``numaNode``; MIG:
``profile``, ``parentUUID``, ``parentIndex``; capacity ``memory``.

Topology, in two levels a claim can ``matchAttribute`` on:

- ``nvlinkDomain``: the connected component of the NVLink graph (every GPU reaches every other over
  NVLink, possibly through another GPU). DGX H100: one domain of 8. Seed-8gpu: two domains of 4.
- ``nvlinkClique``: a set of GPUs that are all pairwise NVLink-connected, found greedily in index
  order (a GPU joins the first clique it is linked to entirely). DGX-1 V100's hybrid cube mesh is one
  domain of 8 but two cliques of 4 (its quads); on NVSwitch systems and seed-8gpu clique = domain.

A GPU with no NVLink is a domain and a clique of its own. MIG instances carry their parent's values.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import combinations
from typing import Any

from kubegpu.errors import InputError
from kubegpu.model.gpu import gpu_model
from kubegpu.model.mig import profile
from kubegpu.model.names import MAX_LABEL, MAX_SUBDOMAIN
from kubegpu.model.node import Gpu, MigInstance, Node
from kubegpu.model.topology import LinkKind, Topology

__all__ = [
    "CDI_KIND",
    "CDI_VERSION",
    "DRIVER_NAME",
    "GPU_CLASS",
    "MAX_DEVICES_PER_SLICE",
    "MIG_CLASS",
    "AttributeKind",
    "ClaimDevice",
    "DeviceKind",
    "DeviceOrder",
    "DraDevice",
    "DraGpus",
    "allocated_devices",
    "cdi_device_name",
    "cdi_device_name_of",
    "cdi_ids",
    "cdi_spec",
    "device_classes",
    "dra_devices",
    "nvlink_cliques",
    "order_devices",
    "pairwise_nvlink",
    "resource_slices",
    "semver",
    "slice_name",
]

DRIVER_NAME = "gpu.kubegpu.io"
GPU_CLASS = "gpu.kubegpu.io"  # DeviceClass of whole GPUs
MIG_CLASS = "mig.kubegpu.io"  # DeviceClass of MIG instances
MAX_DEVICES_PER_SLICE = 128  # the API's limit without taints, counters or list attributes
CDI_VERSION = "0.6.0"  # the lowest that allows what the specs use (annotations)
CDI_KIND = "kubegpu.io/gpu"
STANDARD_DOMAIN = "resource.kubernetes.io"

ApiObject = dict[str, Any]


class DeviceKind(StrEnum):
    GPU = "gpu"
    MIG = "mig"


class AttributeKind(StrEnum):
    INT = "int"
    BOOL = "bool"
    STRING = "string"
    VERSION = "version"


@dataclass(frozen=True, kw_only=True)
class DraGpus:
    """Which GPUs of a node DRA serves; the device plugin serves the others, so no GPU is offered
    twice. Default: none (the device plugin serves every GPU)."""

    all: bool = False
    indexes: frozenset[int] = frozenset()

    def serves(self, index: int) -> bool:
        return self.all or index in self.indexes

    @property
    def any(self) -> bool:
        return self.all or bool(self.indexes)

    def __str__(self) -> str:
        if self.all:
            return "all"
        return ",".join(str(i) for i in sorted(self.indexes)) or "none"


@dataclass(frozen=True, kw_only=True)
class Attribute:
    kind: AttributeKind
    value: int | bool | str


@dataclass(frozen=True, kw_only=True)
class DraDevice:
    """One allocatable device of the pool; ``uuids`` is what a container gets (one UUID)."""

    name: str
    kind: DeviceKind
    gpu_index: int
    uuid: str
    memory_mib: int
    attributes: tuple[tuple[str, Attribute], ...]

    def attribute(self, key: str) -> int | bool | str | None:
        for k, a in self.attributes:
            if k == key:
                return a.value
        return None

    def to_api(self) -> ApiObject:
        return {
            "name": self.name,
            "attributes": {k: {str(a.kind): a.value} for k, a in self.attributes},
            "capacity": {"memory": {"value": f"{self.memory_mib}Mi"}},
        }


_SEMVER_CORE = re.compile(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def semver(text: str) -> str | None:
    """A driver or compute-capability version as semver 2.0.0: ``535.104.05`` -> ``535.104.5``
    (semver forbids leading zeros), ``9.0`` -> ``9.0.0``; ``None`` when it starts with no number."""
    m = _SEMVER_CORE.match(text.strip())
    if m is None:
        return None
    return ".".join(str(int(p or "0")) for p in m.groups())


def _dns_part(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _components(topology: Topology | None, n: int) -> list[int]:
    if topology is None or topology.n != n:
        return list(range(n))
    domain = [0] * n
    for d, group in enumerate(topology.nvlink_groups):
        for g in group:
            domain[g] = d
    return domain


def nvlink_cliques(topology: Topology | None, n: int) -> list[int]:
    """Each GPU's clique number: GPUs sharing one are pairwise NVLink-connected (see the module doc)."""
    if topology is None or topology.n != n:
        return list(range(n))
    cliques: list[list[int]] = []
    of = [0] * n
    for g in range(n):
        for c, members in enumerate(cliques):
            if all(topology.links[g][m].kind is LinkKind.NVLINK for m in members):
                members.append(g)
                of[g] = c
                break
        else:
            cliques.append([g])
            of[g] = len(cliques) - 1
    return of


def _common(
    gpu: Gpu,
    *,
    domain: int,
    clique: int,
    driver_version: str | None,
    pcie_root: str | None,
) -> list[tuple[str, Attribute]]:
    attrs: list[tuple[str, Attribute]] = []
    try:
        model = gpu_model(gpu.model)
    except InputError:
        model = None
    attrs.append(
        (
            "productName",
            Attribute(kind=AttributeKind.STRING, value=(model.product if model else gpu.model)[:64]),
        )
    )
    if model is not None:
        attrs.append(("architecture", Attribute(kind=AttributeKind.STRING, value=model.architecture.lower())))
        cc = semver(f"{model.compute_capability[0]}.{model.compute_capability[1]}")
        if cc is not None:
            attrs.append(("cudaComputeCapability", Attribute(kind=AttributeKind.VERSION, value=cc)))
    if driver_version:
        version = semver(driver_version)
        if version is not None:
            attrs.append(("driverVersion", Attribute(kind=AttributeKind.VERSION, value=version)))
    if gpu.numa_node is not None:
        attrs.append(("numaNode", Attribute(kind=AttributeKind.INT, value=gpu.numa_node)))
    if gpu.pci_bus_id:
        attrs.append(
            (
                f"{STANDARD_DOMAIN}/pciBusID",
                Attribute(kind=AttributeKind.STRING, value=gpu.pci_bus_id.lower()),
            )
        )
    if pcie_root:
        attrs.append((f"{STANDARD_DOMAIN}/pcieRoot", Attribute(kind=AttributeKind.STRING, value=pcie_root)))
    attrs.append(("nvlinkDomain", Attribute(kind=AttributeKind.INT, value=domain)))
    attrs.append(("nvlinkClique", Attribute(kind=AttributeKind.INT, value=clique)))
    return attrs


def _mig_memory_mib(gpu: Gpu, instance: MigInstance) -> int:
    try:
        p = profile(gpu.model, instance.profile)
    except InputError:
        return 0
    if p.memory_gib is not None:
        return round(p.memory_gib * 1024)
    return p.memory_gb * 1000 * 1000 * 1000 // (1024 * 1024)


def _device(
    gpu: Gpu,
    common: Sequence[tuple[str, Attribute]],
    *,
    name: str,
    kind: DeviceKind,
    uuid: str,
    memory_mib: int,
    extra: Sequence[tuple[str, Attribute]] = (),
) -> DraDevice:
    attrs = (
        ("type", Attribute(kind=AttributeKind.STRING, value=kind.value)),
        ("uuid", Attribute(kind=AttributeKind.STRING, value=uuid)),
        ("index", Attribute(kind=AttributeKind.INT, value=gpu.index)),
        *extra,
        *common,
    )
    return DraDevice(
        name=name, kind=kind, gpu_index=gpu.index, uuid=uuid, memory_mib=memory_mib, attributes=attrs
    )


def dra_devices(
    node: Node,
    *,
    driver_version: str | None = None,
    pcie_roots: Mapping[int, str] | None = None,
    include: Callable[[Gpu], bool] | None = None,
) -> tuple[DraDevice, ...]:
    """The node's devices in GPU index order (MIG instances by start slot); ``include`` picks the GPUs
    DRA serves (the others belong to the device plugin)."""
    n = len(node.gpus)
    domains = _components(node.topology, n)
    cliques = nvlink_cliques(node.topology, n)
    roots = pcie_roots or {}
    out: list[DraDevice] = []
    for gpu in node.gpus:
        if include is not None and not include(gpu):
            continue
        common = _common(
            gpu,
            domain=domains[gpu.index] if gpu.index < n else gpu.index,
            clique=cliques[gpu.index] if gpu.index < n else gpu.index,
            driver_version=driver_version,
            pcie_root=roots.get(gpu.index),
        )
        if not gpu.mig_enabled:
            whole = _device(
                gpu,
                common,
                name=f"gpu-{gpu.index}",
                kind=DeviceKind.GPU,
                uuid=str(gpu.uuid),
                memory_mib=gpu.memory_mib,
            )
            out.append(whole)
            continue
        for inst in sorted(gpu.mig_instances, key=lambda m: m.start_slot):
            out.append(
                _device(
                    gpu,
                    common,
                    name=f"gpu-{gpu.index}-mig-{_dns_part(inst.profile)}-{inst.start_slot}",
                    kind=DeviceKind.MIG,
                    uuid=str(inst.uuid),
                    memory_mib=_mig_memory_mib(gpu, inst),
                    extra=(
                        ("profile", Attribute(kind=AttributeKind.STRING, value=inst.profile)),
                        ("parentUUID", Attribute(kind=AttributeKind.STRING, value=str(gpu.uuid))),
                        ("parentIndex", Attribute(kind=AttributeKind.INT, value=gpu.index)),
                    ),
                )
            )
    return tuple(out)


class DeviceOrder(StrEnum):
    """The order of devices in the slice, which is the order the scheduler's allocator tries them in."""

    INDEX = "index"  # GPU index order, as every other driver publishes: first fit by index
    TOPOLOGY = "topology"  # fullest NVLink clique first, re-ordered as allocations change (below)


def order_devices(
    devices: Sequence[DraDevice], allocated: Collection[str], order: DeviceOrder = DeviceOrder.TOPOLOGY
) -> tuple[DraDevice, ...]:
    """``devices`` in the order that makes the stock allocator's first fit a best fit.

    The allocator takes the first solution in device order (backtracking over the devices still
    free). With devices grouped by NVLink clique, the cliques with the *fewest free* devices first,
    a claim that asks for ``k`` GPUs of one clique gets the fullest clique that still has ``k`` free,
    so whole cliques stay whole for the claims that need them; an unconstrained claim fills partly
    used cliques before it opens a free one. Ties: fewest free in the NVLink domain, then GPU index.
    MIG instances go to GPUs that already have instances allocated first, keeping other GPUs whole.
    ``allocated`` holds the names of the pool's devices claims hold now.
    """
    if order is DeviceOrder.INDEX:
        return tuple(sorted(devices, key=lambda d: (d.gpu_index, d.name)))
    taken = set(allocated)
    free_in: dict[tuple[str, object], int] = {}
    for d in devices:
        if d.name in taken:
            continue
        for level in ("nvlinkClique", "nvlinkDomain"):
            key = (level, d.attribute(level))
            free_in[key] = free_in.get(key, 0) + 1
    used_gpus = {d.gpu_index for d in devices if d.name in taken and d.kind is DeviceKind.MIG}

    def rank(d: DraDevice) -> tuple[int, int, int, int, int, str]:
        clique = free_in.get(("nvlinkClique", d.attribute("nvlinkClique")), 0)
        domain = free_in.get(("nvlinkDomain", d.attribute("nvlinkDomain")), 0)
        mig_fresh = 0 if d.kind is DeviceKind.GPU or d.gpu_index in used_gpus else 1
        return (int(d.kind is DeviceKind.MIG), mig_fresh, clique, domain, d.gpu_index, d.name)

    return tuple(sorted(devices, key=rank))


def allocated_devices(claims: Iterable[ApiObject], *, pool: str, driver: str = DRIVER_NAME) -> set[str]:
    """The device names of ``pool`` that the allocation results of ``claims`` (ResourceClaim objects) hold."""
    out: set[str] = set()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for r in (allocation.get("devices") or {}).get("results") or []:
            if r.get("driver") == driver and r.get("pool") == pool:
                out.add(str(r.get("device", "")))
    return out


def _label_value(node_name: str) -> str:
    """A node name as a label value: at most 63 characters, ending with a letter or digit."""
    return node_name[:MAX_LABEL].rstrip("-.")


def slice_name(node_name: str, driver: str, k: int) -> str:
    """``<node>-<driver>-<k>``; where that is longer than an object name may be (a node name near its own
    253 characters), the node part is cut short and a digest of the whole node name keeps it unique."""
    name = f"{node_name}-{driver}-{k}"
    if len(name) <= MAX_SUBDOMAIN:  # a ResourceSlice's name is a DNS-1123 subdomain
        return name
    tail = f"-{hashlib.sha256(node_name.encode()).hexdigest()[:10]}-{driver}-{k}"
    return node_name[: MAX_SUBDOMAIN - len(tail)].rstrip("-.") + tail


def resource_slices(
    *,
    node_name: str,
    node_uid: str | None,
    devices: Sequence[DraDevice],
    generation: int,
    driver: str = DRIVER_NAME,
) -> list[ApiObject]:
    """The pool's ResourceSlices (pool = node), at most ``MAX_DEVICES_PER_SLICE`` devices each, named
    ``<node>-<driver>-<k>`` (``slice_name``) so publishing is an idempotent create-or-replace; at least
    one (possibly empty) slice, because an empty pool is not the same as no pool."""
    chunks = [
        list(devices[i : i + MAX_DEVICES_PER_SLICE]) for i in range(0, len(devices), MAX_DEVICES_PER_SLICE)
    ]
    chunks = chunks or [[]]
    slices: list[ApiObject] = []
    for k, chunk in enumerate(chunks):
        metadata: ApiObject = {
            "name": slice_name(node_name, driver, k),
            "labels": {"app.kubernetes.io/managed-by": "kubegpu", "kubegpu.io/node": _label_value(node_name)},
        }
        if node_uid:
            metadata["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}
            ]
        slices.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": metadata,
                "spec": {
                    "driver": driver,
                    "nodeName": node_name,
                    "pool": {"name": node_name, "generation": generation, "resourceSliceCount": len(chunks)},
                    "devices": [d.to_api() for d in chunk],
                },
            }
        )
    return slices


def device_classes(driver: str = DRIVER_NAME) -> list[ApiObject]:
    """The two DeviceClasses: whole GPUs and MIG instances of this driver."""

    def one(name: str, kind: DeviceKind) -> ApiObject:
        expression = f'device.driver == "{driver}" && device.attributes["{driver}"].type == "{kind.value}"'
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "kubegpu"}},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        }

    return [one(GPU_CLASS, DeviceKind.GPU), one(MIG_CLASS, DeviceKind.MIG)]


@dataclass(frozen=True, kw_only=True)
class ClaimDevice:
    """One allocation result of a claim that names this driver's device."""

    request: str  # the base request name (``gpus``, not ``gpus/a100``)
    device: DraDevice


def cdi_device_name(claim_uid: str, request: str) -> str:
    """The CDI device of one request of one claim; the claim UID in it keeps runtime caches honest."""
    return f"{claim_uid}-{_dns_part(request) or 'request'}"


def cdi_device_name_of(claim_uid: str, device: str) -> str:
    """The CDI device of one allocated device (its ``KUBEGPU_DEVICE_<NAME>`` variable); kubelet reports a
    device's health in the pod's status under its first CDI ID, so each device gets its own."""
    return f"{claim_uid}-dev-{device}"


def cdi_ids(claim_uid: str, request: str, device: str, *, first_of_request: bool) -> tuple[str, ...]:
    """What NodePrepareResources answers for one device: its own CDI device, and for the request's first
    device also the request's (which sets NVIDIA_VISIBLE_DEVICES once for all of the request's GPUs)."""
    own = f"{CDI_KIND}={cdi_device_name_of(claim_uid, device)}"
    if not first_of_request:
        return (own,)
    return (own, f"{CDI_KIND}={cdi_device_name(claim_uid, request)}")


def cdi_spec(
    claim_uid: str,
    devices: Iterable[ClaimDevice],
    *,
    mounts: Sequence[tuple[str, str]] = (),
    control_nodes: Sequence[str] = (),
    gpu_nodes: bool = False,
    device_nodes: Mapping[str, Sequence[str]] | None = None,
    common: ApiObject | None = None,
) -> ApiObject:
    """The claim's CDI spec: one CDI device per request with ``NVIDIA_VISIBLE_DEVICES`` = its UUIDs
    (in device order), one per allocated device with ``KUBEGPU_DEVICE_<NAME>`` = its UUID, plus
    ``mounts`` (host path, container path) read-only, e.g. the simulated ``nvidia-smi``. On real GPUs,
    ``control_nodes`` (``/dev/nvidiactl``, ``/dev/nvidia-uvm`` ...) and, with ``gpu_nodes``,
    ``/dev/nvidia<index>`` of each GPU behind the request (a MIG instance's parent) followed by the
    ``device_nodes`` of each device (by name: a MIG device's nvidia-caps nodes), the same device nodes
    the device plugin passes. ``common`` (``model.cdi.common_edits``: control nodes, the driver's
    libraries, binaries, firmware, IPC sockets) becomes the spec's own container edits, applied with
    any of its devices, as in the agent's spec."""
    by_request: dict[str, list[DraDevice]] = {}
    for cd in devices:
        by_request.setdefault(cd.request, []).append(cd.device)
    entries: list[ApiObject] = []
    for request, devs in by_request.items():
        uuids = ",".join(d.uuid for d in devs)
        edits: ApiObject = {
            "env": [
                f"NVIDIA_VISIBLE_DEVICES={uuids}",
                f"KUBEGPU_CLAIM_DEVICES={','.join(d.name for d in devs)}",
            ]
        }
        nodes = list(
            dict.fromkeys(
                [
                    *control_nodes,
                    *(f"/dev/nvidia{i}" for i in dict.fromkeys(d.gpu_index for d in devs) if gpu_nodes),
                    *(p for d in devs for p in (device_nodes or {}).get(d.name, ())),
                ]
            )
        )
        if nodes:
            edits["deviceNodes"] = [{"path": p} for p in nodes]
        if mounts:
            edits["mounts"] = [
                {"hostPath": h, "containerPath": c, "options": ["ro", "nosuid", "nodev", "bind"]}
                for h, c in mounts
            ]
        entries.append({"name": cdi_device_name(claim_uid, request), "containerEdits": edits})
        for d in devs:
            variable = "KUBEGPU_DEVICE_" + re.sub(r"[^A-Z0-9]", "_", d.name.upper())
            entries.append(
                {
                    "name": cdi_device_name_of(claim_uid, d.name),
                    "containerEdits": {"env": [f"{variable}={d.uuid}"]},
                }
            )
    spec: ApiObject = {"cdiVersion": CDI_VERSION, "kind": CDI_KIND, "devices": entries}
    if common:
        spec["containerEdits"] = common
    return spec


def pairwise_nvlink(topology: Topology, devices: Iterable[int]) -> bool:
    """Whether every pair of ``devices`` is directly NVLink-connected (what ``nvlinkClique`` promises)."""
    return all(topology.links[a][b].kind is LinkKind.NVLINK for a, b in combinations(sorted(devices), 2))
