"""A GPU node as kubegpu sees it: its GPUs, their MIG instances, and the topology between them.

Every source (a node spec, NVML, a capture) produces a ``Node``; everything downstream (inventory,
allocation, the device plugin) reads only this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NewType

from kubegpu.model.topology import Topology

__all__ = [
    "UUID_MAX",
    "Gpu",
    "GpuUuid",
    "MigInstance",
    "Node",
    "NodeName",
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
