"""The quarantine's decisions, without I/O: which GPUs are failed, what the Node must carry, whom to evict.

From the health tracker's statuses and the quarantine policy (``health.quarantine``), the node's
desired state is one condition (type ``GPUUnhealthy``, reason the first fault, e.g. ``Xid79``, the
message naming every failed GPU by index and UUID) and one taint (default
``nvidia.com/gpu.unhealthy=Xid79:NoSchedule``), or neither. The condition's message is also the record
a restarted agent reads back (``recorded_faults``), so a restart neither forgets nor duplicates a
quarantine. The fleet-wide cap is decided by ``cap_allows`` over the set of quarantined nodes kept in
a Lease (``kubegpu.node.hygiene``); eviction targets by ``eviction_targets`` from PodResources holders.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubegpu.health.catalog import XID_CATALOG, fault_reason
from kubegpu.health.quarantine import EvictionPolicy, QuarantinePolicy
from kubegpu.health.tracker import GpuStatus
from kubegpu.model.event import GpuEventKind
from kubegpu.model.holder import DeviceHolder, holders_of

__all__ = [
    "CONDITION_TYPE",
    "FailedGpu",
    "cap_allows",
    "condition_for",
    "eviction_targets",
    "failed_gpus",
    "recorded_faults",
    "taints_with",
]

CONDITION_TYPE = "GPUUnhealthy"


@dataclass(frozen=True, kw_only=True)
class FailedGpu:
    """A GPU whose fault quarantines the node; ``reason`` is the fault name (``Xid79``)."""

    index: int
    uuid: str
    reason: str
    detail: str


def failed_gpus(
    statuses: Sequence[GpuStatus], uuids: Sequence[str], policy: QuarantinePolicy
) -> list[FailedGpu]:
    """The unhealthy GPUs with at least one quarantine-worthy fault, by index."""
    out: list[FailedGpu] = []
    for index, (status, uuid) in enumerate(zip(statuses, uuids, strict=True)):
        if status.healthy:
            continue
        faults = status.faults or (((status.cause, status.xid),) if status.cause is not None else ())
        worthy = [(k, x) for k, x in faults if policy.quarantines(k, x)]
        if worthy:
            kind, xid = worthy[0]
            out.append(
                FailedGpu(index=index, uuid=uuid, reason=fault_reason(kind, xid), detail=status.reason)
            )
    return out


_WHITESPACE = re.compile(r"\s+")


def condition_for(failed: Sequence[FailedGpu]) -> dict[str, str] | None:
    """The node condition for ``failed`` (None: no condition). Message format (read back by
    ``recorded_faults``): ``GPU <i> <UUID> <Reason>: <detail>`` joined by ``; ``."""
    if not failed:
        return None
    parts = [
        f"GPU {f.index} {f.uuid} {f.reason}: {_WHITESPACE.sub(' ', f.detail).replace(';', ',')}"
        for f in failed
    ]
    return {
        "type": CONDITION_TYPE,
        "status": "True",
        "reason": failed[0].reason,
        "message": "; ".join(parts)[:1024],
    }


_RECORD = re.compile(r"GPU (\d+) (\S+) ([A-Za-z]+\d*):")
_REASON_KINDS = {"EccDoubleBit": GpuEventKind.ECC_DOUBLE_BIT, "GpuLost": GpuEventKind.LOST}


def recorded_faults(node: Mapping[str, Any]) -> list[tuple[str, GpuEventKind, int | None, str]]:
    """What an earlier run's condition on ``node`` (the API's JSON) says failed: (UUID, kind, XID,
    reason text) per GPU; [] when the node carries no such condition (or it is not True)."""
    for cond in node.get("status", {}).get("conditions", []) or []:
        if cond.get("type") != CONDITION_TYPE or cond.get("status") != "True":
            continue
        out: list[tuple[str, GpuEventKind, int | None, str]] = []
        for _index, uuid, reason in _RECORD.findall(str(cond.get("message", ""))):
            if reason.startswith("Xid") and reason[3:].isdigit():
                xid = int(reason[3:])
                entry = XID_CATALOG.get(xid)
                what = entry.description if entry is not None else "see NVIDIA's XID catalogue"
                out.append((uuid, GpuEventKind.XID, xid, f"XID {xid}: {what} (recorded by an earlier run)"))
            elif reason in _REASON_KINDS:
                out.append((uuid, _REASON_KINDS[reason], None, f"{reason} (recorded by an earlier run)"))
        return out
    return []


def taints_with(
    current: Iterable[Mapping[str, Any]], *, key: str, desired: Mapping[str, str] | None
) -> list[dict[str, Any]] | None:
    """The node's taints with kubegpu's taint (``key``, any effect) replaced by ``desired`` (or
    removed); None when nothing changes. Every other taint is kept as it is, in its order."""
    now = [dict(t) for t in current]
    kept = [t for t in now if t.get("key") != key]
    ours = [t for t in now if t.get("key") == key]
    wanted = [dict(desired)] if desired is not None else []
    same = len(ours) == len(wanted) and all(
        o.get("value", "") == w.get("value", "") and o.get("effect") == w.get("effect")
        for o, w in zip(ours, wanted, strict=True)
    )
    if same:
        return None
    return kept + wanted


def cap_allows(quarantined: Iterable[str], node: str, *, gpu_nodes: int, max_share: float) -> bool:
    """May ``node`` be quarantined while ``quarantined`` are? At most ``floor(max_share * gpu_nodes)``
    nodes, and at least one (otherwise a small cluster could never quarantine); a node already counted
    keeps its place."""
    others = set(quarantined) - {node}
    if node in set(quarantined):
        return True
    limit = max(1, math.floor(max_share * max(gpu_nodes, 1) + 1e-9))
    return len(others) + 1 <= limit


def eviction_targets(
    holders: Iterable[DeviceHolder],
    failed: Iterable[int],
    index_of: Mapping[str, int],
    policy: EvictionPolicy,
) -> list[tuple[str, str]]:
    """(namespace, pod) to evict, sorted, each once: holders of a device backed by a failed GPU (full
    GPU, replica ``UUID::n``, MIG device), or every holder under ``all-gpu-pods``."""
    every = list(holders)
    if policy is EvictionPolicy.NONE:
        return []
    if policy is EvictionPolicy.ALL_GPU_PODS:
        chosen = every
    else:
        chosen = [h for gpu in set(failed) for h in holders_of(every, gpu, index_of)]
    return sorted({(h.namespace, h.pod) for h in chosen})
