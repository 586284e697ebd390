"""Health policy: which events make a GPU unhealthy and which bring it back.

XIDs are classified by ``XidPolicy`` (NVIDIA's default ignore list 13, 31, 43, 45, 68, 109 unless
configured otherwise). NVIDIA's plugin only logs ECC events; kubegpu treats a double-bit (uncorrectable)
ECC error as fatal by default and single-bit (corrected) errors as harmless, both configurable. A GPU
the source has lost is always unhealthy; an explicit "healthy" report always recovers it. When the
source's health watcher itself fails (NVML event registration or waits failing) the GPUs it can no
longer watch are unhealthy by default (``WatcherFailureAction.UNHEALTHY``: their health is unknown) or
kept as they are (``KEEP``); the watcher coming back undoes only that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from kubegpu.health.xid import XID_MEANINGS, XidPolicy, XidVerdict
from kubegpu.model.event import GpuEvent, GpuEventKind

__all__ = ["EccAction", "HealthPolicy", "Verdict", "VerdictKind", "WatcherFailureAction"]


class EccAction(Enum):
    """What an ECC error of one kind does to the GPU."""

    FATAL = "fatal"
    IGNORE = "ignore"


class WatcherFailureAction(Enum):
    """What a failed health watcher does to the GPUs it can no longer watch."""

    UNHEALTHY = "unhealthy"
    KEEP = "keep"


class VerdictKind(Enum):
    UNHEALTHY = "unhealthy"
    HEALTHY = "healthy"
    IGNORE = "ignore"


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What to do with a GPU after an event, and the reason a user will read."""

    kind: VerdictKind
    reason: str


@dataclass(frozen=True, kw_only=True)
class HealthPolicy:
    """The whole health policy; ``xid`` carries NVIDIA's XID semantics."""

    xid: XidPolicy = field(default_factory=XidPolicy)
    ecc_double_bit: EccAction = EccAction.FATAL
    ecc_single_bit: EccAction = EccAction.IGNORE
    watcher_failure: WatcherFailureAction = WatcherFailureAction.UNHEALTHY
    # A GPU made unhealthy by XID/ECC events recovers once no fatal event came for this long
    # (``kubegpu.health.recoverAfter``); None: only an explicit "healthy" recovers it.
    recover_after_s: float | None = None

    def judge(self, event: GpuEvent) -> Verdict:
        """Classify ``event``; the reason names what happened in an operator's words."""
        detail = f" ({event.detail})" if event.detail else ""
        if event.kind is GpuEventKind.HEALTHY:
            return Verdict(kind=VerdictKind.HEALTHY, reason=f"marked healthy{detail}")
        if event.kind is GpuEventKind.LOST:
            return Verdict(kind=VerdictKind.UNHEALTHY, reason=f"GPU lost{detail}")
        if event.kind is GpuEventKind.WATCH_FAILED:
            reason = f"health watcher failed{detail}"
            if self.watcher_failure is WatcherFailureAction.KEEP:
                return Verdict(kind=VerdictKind.IGNORE, reason=f"{reason} (kept: watcherFailure=keep)")
            return Verdict(kind=VerdictKind.UNHEALTHY, reason=reason)
        if event.kind is GpuEventKind.WATCH_RESTORED:
            return Verdict(kind=VerdictKind.HEALTHY, reason=f"health watcher recovered{detail}")
        if event.kind is GpuEventKind.XID:
            xid = event.xid if event.xid is not None else -1
            meaning = XID_MEANINGS.get(xid, "see NVIDIA's XID catalogue")
            reason = f"XID {xid}: {meaning}{detail}"
            if self.xid.classify(xid) is XidVerdict.FATAL:
                return Verdict(kind=VerdictKind.UNHEALTHY, reason=reason)
            return Verdict(kind=VerdictKind.IGNORE, reason=f"{reason} (ignored by the XID policy)")
        if event.kind is GpuEventKind.ECC_DOUBLE_BIT:
            action, what = self.ecc_double_bit, "double-bit (uncorrectable) ECC error"
        else:
            action, what = self.ecc_single_bit, "single-bit (corrected) ECC error"
        if action is EccAction.FATAL:
            return Verdict(kind=VerdictKind.UNHEALTHY, reason=f"{what}{detail}")
        return Verdict(kind=VerdictKind.IGNORE, reason=f"{what}{detail} (ignored by the ECC policy)")
