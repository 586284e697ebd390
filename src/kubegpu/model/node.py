"""A GPU node as kubegpu sees it: its GPUs, their MIG instances, and the topology between them.

Every source (a node spec, NVML, a capture) produces a ``Node``; everything downstream (inventory,
allocation, the device plugin) reads only this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NewType

from kubegpu.model.gpu import CATALOGUE, GpuModel
from kubegpu.model.names import MAX_SUBDOMAIN, is_dns_subdomain
from kubegpu.model.topology import Topology

__all__ = [
    "MAX_GPUS",
    "MAX_NODE_NAME",
    "MAX_NUMA_NODE",
    "UUID_MAX",
    "Gpu",
    "GpuUuid",
    "MigAttributes",
    "MigInstance",
    "Node",
    "NodeName",
    "node_name_problem",
    "pci_bus_id_problem",
    "sysfs_bus_id",
    "uuid_aliases",
    "uuid_problem",
]

GpuUuid = NewType("GpuUuid", str)
NodeName = NewType("NodeName", str)

# A UUID becomes a device ID, a value in NVIDIA_VISIBLE_DEVICES (comma-separated), a mount path
# under /var/run/nvidia-container-devices and a CDI name, so only a safe alphabet is accepted:
# GPU-/MIG- then letters, digits and '-', plus old drivers' MIG-GPU-<uuid>/<gi>/<ci> form.
UUID_MAX = 63  # the proto's limit for a Device ID
_UUID_RE = re.compile(r"(GPU|MIG)-[A-Za-z0-9][A-Za-z0-9-]*")
_LEGACY_MIG_RE = re.compile(r"MIG-GPU-[A-Za-z0-9][A-Za-z0-9-]*/[0-9]+/[0-9]+")


# A node with more GPUs than this is a typo, not a machine (NVLink domains top out at 576 GPUs).
MAX_GPUS = 1024
# Linux numbers NUMA nodes below 1024 (MAX_NUMNODES with the largest NODES_SHIFT).
MAX_NUMA_NODE = 1023
# A node name is a Kubernetes Node's name: a DNS-1123 subdomain (dot-separated lower-case labels of
# letters, digits and '-'), at most 253 characters.
MAX_NODE_NAME = MAX_SUBDOMAIN
# A PCI address as nvidia-smi and NVML print it (``00000000:3B:00.0``) or as sysfs does
# (``0000:3b:00.0``): domain, bus, device (hex), then the function 0-7.
_PCI_BUS_ID_RE = re.compile(r"(?:[0-9A-Fa-f]{4}|[0-9A-Fa-f]{8}):[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")


def node_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a Kubernetes node (a phrase to follow the name), or ``None``."""
    if len(name) > MAX_NODE_NAME:
        return f"is {len(name)} characters long; a node name has at most {MAX_NODE_NAME}"
    if not is_dns_subdomain(name):
        return "is not a valid node name (lower-case letters, digits, '-' and '.', as Kubernetes allows)"
    return None


def pci_bus_id_problem(bus_id: str) -> str | None:
    """Why ``bus_id`` is not a PCI address like ``00000000:3B:00.0`` (a phrase), or ``None``."""
    if _PCI_BUS_ID_RE.fullmatch(bus_id):
        return None
    return "is not a PCI bus ID like 00000000:3B:00.0 (domain:bus:device.function, hex)"


def uuid_problem(uuid: str) -> str | None:
    """Why ``uuid`` cannot name a device (a phrase to follow the UUID in a message), or ``None``."""
    if len(uuid) > UUID_MAX:
        return f"is {len(uuid)} characters long; at most {UUID_MAX} are allowed"
    if _UUID_RE.fullmatch(uuid) or _LEGACY_MIG_RE.fullmatch(uuid):
        return None
    return "is not GPU-... or MIG-... followed by letters, digits and '-'"


@dataclass(frozen=True, kw_only=True)
class MigAttributes:
    """What NVML reports for one MIG device (``nvmlDeviceGetAttributes``): GFD's MIG label values."""

    memory_mib: int  # memorySizeMB (NVML's "MB" are MiB)
    multiprocessors: int
    gi_slices: int
    ci_slices: int
    copy_engines: int = 0
    decoders: int = 0
    encoders: int = 0
    jpegs: int = 0
    ofas: int = 0


