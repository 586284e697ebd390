"""What a GPU source observed about one GPU (an XID, an ECC error, a lost or recovered GPU).

Sources only report observations; what they mean (fatal or not) is the health layer's decision. The
two layers are independent siblings, so the agent translates a ``GpuEvent`` into the health layer's
``HealthEvent`` (same kinds, same values) when it wires them together.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["GpuEvent", "GpuEventKind"]


class GpuEventKind(Enum):
    XID = "xid"
    ECC_DOUBLE_BIT = "ecc-dbe"
    ECC_SINGLE_BIT = "ecc-sbe"
    LOST = "lost"
    HEALTHY = "healthy"
    WATCH_FAILED = "watch-failed"  # the source can no longer watch this GPU's health (its own failure)
    WATCH_RESTORED = "watch-restored"  # the source watches this GPU again


@dataclass(frozen=True, kw_only=True)
class GpuEvent:
    """One observation about one GPU, named by index or UUID as the source saw it."""

    gpu: int | str
    kind: GpuEventKind
    xid: int | None = None
    detail: str = ""
    source: str = ""
