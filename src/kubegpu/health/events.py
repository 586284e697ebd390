"""Health events: what a source (NVML, a fault file) reports about one GPU.

Sources say *what happened* (an XID, an ECC error, an operator marking a GPU healthy again); the
policy in ``kubegpu.health.policy`` decides what it means, and the tracker applies the verdict. A GPU
is named by its index or its UUID, exactly as the source saw it; the tracker resolves the name.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["EventKind", "GpuRef", "HealthEvent"]

GpuRef = int | str  # a GPU index, or a GPU/MIG UUID


class EventKind(Enum):
    """The kinds of event a source can report."""

    XID = "xid"
    ECC_DOUBLE_BIT = "ecc-dbe"
    ECC_SINGLE_BIT = "ecc-sbe"
    LOST = "lost"  # the source cannot reach the GPU any more (handle, event wait or query failed)
    HEALTHY = "healthy"  # an operator or a probe says the GPU works again
    WATCH_FAILED = "watch-failed"  # the source's health watcher failed: the GPU's health is unknown
    WATCH_RESTORED = "watch-restored"  # the watcher works again (undoes WATCH_FAILED only)


@dataclass(frozen=True, kw_only=True)
class HealthEvent:
    """One report about one GPU; ``xid`` is set for ``EventKind.XID`` only."""

    gpu: GpuRef
    kind: EventKind
    xid: int | None = None
    detail: str = ""
    source: str = ""
