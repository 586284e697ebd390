"""Which series each GPU gets: one per container holding it, or one with empty pod labels.

dcgm-exporter's rules (docs/metrics.md), with one deliberate difference for shared GPUs:

- a device ID names its physical device after ``::<n>`` (a time-slicing or MPS replica) is stripped;
- a full GPU held by N containers (replicas of it, or the GPU itself) gets N series, one per
  (namespace, pod, container), each with the GPU's whole values; dcgm-exporter attributes only the
  last pod it sees unless ``--kubernetes-virtual-gpus`` is given;
- a MIG-enabled GPU gets one series per MIG instance (labels ``GPU_I_PROFILE``, ``GPU_I_ID``), and
  each instance one series per container holding it;
- an unheld GPU or MIG instance gets one series with no pod labels.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kubegpu.model.holder import DeviceHolder
from kubegpu.model.node import Gpu, MigInstance, Node

__all__ = ["Owner", "SeriesTarget", "held_counts", "targets"]


@dataclass(frozen=True, kw_only=True, order=True)
class Owner:
    namespace: str
    pod: str
    container: str


@dataclass(frozen=True, kw_only=True)
class SeriesTarget:
    """One series' identity: a GPU, the MIG instance (if any) and the container holding it (if any)."""

    gpu: Gpu
    mig: MigInstance | None = None
    owner: Owner | None = None


def _owners_by_device(holders: Iterable[DeviceHolder]) -> dict[str, list[Owner]]:
    """Physical device UUID (lower case) -> its holders, each container once, in kubelet's order."""
    out: dict[str, list[Owner]] = {}
    for h in holders:
        owner = Owner(namespace=h.namespace, pod=h.pod, container=h.container)
        for uuid in sorted(h.physical_ids):
            owners = out.setdefault(uuid.lower(), [])
            if owner not in owners:
                owners.append(owner)
    return out


def held_counts(holders: Iterable[DeviceHolder]) -> dict[str, int]:
    """Physical device UUID (as the holder spelled it) -> how many containers hold it."""
    counts: dict[str, set[Owner]] = {}
    for h in holders:
        for uuid in h.physical_ids:
            counts.setdefault(uuid, set()).add(Owner(namespace=h.namespace, pod=h.pod, container=h.container))
    return {uuid: len(owners) for uuid, owners in counts.items()}


def targets(node: Node, holders: Iterable[DeviceHolder]) -> list[SeriesTarget]:
    """Every series the node's GPUs get, in GPU index order."""
    by_device = _owners_by_device(holders)
    out: list[SeriesTarget] = []
    for gpu in node.gpus:
        if gpu.mig_enabled and gpu.mig_instances:
            for mig in gpu.mig_instances:
                owners = by_device.get(str(mig.uuid).lower(), [])
                out += [SeriesTarget(gpu=gpu, mig=mig, owner=o) for o in owners] or [
                    SeriesTarget(gpu=gpu, mig=mig)
                ]
            continue
        owners = by_device.get(str(gpu.uuid).lower(), [])
        out += [SeriesTarget(gpu=gpu, owner=o) for o in owners] or [SeriesTarget(gpu=gpu)]
    return out