@dataclass(frozen=True, kw_only=True)
class MigInstance:
    """One MIG GPU instance (with its full-size compute instance) on a parent GPU; ``attributes`` are
    NVML's for a real GPU, ``None`` for a simulated one (the catalogue's profile then stands in)."""

    profile: str
    start_slot: int
    uuid: GpuUuid
    gi_index: int
    # NVML's description of the instance, not its identity: left out of comparisons
    attributes: MigAttributes | None = field(default=None, compare=False)


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """One physical GPU; ``model`` is a catalogue name (``H100-80GB``), or for a real GPU outside the
    catalogue its NVML name made a key (``RTX-PRO-6000``).

    On a real GPU NVML is the source of truth: ``product`` is its name as ``nvmlDeviceGetName`` gives it
    (``NVIDIA L4``), ``compute_capability`` what ``nvmlDeviceGetCudaComputeCapability`` answers and
    ``mig_capable`` whether ``nvmlDeviceGetMigMode`` is supported. Left at their defaults (a simulated
    GPU) they come from the catalogue model (``product_name``, ``capability``, ``can_mig``).
    """

    index: int
    uuid: GpuUuid
    model: str
    memory_mib: int
    numa_node: int | None
    pci_bus_id: str
    mig_enabled: bool = False
    mig_instances: tuple[MigInstance, ...] = ()
    # What NVML says of the GPU (see above); descriptions, not identity: left out of comparisons, so
    # a GPU read through NVML equals the simulated one it was made from.
    product: str = field(default="", compare=False)
    compute_capability: tuple[int, int] | None = field(default=None, compare=False)
    mig_capable: bool | None = field(default=None, compare=False)
    # The PCI class code from sysfs (0x030200 a 3D controller: compute; 0x030000 VGA: graphics); None
    # where it was not read (a simulated GPU, or sysfs did not say)
    pci_class: int | None = field(default=None, compare=False)

    def _catalogued(self) -> GpuModel | None:
        return CATALOGUE.get(self.model)

    @property
    def product_name(self) -> str:
        """NVML's name of the GPU (``NVIDIA H100 80GB HBM3``): NVML's own, else the catalogue's, else
        the model key."""
        if self.product:
            return self.product
        model = self._catalogued()
        return model.product if model is not None else self.model

    @property
    def capability(self) -> tuple[int, int] | None:
        """The CUDA compute capability: NVML's, else the catalogue's, else unknown."""
        if self.compute_capability is not None:
            return self.compute_capability
        model = self._catalogued()
        return model.compute_capability if model is not None else None

    @property
    def can_mig(self) -> bool:
        """Whether the GPU supports MIG: NVML's answer, else the catalogue's."""
        if self.mig_capable is not None:
            return self.mig_capable
        model = self._catalogued()
        return model is not None and model.mig_capable


@dataclass(frozen=True, kw_only=True)
class Node:
    """A node's GPUs in index order and, when known, the topology between them; a simulated node may
    name a driver version (``550.54.15``), CUDA driver API version (``12.4``) and machine type as a
    real one has."""

    name: str
    gpus: tuple[Gpu, ...]
    topology: Topology | None
    driver_version: str = ""
    cuda_version: str | None = None
    # The machine's type as DMI names it (``/sys/class/dmi/id/product_name``: ``DGX H100``), "unknown"
    # where it cannot be read, None where not known at all (a spec without ``machine``)
    machine: str | None = None


def uuid_aliases(node: Node) -> dict[str, int]:
    """Every UUID on the node (GPUs and their MIG instances) -> the index of its GPU: how health events
    and kubelet's device IDs are traced back to a physical GPU."""
    aliases: dict[str, int] = {str(g.uuid): g.index for g in node.gpus}
    aliases.update({str(m.uuid): g.index for g in node.gpus for m in g.mig_instances})
    return aliases


def sysfs_bus_id(bus_id: str) -> str:
    """``00000000:3B:00.0`` (NVML) -> ``0000:3b:00.0`` (sysfs); also the form compared between GPUs."""
    text = bus_id.lower()
    domain, _, rest = text.partition(":")
    return f"{domain[-4:]}:{rest}" if rest else text
