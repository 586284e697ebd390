"""The quarantine's decisions, without I/O: which GPUs are failed, what the Node must carry, whom to evict.

From the health tracker's statuses and the quarantine policy (``health.quarantine``), the node's
desired state is one condition (type ``GPUUnhealthy``, reason the first fault, e.g. ``Xid79``, the
message a human summary naming the failed GPUs by index and UUID, cut by whole GPUs at 1,024
characters with ``... and N more``) and one taint (default ``nvidia.com/gpu.unhealthy=Xid79:NoSchedule``),
or neither. The durable record, which a restarted agent reads back (``recorded_faults``) so a restart
neither forgets nor duplicates a quarantine, is the node annotation ``kubegpu.io/quarantine``: compact
JSON of every failed GPU (index, UUID, fault) and the taint kubegpu wrote, never truncated, validated on
read (``read_record``); a node without it (an older agent's) is read from the condition's message,
and one with an unreadable record too, with the problem reported. The fleet-wide cap is decided by
``cap_allows`` over the set of quarantined nodes kept in a Lease (``kubegpu.node.hygiene``);
eviction targets by ``eviction_targets`` from PodResources holders.
"""

from __future__ import annotations

import json
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
    "MESSAGE_LIMIT",
    "RECORD_ANNOTATION",
    "FailedGpu",
    "QuarantineRecord",
    "RecordedGpu",
    "cap_allows",
    "condition_for",
    "eviction_targets",
    "failed_gpus",
    "read_record",
    "record_text",
    "recorded_faults",
    "taints_with",
]

CONDITION_TYPE = "GPUUnhealthy"
MESSAGE_LIMIT = 1024  # the condition message's length, as the agent writes it
RECORD_ANNOTATION = "kubegpu.io/quarantine"  # the durable record (JSON), read back at start
RECORD_VERSION = 1
RECORD_LIMIT = 256 * 1024  # an annotation longer than this is not one the agent wrote


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


DETAIL_LIMIT = 200  # of one GPU's detail in the message: the others must fit too


def _summary(parts: Sequence[str], prefix: str) -> str:
    """``prefix`` and as many whole ``parts`` as fit in ``MESSAGE_LIMIT`` with ``... and N more``."""
    n = len(parts)
    for k in range(n, -1, -1):
        shown = "; ".join(parts[:k])
        more = "" if k == n else f"{'; ' if k else ''}... and {n - k} more"
        text = f"{prefix}{shown}{more}"
        if len(text) <= MESSAGE_LIMIT:
            return text
    return f"{prefix}... and {n} more"[:MESSAGE_LIMIT]


def condition_for(failed: Sequence[FailedGpu], *, prefix: str = "") -> dict[str, str] | None:
    """The node condition for ``failed`` (None: no condition). The message is for people:
    ``GPU <i> <UUID> <Reason>: <detail>`` joined by ``; ``, after ``prefix``, cut by whole GPUs to
    ``MESSAGE_LIMIT`` characters with ``... and N more`` (the record, ``record_text``, keeps all)."""
    if not failed:
        return None
    parts = []
    for f in failed:
        detail = _WHITESPACE.sub(" ", f.detail).replace(";", ",")
        if len(detail) > DETAIL_LIMIT:
            detail = detail[: DETAIL_LIMIT - 3] + "..."
        parts.append(f"GPU {f.index} {f.uuid} {f.reason}: {detail}")
    return {
        "type": CONDITION_TYPE,
        "status": "True",
        "reason": failed[0].reason,
        "message": _summary(parts, prefix),
    }


@dataclass(frozen=True, kw_only=True)
class RecordedGpu:
    """One failed GPU in the durable record."""

    index: int
    uuid: str
    reason: str  # Xid79, EccDoubleBit, GpuLost


@dataclass(frozen=True, kw_only=True)
class QuarantineRecord:
    """The annotation ``kubegpu.io/quarantine``: every failed GPU, and the taint kubegpu wrote
    (``(key, value, effect)``, None when it wrote none: no fault, or the fleet cap withheld it)."""

    gpus: tuple[RecordedGpu, ...]
    taint: tuple[str, str, str] | None


def record_text(failed: Sequence[FailedGpu], taint: Mapping[str, str] | None) -> str:
    """The annotation's value for ``failed`` and the taint written with it (compact JSON)."""
    doc = {
        "version": RECORD_VERSION,
        "gpus": [{"index": f.index, "uuid": f.uuid, "reason": f.reason} for f in failed],
        "taint": None
        if taint is None
        else {"key": taint["key"], "value": taint.get("value", ""), "effect": taint["effect"]},
    }
    return json.dumps(doc, separators=(",", ":"))


