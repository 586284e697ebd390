"""The GPU assignment the extender writes on a pod at bind: which node, which GPUs, how much of each.

Pure (in the model): the extender writes and rebuilds from it, the node agent reads it to hand a
share's container the GPU chosen (``kubegpu.deviceplugin.shares``).

Why an annotation: it is the extender's only state that must survive a restart, and it lives on the
object it describes. A restarted extender lists the pods and rebuilds exactly the same per-GPU
accounting from these annotations; the node agent reads it to hand the container the GPU chosen.

Key ``kubegpu.io/gpu-assignment``; value one line of JSON with sorted keys, e.g.
``{"gpus":[2],"milli":500,"node":"gpu-7","uuids":["GPU-3b1f..."],"version":1}``: ``gpus`` are GPU
indices on the node, ``uuids`` the same GPUs' UUIDs where the node publishes them (annotation
``kubegpu.io/gpu-uuids``; empty otherwise), ``milli`` the share taken of each GPU (1000 = whole).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubegpu.errors import PlacementError

__all__ = [
    "ANNOTATION",
    "FORMAT_VERSION",
    "MILLI",
    "UUIDS_ANNOTATION",
    "Assignment",
    "assignment_of",
    "decode",
    "encode",
]

MILLI = 1000  # a whole GPU in thousandths (kubegpu.sim.scoring.MILLI)
ANNOTATION = "kubegpu.io/gpu-assignment"
UUIDS_ANNOTATION = (
    "kubegpu.io/gpu-uuids"  # on the Node, by the agent: its GPUs' UUIDs, index order, comma-separated
)
FORMAT_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class Assignment:
    """A pod's GPUs: ``gpus`` indices on ``node`` (``uuids`` in the same order, or empty), ``milli`` each."""

    node: str
    gpus: tuple[int, ...]
    uuids: tuple[str, ...]
    milli: int


def encode(assignment: Assignment) -> str:
    """The annotation's value."""
    doc = {
        "gpus": list(assignment.gpus),
        "milli": assignment.milli,
        "node": assignment.node,
        "uuids": list(assignment.uuids),
        "version": FORMAT_VERSION,
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def decode(text: str) -> Assignment:
    """Parse the annotation's value; ``PlacementError`` saying what is wrong with it."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise PlacementError(f"{ANNOTATION} is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise PlacementError(f"{ANNOTATION} must be a JSON object")
    node, gpus, uuids, milli = doc.get("node"), doc.get("gpus"), doc.get("uuids", []), doc.get("milli")
    if not isinstance(node, str) or not node:
        raise PlacementError(f"{ANNOTATION}: 'node' must be a node name")
    if not isinstance(gpus, list) or not all(isinstance(g, int) and g >= 0 for g in gpus):
        raise PlacementError(f"{ANNOTATION}: 'gpus' must be a list of GPU indices")
    if len(set(gpus)) != len(gpus):
        raise PlacementError(f"{ANNOTATION}: 'gpus' names a GPU twice")
    if (
        not isinstance(uuids, list)
        or not all(isinstance(u, str) for u in uuids)
        or len(uuids) not in (0, len(gpus))
    ):
        raise PlacementError(f"{ANNOTATION}: 'uuids' must be empty or one UUID per GPU")
    if not isinstance(milli, int) or not 0 < milli <= MILLI:
        raise PlacementError(f"{ANNOTATION}: 'milli' must be 1-{MILLI}")
    return Assignment(node=node, gpus=tuple(gpus), uuids=tuple(uuids), milli=milli)


def assignment_of(pod: Mapping[str, Any]) -> Assignment | None:
    """The pod's assignment annotation, ``None`` without one; ``PlacementError`` if unreadable."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    return None if text is None else decode(str(text))
