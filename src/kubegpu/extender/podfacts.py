"""What the extender keeps of a Pod object: the few fields placement needs, read once.

Why: a Pod object as the API server sends it (managedFields, status with conditions, volumes, env)
is about 6 KB of JSON and several times that as Python objects; a 15,000-node cluster runs 450,000
of them. The extender's list (``kubegpu.extender.cluster``) turns each page of pods into
``PodFacts`` as soon as it arrives, so the raw objects of one page at most are alive at a time, and
the ledger keeps only these: uid, namespace/name, node, phase, the ask and the recorded assignment.

Reading is done here, once, and never raises: an ask or an assignment that cannot be read is kept as
its reason (``ask_error``, ``claim_error``), and the ledger logs and refuses it when it counts the pod
(as it did when it read the raw object itself). Equal asks are shared between pods, and node names
and GPU UUIDs are interned, so 450,000 pods on 15,000 nodes keep a few thousand distinct objects of
those kinds.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kubegpu.errors import PlacementError
from kubegpu.extender.ask import Ask, ask_of
from kubegpu.extender.assignment import Assignment, assignment_of

__all__ = ["PodFacts", "facts_of", "pod_name"]

log = logging.getLogger(__name__)

_ASKS_KEPT = 4096  # distinct asks shared between pods (a cluster has a few dozen)
_asks: dict[Ask, Ask] = {}
# a pod's ask by its resources as written (hashable JSON values): 450,000 pods have a few dozen
_by_resources: dict[tuple[object, ...], Ask] = {}


@dataclass(frozen=True, kw_only=True, slots=True)
class PodFacts:
    """A pod as the ledger counts it. ``ask`` is read only for a pod on a node (``node``); ``None``
    with ``ask_error`` when it cannot be read. ``claim`` is the recorded GPU assignment (read only for
    a pod that asks GPUs); ``None`` without one, or with ``claim_error`` when unreadable."""

    uid: str
    pod: str  # namespace/name, for messages
    node: str  # spec.nodeName; "" while pending
    phase: str
    ask: Ask | None = None
    ask_error: str = ""
    claim: Assignment | None = None
    claim_error: str = ""


def _field(obj: object, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def pod_name(pod: object) -> str:
    """``namespace/name`` of a raw pod object, clipped (hostile objects have any shape)."""
    meta = _field(pod, "metadata")
    return f"{str(meta.get('namespace', ''))[:253]}/{str(meta.get('name', ''))[:253]}"


def _shared(ask: Ask) -> Ask:
    found = _asks.get(ask)
    if found is not None:
        return found
    if len(_asks) >= _ASKS_KEPT:
        _asks.clear()
    _asks[ask] = ask
    return ask


def _flat(value: object) -> object:
    """A decoded JSON object one level deep as a key (inner objects as item tuples); values must be
    hashable for the key to be used (a lookup with a list inside raises ``TypeError``)."""
    if type(value) is dict:
        return tuple((k, tuple(v.items()) if type(v) is dict else v) for k, v in value.items())
    return value


def _resources_key(pod: Mapping[str, Any]) -> tuple[object, ...] | None:
    """What the ask is read from: each container's and init container's resources, and the overhead;
    ``None`` when the pod's shape is unusual (the ask is then read without the cache)."""
    spec = pod.get("spec")
    if type(spec) is not dict:
        return None
    parts: list[object] = []
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        if containers is None:
            parts.append(None)
            continue
        if type(containers) is not list or not all(type(c) is dict for c in containers):
            return None
        parts.append(tuple(_flat(c.get("resources")) for c in containers))
    parts.append(_flat(spec.get("overhead")))
    return tuple(parts)


def _ask(pod: Mapping[str, Any]) -> Ask:
    """``ask_of(pod, bound=True)``, shared between pods whose resources are written alike."""
    key = _resources_key(pod)
    try:
        found = _by_resources.get(key) if key is not None else None
    except TypeError:  # a list or an object among the quantities: not a key
        key, found = None, None
    if found is not None:
        return found
    ask = _shared(ask_of(pod, bound=True))
    if key is not None:
        if len(_by_resources) >= _ASKS_KEPT:
            _by_resources.clear()
        _by_resources[key] = ask
    return ask


def _compact(claim: Assignment) -> Assignment:
    return replace(claim, node=sys.intern(claim.node), uuids=tuple(sys.intern(u) for u in claim.uuids))


def facts_of(pod: object) -> PodFacts:
    """The ``PodFacts`` of a raw pod object; never raises (an unreadable part is kept as its reason,
    and an object that is not a pod has uid ``""``, which the ledger ignores)."""
    meta = _field(pod, "metadata")
    uid = meta.get("uid")
    uid = uid if isinstance(uid, str) else ""
    phase = _field(pod, "status").get("phase")
    phase = sys.intern(phase) if isinstance(phase, str) and len(phase) <= 32 else ""
    node = _field(pod, "spec").get("nodeName")
    node = sys.intern(node) if isinstance(node, str) else ""
    name = pod_name(pod)
    if not uid or not node or not isinstance(pod, Mapping):
        return PodFacts(uid=uid, pod=name, node=node, phase=phase)  # only its presence matters
    try:
        ask = _ask(pod)
    except PlacementError as exc:
        return PodFacts(uid=uid, pod=name, node=node, phase=phase, ask_error=str(exc))
    except Exception as exc:  # a bug on one object: refused alone, as the ledger refuses it
        log.exception("pod cannot be read; left out: %s", name)
        return PodFacts(uid=uid, pod=name, node=node, phase=phase, ask_error=f"cannot be read: {exc!r}"[:300])
    claim: Assignment | None = None
    error = ""
    if ask.num_gpu:
        try:
            found = assignment_of(pod)
            claim = None if found is None else _compact(found)
        except PlacementError as exc:
            error = str(exc)
        except Exception as exc:
            log.exception("pod's GPU assignment cannot be read: %s", name)
            error = f"cannot be read: {exc!r}"[:300]
    return PodFacts(uid=uid, pod=name, node=node, phase=phase, ask=ask, claim=claim, claim_error=error)