_REASON = re.compile(r"(Xid\d{1,6}|EccDoubleBit|GpuLost)")
_UUID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _text(value: object, limit: int) -> str | None:
    return value if isinstance(value, str) and len(value) <= limit else None


def _record_of(doc: object) -> QuarantineRecord:
    """The record in ``doc`` (parsed JSON); ``ValueError`` saying what is wrong."""
    if not isinstance(doc, dict) or doc.get("version") != RECORD_VERSION:
        raise ValueError(f"not a version {RECORD_VERSION} record object")
    gpus_doc, taint_doc = doc.get("gpus"), doc.get("taint")
    if not isinstance(gpus_doc, list):
        raise ValueError("gpus is not a list")
    gpus: list[RecordedGpu] = []
    for item in gpus_doc:
        if not isinstance(item, dict):
            raise ValueError("a GPU entry is not an object")
        index, uuid, reason = item.get("index"), item.get("uuid"), item.get("reason")
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < 4096:
            raise ValueError(f"GPU index {str(index)[:20]!r} is not a GPU index")
        if not isinstance(uuid, str) or not _UUID.fullmatch(uuid):
            raise ValueError(f"GPU {index}: {str(uuid)[:60]!r} is not a GPU UUID")
        if not isinstance(reason, str) or not _REASON.fullmatch(reason):
            raise ValueError(f"GPU {index}: {str(reason)[:40]!r} is not a fault kubegpu records")
        gpus.append(RecordedGpu(index=index, uuid=uuid, reason=reason))
    taint: tuple[str, str, str] | None = None
    if taint_doc is not None:
        if not isinstance(taint_doc, dict):
            raise ValueError("taint is not an object")
        key, value = _text(taint_doc.get("key"), 317), _text(taint_doc.get("value"), 63)
        effect = taint_doc.get("effect")
        if not key or value is None or effect not in _TAINT_EFFECTS:
            raise ValueError("taint is not a key, value and effect")
        taint = (key, value, str(effect))
    return QuarantineRecord(gpus=tuple(gpus), taint=taint)


def read_record(node: Mapping[str, Any]) -> tuple[QuarantineRecord | None, str | None]:
    """The durable record on ``node`` (the API's JSON): (record, None); (None, None) when the node
    carries none; (None, why) when the annotation is not a record kubegpu wrote (garbage, another
    version, too long): it is refused whole, never half used."""
    notes = (node.get("metadata") or {}).get("annotations") or {}
    raw = notes.get(RECORD_ANNOTATION) if isinstance(notes, Mapping) else None
    if raw is None:
        return None, None
    if not isinstance(raw, str) or len(raw) > RECORD_LIMIT:
        return None, f"{RECORD_ANNOTATION} is not a string of at most {RECORD_LIMIT} characters"
    try:
        return _record_of(json.loads(raw)), None
    except (ValueError, RecursionError) as exc:
        return None, f"{RECORD_ANNOTATION} is not a quarantine record: {str(exc)[:200]}"


_RECORD = re.compile(r"GPU (\d+) (\S+) ([A-Za-z]+\d*):")
_REASON_KINDS = {"EccDoubleBit": GpuEventKind.ECC_DOUBLE_BIT, "GpuLost": GpuEventKind.LOST}


Fault = tuple[str, GpuEventKind, int | None, str]


def _fault(uuid: str, reason: str) -> Fault | None:
    if reason.startswith("Xid") and reason[3:].isdigit():
        xid = int(reason[3:])
        entry = XID_CATALOG.get(xid)
        what = entry.description if entry is not None else "see NVIDIA's XID catalogue"
        return (uuid, GpuEventKind.XID, xid, f"XID {xid}: {what} (recorded by an earlier run)")
    if reason in _REASON_KINDS:
        return (uuid, _REASON_KINDS[reason], None, f"{reason} (recorded by an earlier run)")
    return None


def recorded_faults(node: Mapping[str, Any], problems: list[str] | None = None) -> list[Fault]:
    """What an earlier run recorded on ``node`` (the API's JSON) as failed: (UUID, kind, XID, reason
    text) per GPU. The record (``read_record``) when the node carries one; otherwise (an older agent),
    or when the record is refused (its problem is added to ``problems``), the GPUs the condition's
    message names; [] when there is neither (or the condition is not True)."""
    record, problem = read_record(node)
    if problem is not None and problems is not None:
        problems.append(problem)
    if record is not None:
        return [f for g in record.gpus if (f := _fault(g.uuid, g.reason)) is not None]
    for cond in node.get("status", {}).get("conditions", []) or []:
        if cond.get("type") != CONDITION_TYPE or cond.get("status") != "True":
            continue
        named = _RECORD.findall(str(cond.get("message", "")))
        return [f for _index, uuid, reason in named if (f := _fault(uuid, reason)) is not None]
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
