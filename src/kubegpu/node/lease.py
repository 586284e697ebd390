"""The fleet-wide quarantine cap: one coordination.k8s.io Lease holding the set of quarantined nodes.

Why a Lease: every agent must see the same count before it quarantines its node, and two agents
deciding at once must not both take the last place. The Lease (``kubegpu.quarantine.lease``, default
``kube-system/kubegpu-quarantine``) carries the set in its annotation ``kubegpu.io/quarantined-nodes``
(JSON ``{node: {"reason": "Xid79", "since": <unix s>}}``) and every change is a replace with the read
``resourceVersion``: a concurrent change answers 409 and the agent reads again and re-decides. The
number of GPU nodes is counted from the node list (``nvidia.com/gpu.present=true`` or any
``nvidia.com/*`` capacity). An entry whose node is gone, or has not carried kubegpu's taint for
``STALE_AFTER_S`` (an agent that died mid-quarantine, a node recovered by hand), is dropped by the next
agent that writes, so a lost entry cannot block the fleet forever.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubegpu.errors import ApiServerError
from kubegpu.kubeapi import ApiObject, KubeApi
from kubegpu.node.quarantine import cap_allows

__all__ = ["ANNOTATION", "STALE_AFTER_S", "CapDecision", "QuarantineLease", "gpu_node_count"]

log = logging.getLogger(__name__)

ANNOTATION = "kubegpu.io/quarantined-nodes"
STALE_AFTER_S = 120.0
ATTEMPTS = 5


def _is_gpu_node(node: ApiObject) -> bool:
    labels = node.get("metadata", {}).get("labels", {}) or {}
    if labels.get("nvidia.com/gpu.present") == "true":
        return True
    capacity = node.get("status", {}).get("capacity", {}) or {}
    return any(k.startswith("nvidia.com/") and str(v) not in ("0", "") for k, v in capacity.items())


def gpu_node_count(nodes: list[ApiObject]) -> int:
    return sum(1 for n in nodes if _is_gpu_node(n))


@dataclass(frozen=True, kw_only=True)
class CapDecision:
    """The outcome of a claim: ``allowed``, and the counts for the log line."""

    allowed: bool
    quarantined: int
    gpu_nodes: int


class QuarantineLease:
    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        name: str,
        taint_key: str,
        max_share: float,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._api, self._ns, self._name = api, namespace, name
        self._taint_key, self._max_share, self._now = taint_key, max_share, wall_clock

    def _entries(self, lease: ApiObject | None) -> dict[str, Any]:
        if lease is None:
            return {}
        raw = (lease.get("metadata", {}).get("annotations", {}) or {}).get(ANNOTATION, "{}")
        try:
            doc = json.loads(raw)
        except ValueError:
            log.warning(
                "quarantine lease annotation unreadable; starting it afresh", extra={"lease": self._name}
            )
            return {}
        return doc if isinstance(doc, dict) else {}

    def _prune(self, entries: dict[str, Any], nodes: list[ApiObject]) -> dict[str, Any]:
        by_name = {str(n.get("metadata", {}).get("name")): n for n in nodes}
        now = self._now()
        kept: dict[str, Any] = {}
        for node, entry in entries.items():
            obj = by_name.get(node)
            if obj is None:
                continue
            tainted = any(
                t.get("key") == self._taint_key for t in obj.get("spec", {}).get("taints", []) or []
            )
            since = entry.get("since", 0) if isinstance(entry, dict) else 0
            if tainted or now - float(since or 0) < STALE_AFTER_S:
                kept[node] = entry
        return kept

    def _write(self, lease: ApiObject | None, entries: dict[str, Any]) -> None:
        annotations = {ANNOTATION: json.dumps(entries, sort_keys=True)}
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self._name, "namespace": self._ns, "annotations": annotations},
                "spec": {},
            }
            self._api.create_lease(self._ns, body)
            return
        meta = dict(lease.get("metadata", {}))
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
        self._api.replace_lease(self._ns, {**lease, "metadata": meta})

    def claim(self, node: str, reason: str) -> CapDecision:
        """Count ``node`` in, if the cap allows; raises ``ApiServerError`` when the API keeps failing."""
        for _ in range(ATTEMPTS):
            nodes = self._api.list_nodes()
            lease = self._api.get_lease(self._ns, self._name)
            entries = self._entries(lease)
            pruned = self._prune(entries, nodes)
            total = gpu_node_count(nodes)
            if node in pruned and pruned == entries:
                return CapDecision(allowed=True, quarantined=len(pruned), gpu_nodes=total)
            allowed = cap_allows(pruned, node, gpu_nodes=total, max_share=self._max_share)
            if allowed:
                pruned[node] = {"reason": reason, "since": int(self._now())}
            if not allowed and pruned == entries:
                return CapDecision(allowed=False, quarantined=len(pruned), gpu_nodes=total)
            try:
                self._write(lease, pruned)
            except ApiServerError as exc:
                if exc.status == 409:
                    continue  # someone else changed it first: read again, decide again
                raise
            return CapDecision(allowed=allowed, quarantined=len(pruned), gpu_nodes=total)
        raise ApiServerError(
            f"lease {self._ns}/{self._name}: still contended after {ATTEMPTS} attempts", status=409
        )

    def release(self, node: str) -> None:
        """Count ``node`` out (nothing to do when it is not counted)."""
        for _ in range(ATTEMPTS):
            lease = self._api.get_lease(self._ns, self._name)
            entries = self._entries(lease)
            if node not in entries:
                return
            del entries[node]
            try:
                self._write(lease, entries)
            except ApiServerError as exc:
                if exc.status == 409:
                    continue
                raise
            return
        raise ApiServerError(
            f"lease {self._ns}/{self._name}: still contended after {ATTEMPTS} attempts", status=409
        )
