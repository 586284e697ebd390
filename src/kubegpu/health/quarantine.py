"""The quarantine's policy and settings: which faults take the node out of service, and how.

``QuarantinePolicy`` applies NVIDIA's XID catalog (``catalog.py``): an XID quarantines when the
catalog's immediate action is in ``QUARANTINE_ACTIONS``; a lost GPU and a double-bit ECC error
quarantine; XIDs missing from the catalog do not unless listed in ``kubegpu.quarantine.xids``;
``neverXids`` wins over everything. ``QuarantineSettings`` is the ``kubegpu.quarantine`` section
(docs/node.md): the taint, the eviction policy and the fleet-wide cap; ``kubegpu.node`` acts on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from kubegpu.health.catalog import QUARANTINE_ACTIONS, XID_CATALOG
from kubegpu.model.event import GpuEventKind

__all__ = ["DEFAULT_TAINT_KEY", "EvictionPolicy", "QuarantinePolicy", "QuarantineSettings", "TaintEffect"]

DEFAULT_TAINT_KEY = "nvidia.com/gpu.unhealthy"


class EvictionPolicy(Enum):
    NONE = "none"
    PODS_ON_FAILED_GPU = "pods-on-failed-gpu"
    ALL_GPU_PODS = "all-gpu-pods"


class TaintEffect(Enum):
    NO_SCHEDULE = "NoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, kw_only=True)
class QuarantinePolicy:
    """Which faults of an unhealthy GPU quarantine the node (``xids`` / ``neverXids`` adjust the
    catalog)."""

    extra_xids: frozenset[int] = field(default_factory=frozenset)
    never_xids: frozenset[int] = field(default_factory=frozenset)

    def quarantines(self, kind: GpuEventKind, xid: int | None) -> bool:
        """True when a GPU made unhealthy by this fault takes the node out of service."""
        if kind is GpuEventKind.XID:
            if xid is None or xid in self.never_xids:
                return False
            if xid in self.extra_xids:
                return True
            entry = XID_CATALOG.get(xid)
            return entry is not None and entry.action in QUARANTINE_ACTIONS
        # A lost GPU and an uncorrectable ECC error always do; a watcher failure (health unknown) or
        # a corrected ECC error never does: that would drain nodes whose GPUs are fine.
        return kind in (GpuEventKind.LOST, GpuEventKind.ECC_DOUBLE_BIT)


@dataclass(frozen=True, kw_only=True)
class QuarantineSettings:
    """``kubegpu.quarantine``: on/off, the taint, the eviction policy, the fleet cap."""

    enabled: bool = True
    taint_key: str = DEFAULT_TAINT_KEY
    taint_effect: TaintEffect = TaintEffect.NO_SCHEDULE
    eviction: EvictionPolicy = EvictionPolicy.PODS_ON_FAILED_GPU
    max_share: float = 0.1  # of the cluster's GPU nodes quarantined at once (at least one node)
    lease: str = "kube-system/kubegpu-quarantine"  # NAMESPACE/NAME of the fleet's Lease
    policy: QuarantinePolicy = field(default_factory=QuarantinePolicy)
