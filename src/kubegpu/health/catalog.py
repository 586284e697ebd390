"""NVIDIA's XID catalog as data, and which faults put the whole node into quarantine.

Device health (``xid.py``, ``policy.py``) keeps NVIDIA's plugin semantics: a fatal XID turns the GPU's
devices Unhealthy. Quarantine is the node-level action on top (condition, taint, eviction): it follows
the catalog's *immediate action* for the XID (NVIDIA's "Xid catalog", Ampere and newer; the table is
in ``docs/node.md``). An XID whose immediate action asks for the GPU or
the machine to be reset or replaced (``RESET_GPU``, ``RESTART_BM``, the ECC and NVLink workflows,
``CONTACT_SUPPORT``) quarantines; one that only asks for the application to restart or for nothing
(``RESTART_APP``, ``IGNORE``, the 45/154 follow-up XIDs) does not (``quarantine.QuarantinePolicy``
applies this table and its configured exceptions).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kubegpu.model.event import GpuEventKind

__all__ = [
    "QUARANTINE_ACTIONS",
    "XID_CATALOG",
    "CatalogAction",
    "CatalogEntry",
    "fault_reason",
]


class CatalogAction(Enum):
    """The catalog's immediate action for an XID."""

    RESTART_APP = "RESTART_APP"
    IGNORE = "IGNORE"
    RESET_GPU = "RESET_GPU"
    RESTART_BM = "RESTART_BM"
    CONTACT_SUPPORT = "CONTACT_SUPPORT"
    WORKFLOW_XID_45 = "WORKFLOW_XID_45"
    WORKFLOW_XID_48 = "WORKFLOW_XID_48"
    WORKFLOW_NVLINK_ERR = "WORKFLOW_NVLINK_ERR"
    XID_154 = "XID_154"


@dataclass(frozen=True, kw_only=True)
class CatalogEntry:
    xid: int
    mnemonic: str
    description: str
    action: CatalogAction


_A = CatalogAction
# (XID, mnemonic, description, immediate action), as in the catalog
_ROWS: tuple[tuple[int, str, str, CatalogAction], ...] = (
    (13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", _A.RESTART_APP),
    (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", _A.RESTART_APP),
    (43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", _A.IGNORE),
    (
        45,
        "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        "Preemptive cleanup, due to previous errors",
        _A.WORKFLOW_XID_45,
    ),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", _A.WORKFLOW_XID_48),
    (61, "PMU_BREAKPOINT", "Internal micro-controller breakpoint", _A.CONTACT_SUPPORT),
    (62, "PMU_HALT_ERROR", "Internal micro-controller halt", _A.RESET_GPU),
    (63, "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", _A.IGNORE),
    (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", _A.RESET_GPU),
    (68, "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception", _A.RESTART_APP),
    (74, "NVLINK_ERROR", "NVLink Error", _A.WORKFLOW_NVLINK_ERR),
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", _A.RESTART_BM),
    (92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", _A.IGNORE),
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", _A.RESTART_APP),
    (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", _A.RESET_GPU),
    (109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", _A.RESET_GPU),
    (119, "GSP_RPC_TIMEOUT", "GSP RPC Timeout", _A.RESET_GPU),
    (120, "GSP_ERROR", "GSP Error", _A.RESET_GPU),
    (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", _A.RESET_GPU),
    (154, "GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", _A.XID_154),
)
XID_CATALOG: dict[int, CatalogEntry] = {
    x: CatalogEntry(xid=x, mnemonic=m, description=d, action=a) for x, m, d, a in _ROWS
}

# The immediate actions that take the GPU (or the machine) out of service: the node is quarantined.
QUARANTINE_ACTIONS: frozenset[CatalogAction] = frozenset(
    {_A.RESET_GPU, _A.RESTART_BM, _A.CONTACT_SUPPORT, _A.WORKFLOW_XID_48, _A.WORKFLOW_NVLINK_ERR}
)


def fault_reason(kind: GpuEventKind, xid: int | None) -> str:
    """The CamelCase fault name used as condition reason and taint value: ``Xid79``, ``EccDoubleBit``."""
    if kind is GpuEventKind.XID:
        return f"Xid{xid if xid is not None else 0}"
    return {
        GpuEventKind.ECC_DOUBLE_BIT: "EccDoubleBit",
        GpuEventKind.ECC_SINGLE_BIT: "EccSingleBit",
        GpuEventKind.LOST: "GpuLost",
        GpuEventKind.WATCH_FAILED: "HealthWatchFailed",
    }.get(kind, "GpuUnhealthy")
