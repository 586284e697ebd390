"""What a GPU source observed about one GPU: an XID, an ECC error, a lost or recovered GPU.

One value type for both sides of the health path. Sources (``sources/nvml.py``, ``sources/faults.py``)
only say *what happened*; the policy in ``kubegpu.health.policy`` decides what it means (fatal or
not) and the tracker applies the verdict. Both layers import this module from the pure core, so the
agent hands an event from one to the other unchanged. A GPU is named by its index or its UUID,
exactly as the source saw it; the tracker resolves the name.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["GpuEvent", "GpuEventKind", "GpuRef"]

GpuRef = int | str  # a GPU index, or a GPU/MIG UUID


class GpuEventKind(Enum):
    """The kinds of event a source can report."""

    XID = "xid"
    ECC_DOUBLE_BIT = "ecc-dbe"
    ECC_SINGLE_BIT = "ecc-sbe"
    LOST = "lost"  # the source cannot reach the GPU any more (handle, event wait or query failed)
    HEALTHY = "healthy"  # an operator or a probe says the GPU works again
    WATCH_FAILED = "watch-failed"  # the source's health watcher failed: the GPU's health is unknown
    WATCH_RESTORED = "watch-restored"  # the watcher works again (undoes WATCH_FAILED only)


@dataclass(frozen=True, kw_only=True)
class GpuEvent:
    """One observation about one GPU; ``xid`` is set for ``GpuEventKind.XID`` only."""

    gpu: GpuRef
    kind: GpuEventKind
    xid: int | None = None
    detail: str = ""
    source: str = ""
