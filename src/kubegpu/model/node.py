"""A GPU node as kubegpu sees it: its GPUs, their MIG instances, and the topology between them.

Every source (a node spec, NVML, a capture) produces a ``Node``; everything downstream (inventory,
allocation, the device plugin) reads only this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NewType

from kubegpu.model.names import MAX_SUBDOMAIN, is_dns_subdomain
from kubegpu.model.topology import Topology

__all__ = [
    "MAX_GPUS",
    "MAX_NODE_NAME",
    "MAX_NUMA_NODE",
    "UUID_MAX",
    "Gpu",
    "GpuUuid",
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
class MigInstance:
    """One MIG GPU instance (with its full-size compute instance) on a parent GPU."""

    profile: str
    start_slot: int
    uuid: GpuUuid
    gi_index: int


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """One physical GPU; ``model`` is a catalogue name (``H100-80GB``)."""

    index: int
    uuid: GpuUuid
    model: str
    memory_mib: int
    numa_node: int | None
    pci_bus_id: str
    mig_enabled: bool = False
    mig_instances: tuple[MigInstance, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Node:
    """A node's GPUs in index order and, when known, the topology between them."""

    name: str
    gpus: tuple[Gpu, ...]
    topology: Topology | None


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
