"""What the extender needs to know of a Node: its CPU, memory and GPUs (count and UUIDs).

Read from the Node object: ``status.allocatable`` cpu and memory; the GPU count from the agent's
GFD label ``nvidia.com/gpu.count`` (the physical GPUs, whatever replicas time-slicing advertises),
else ``allocatable["nvidia.com/gpu"]``; the GPUs' UUIDs, in index order, from the agent's node
annotation ``kubegpu.io/gpu-uuids`` (comma-separated) when it publishes one; the GPU model from the
GFD label ``nvidia.com/gpu.product`` (what pods pin a model by, and what the workload's model
constraints name).

Bounds (``kubegpu.extender.ask``): a GPU count above ``MAX_GPUS_PER_NODE`` is not believed (the
label is ignored, and a node whose allocatable count is beyond it too has no GPUs the extender
places on, logged); CPU and memory beyond ``MAX_CPU_MILLI`` / ``MAX_MEMORY_MIB`` count as those
bounds. A Node object that is not one (no name, fields of the wrong type) is refused
(``PlacementError``) and the caller leaves it out.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubegpu.errors import PlacementError
from kubegpu.extender.ask import (
    GPU_RESOURCE,
    MAX_CPU_MILLI,
    MAX_GPUS_PER_NODE,
    MAX_MEMORY_MIB,
    parse_quantity,
)
from kubegpu.model.assignment import UUIDS_ANNOTATION

__all__ = ["GPU_COUNT_LABEL", "GPU_PRODUCT_LABEL", "UUIDS_ANNOTATION", "GpuNode", "gpu_node_of"]

GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class GpuNode:
    """A node as the placement sees it; ``uuids`` is empty or one per GPU."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int
    uuids: tuple[str, ...]
    gpu_model: str = ""  # the node's nvidia.com/gpu.product label; "" without one


def _object(value: object, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PlacementError(f"node's {what} is not an object")
    return value


def _amount(value: object, unit: Decimal, bound: int) -> int:
    """A quantity in ``unit``, rounded down, at most ``bound``; 0 when unreadable."""
    try:
        number = parse_quantity(value)
    except PlacementError:
        return 0
    return bound if number > bound * unit else int(number / unit)


def _gpu_count(name: str, label: object, allocatable: object) -> int:
    text = str(label).strip() if isinstance(label, (str, int)) and not isinstance(label, bool) else ""
    if text.isdigit() and len(text) <= 6 and int(text) <= MAX_GPUS_PER_NODE:
        return int(text)
    if label is not None:
        log.warning("node %s: label %s=%.40r is not a GPU count; ignored", name, GPU_COUNT_LABEL, label)
    count = _amount(allocatable, Decimal(1), MAX_GPUS_PER_NODE + 1)
    if count > MAX_GPUS_PER_NODE:
        log.warning("node %s: more than %d GPUs allocatable; its GPUs are not used", name, MAX_GPUS_PER_NODE)
        return 0
    return count


def gpu_node_of(node: Mapping[str, Any]) -> GpuNode:
    """The node's ``GpuNode``; unreadable quantities count as 0 (the node then takes no pods), ones
    beyond the bounds as above; ``PlacementError`` for an object that is not a Node."""
    meta = _object(_object(node, "object").get("metadata"), "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise PlacementError("node has no name")
    labels = _object(meta.get("labels"), "labels")
    annotations = _object(meta.get("annotations"), "annotations")
    alloc = _object(_object(node.get("status"), "status").get("allocatable"), "allocatable")
    count = _gpu_count(name, labels.get(GPU_COUNT_LABEL), alloc.get(GPU_RESOURCE, 0))
    uuids = tuple(u.strip() for u in str(annotations.get(UUIDS_ANNOTATION, "")).split(",") if u.strip())
    return GpuNode(
        name=name,
        cpu_milli=_amount(alloc.get("cpu", 0), Decimal("0.001"), MAX_CPU_MILLI),
        memory_mib=_amount(alloc.get("memory", 0), Decimal(2**20), MAX_MEMORY_MIB),
        gpu_count=count,
        uuids=uuids if len(uuids) == count and len(set(uuids)) == count else (),
        gpu_model=str(labels.get(GPU_PRODUCT_LABEL, "")),
    )
