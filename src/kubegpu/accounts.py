"""The seed's arithmetic as a library: decode time, MIG shares, time-slicing and all-reduce costs.

These are models, not measurements: a batch-1 decode step is bounded below by reading every weight
once (``weight / bandwidth``); a MIG instance gets the share of the card's bandwidth that its compute
slices are of seven; time-slicing ``n`` tenants makes one request wait for ``n`` turns; a ring
all-reduce sends ``2(n-1)/n`` times the buffer over each GPU's link. Units: GB = 1e9 bytes,
MB = 1e6 bytes, bandwidth in GB/s.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubegpu.errors import InputError
from kubegpu.model.mig import MigProfile

# Time-slicing replicas per GPU: each is a device kubelet lists, so the bound keeps that finite. The
# agent refuses a config with more (kubegpu.deviceplugin.config), and the planner plans no more.
MAX_REPLICAS = 1024

__all__ = [
    "MAX_REPLICAS",
    "MigShare",
    "allreduce_ring_bytes",
    "allreduce_step_ms",
    "allreduce_us",
    "decode_ms",
    "mig_layout",
    "timeslice_latency",
]


def decode_ms(weight_gb: float, bandwidth_gbs: float, share: float = 1.0) -> float:
    """Lower bound of one batch-1 decode step: read ``weight_gb`` at ``share`` of the bandwidth."""
    if weight_gb < 0:
        raise InputError("weight_gb must not be negative")
    if bandwidth_gbs <= 0 or not 0 < share <= 1:
        raise InputError("bandwidth must be positive and share in (0, 1]")
    return weight_gb / (bandwidth_gbs * share) * 1000.0


@dataclass(frozen=True, kw_only=True)
class MigShare:
    """What one card cut into a single profile gives: instance count, memory each, compute share."""

    instances: int
    memory_gb: int
    share: float


def mig_layout(profile: MigProfile) -> MigShare:
    """How many instances of ``profile`` one card holds, and each one's memory and compute share."""
    return MigShare(instances=profile.max_count, memory_gb=profile.memory_gb, share=profile.sm_share)


def timeslice_latency(base_ms: float, tenants: int) -> float:
    """Time-slicing: ``tenants`` take turns on the whole card, so one request waits ``tenants`` turns."""
    if tenants < 1:
        raise InputError("tenants must be at least 1")
    return base_ms * tenants


def allreduce_ring_bytes(n: int, size_bytes: float) -> float:
    """Bytes each GPU sends in a ring all-reduce of ``size_bytes`` over ``n`` GPUs: 2(n-1)/n x size."""
    if n < 1:
        raise InputError("n must be at least 1")
    return 2 * (n - 1) / n * size_bytes


def allreduce_us(n: int, size_mb: float, link_gbs: float) -> float:
    """Time of one ring all-reduce in microseconds, bandwidth term only (no latency)."""
    if link_gbs <= 0:
        raise InputError("link bandwidth must be positive")
    return allreduce_ring_bytes(n, size_mb * 1e6) / (link_gbs * 1e9) * 1e6


def allreduce_step_ms(tp: int, layers: int, per_layer: int, size_mb: float, link_gbs: float) -> float:
    """Communication per decode step: ``layers x per_layer`` all-reduces of ``size_mb`` over ``tp`` GPUs."""
    return layers * per_layer * allreduce_us(tp, size_mb, link_gbs) / 1000.0
