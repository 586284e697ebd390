"""What the extender needs to know of a Node: its CPU, memory and GPUs (count and UUIDs).

Read from the Node object: ``status.allocatable`` cpu and memory; the GPU count from the agent's
GFD label ``nvidia.com/gpu.count`` (the physical GPUs, whatever replicas time-slicing advertises),
else ``allocatable["nvidia.com/gpu"]``; the GPUs' UUIDs, in index order, from the agent's node
annotation ``kubegpu.io/gpu-uuids`` (comma-separated) when it publishes one; the GPU model from the
GFD label ``nvidia.com/gpu.product`` (what pods pin a model by, and what the workload's model
constraints name).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubegpu.errors import PlacementError
from kubegpu.extender.ask import GPU_RESOURCE, parse_quantity
from kubegpu.model.assignment import UUIDS_ANNOTATION

__all__ = ["GPU_COUNT_LABEL", "GPU_PRODUCT_LABEL", "UUIDS_ANNOTATION", "GpuNode", "gpu_node_of"]

GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True, kw_only=True)
class GpuNode:
    """A node as the placement sees it; ``uuids`` is empty or one per GPU."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int
    uuids: tuple[str, ...]
    gpu_model: str = ""  # the node's nvidia.com/gpu.product label; "" without one


def gpu_node_of(node: Mapping[str, Any]) -> GpuNode:
    """The node's ``GpuNode``; unreadable quantities count as 0 (the node then takes no pods)."""
    meta = node.get("metadata") or {}
    alloc = (node.get("status") or {}).get("allocatable") or {}

    def quantity(value: object) -> float:
        try:
            return float(parse_quantity(value))
        except PlacementError:
            return 0.0

    count_text = (meta.get("labels") or {}).get(GPU_COUNT_LABEL)
    count = int(count_text) if count_text is not None and str(count_text).isdigit() else None
    if count is None:
        count = int(quantity(alloc.get(GPU_RESOURCE, 0)))
    uuids = tuple(
        u.strip()
        for u in str((meta.get("annotations") or {}).get(UUIDS_ANNOTATION, "")).split(",")
        if u.strip()
    )
    return GpuNode(
        name=str(meta.get("name", "")),
        cpu_milli=int(quantity(alloc.get("cpu", 0)) * 1000),
        memory_mib=int(quantity(alloc.get("memory", 0)) / 2**20),
        gpu_count=count,
        uuids=uuids if len(uuids) == count else (),
        gpu_model=str((meta.get("labels") or {}).get(GPU_PRODUCT_LABEL, "")),
    )
