"""A GPU node as kubegpu sees it: its GPUs, their MIG instances, and the topology between them.

Every source (a node spec, NVML, a capture) produces a ``Node``; everything downstream (inventory,
allocation, the device plugin) reads only this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NewType

from kubegpu.model.topology import Topology

__all__ = ["Gpu", "GpuUuid", "MigInstance", "Node", "NodeName"]

GpuUuid = NewType("GpuUuid", str)
NodeName = NewType("NodeName", str)


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

    def gpu_by_uuid(self, uuid: str) -> Gpu | None:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        return None
