"""Who holds a device: one container's share of one resource, as kubelet's PodResources API reports it.

The metrics exporter labels a GPU's series with its holders, and the node quarantine evicts the pods
holding a failed GPU; both read holders through ``kubegpu.podresources`` and reason about them here.
Device IDs are as the device plugin advertised them: a full GPU's UUID, a MIG device's UUID, or a
time-slicing replica ``<UUID>::<n>`` (NVIDIA's spelling, which kubegpu keeps).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["REPLICA_SEPARATOR", "DeviceHolder", "holders_of", "physical_id"]

REPLICA_SEPARATOR = "::"


def physical_id(device_id: str) -> str:
    """The GPU or MIG UUID behind a device ID: a replica ``UUID::3`` gives ``UUID``."""
    base, _, _ = device_id.partition(REPLICA_SEPARATOR)
    return base


@dataclass(frozen=True, kw_only=True)
class DeviceHolder:
    """One container holding devices of one resource (``resource`` e.g. ``nvidia.com/gpu``)."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]

    @property
    def physical_ids(self) -> frozenset[str]:
        """The GPU and MIG UUIDs behind ``device_ids`` (replicas stripped)."""
        return frozenset(physical_id(d) for d in self.device_ids)


def holders_of(
    holders: Iterable[DeviceHolder], gpu_index: int, index_of: Mapping[str, int]
) -> list[DeviceHolder]:
    """The holders of any device backed by GPU ``gpu_index``; ``index_of`` maps GPU and MIG UUIDs to
    their physical GPU's index (unknown IDs, e.g. another vendor's devices, are never matched)."""
    return [h for h in holders if any(index_of.get(u) == gpu_index for u in h.physical_ids)]
