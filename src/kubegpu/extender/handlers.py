"""The scheduler-extender verbs as functions of decoded JSON: filter, prioritize, bind.

A translator, like the device plugin's gRPC servicer: JSON in (kube-scheduler's ``ExtenderArgs`` /
``ExtenderBindingArgs``, Go field names), a ``Ledger`` call, JSON out (``ExtenderFilterResult``,
``HostPriorityList``, ``ExtenderBindingResult``). Requests are accepted with node names
(``nodeCacheCapable: true``, the recommended setting: the extender keeps its own node state from
the API) or with full Node objects; the answer uses the same form.

The decision is made in **filter**: the only node returned is the one the policy picks, so
kube-scheduler, left with one feasible node, takes it without scoring (its scores could not carry
the policy's choice: extender scores are integers 0-10 added to its own). Bind then writes the
GPUs chosen at filter time onto the pod, in the Binding itself (``docs/extender.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from kubegpu.errors import ApiServerError, KubegpuError
from kubegpu.extender.assignment import ANNOTATION, encode
from kubegpu.extender.ledger import Ledger

__all__ = ["MAX_PRIORITY", "Extender", "PodBinder"]

log = logging.getLogger(__name__)

MAX_PRIORITY = 10  # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority


class PodBinder(Protocol):
    """The two API calls bind needs (``kubegpu.extender.cluster.ApiBinder`` on a real cluster)."""

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def bind(
        self, namespace: str, name: str, *, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None: ...


def _candidates(args: Mapping[str, Any]) -> tuple[list[str], bool]:
    """The candidate node names, and whether they came as names (nodeCacheCapable) or Node objects."""
    names = args.get("NodeNames")
    if names is not None:
        return [str(n) for n in names], True
    items = (args.get("Nodes") or {}).get("items") or []
    return [str((i.get("metadata") or {}).get("name", "")) for i in items], False


class Extender:
    """The three verbs over one ``Ledger``; ``ready`` is false until the first list of the API is in."""

    def __init__(self, ledger: Ledger, binder: PodBinder, *, ready: bool = True) -> None:
        self.ledger = ledger
        self.binder = binder
        self.ready = ready

    def filter(self, args: Mapping[str, Any]) -> dict[str, Any]:
        names, by_name = _candidates(args)
        pod = args.get("Pod") or {}
        if not self.ready:
            return {
                "NodeNames": None,
                "Nodes": None,
                "FailedNodes": {},
                "Error": "kubegpu extender: not synced yet",
            }
        decision = self.ledger.decide(pod, names)
        chosen = [decision.node] if decision.node is not None else []
        reply: dict[str, Any] = {
            "FailedNodes": dict(decision.failed),
            "FailedAndUnresolvableNodes": dict(decision.unresolvable),
            "Error": "",
        }
        if by_name:
            reply["NodeNames"], reply["Nodes"] = chosen, None
        else:
            items = [
                i
                for i in (args.get("Nodes") or {}).get("items") or []
                if (i.get("metadata") or {}).get("name") in chosen
            ]
            reply["NodeNames"], reply["Nodes"] = None, {"metadata": {}, "items": items}
        if decision.assignment is not None:
            log.info(
                "placed %s on %s GPUs %s (%sm each)",
                _name(pod),
                decision.node,
                list(decision.assignment.gpus),
                decision.assignment.milli,
            )
        return reply

    def prioritize(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The policy's node gets the top score, the rest 0 (only used if configured; filter decides)."""
        names, _ = _candidates(args)
        best = self.ledger.preview(args.get("Pod") or {}, names) if self.ready else None
        return [{"Host": n, "Score": MAX_PRIORITY if n == best else 0} for n in names]

    def bind(self, args: Mapping[str, Any]) -> dict[str, str]:
        ns, name = str(args.get("PodNamespace", "")), str(args.get("PodName", ""))
        uid, node = str(args.get("PodUID", "")), str(args.get("Node", ""))
        try:
            assignment = self.ledger.begin_bind(uid, node)
            if assignment is None:  # no reservation (the extender restarted since the filter): decide now
                pod = self.binder.get_pod(ns, name)
                if pod is None or str((pod.get("metadata") or {}).get("uid")) != uid:
                    return {"Error": f"kubegpu: pod {ns}/{name} (uid {uid}) is gone"}
                decision = self.ledger.decide(pod, [node])
                if decision.node != node:
                    reason = {**decision.failed, **decision.unresolvable}.get(node, "does not fit")
                    return {"Error": f"kubegpu: cannot bind {ns}/{name} to {node}: {reason}"}
                assignment = self.ledger.begin_bind(uid, node)
                if assignment is None:
                    return {"Error": f"kubegpu: cannot bind {ns}/{name} to {node}: reservation lost"}
        except KubegpuError as exc:
            return {"Error": f"kubegpu: {exc}"}
        try:
            # a pod without GPUs (CPU-only pods reach the extender when managedResources is empty) gets
            # no assignment: there is nothing to record, and a share-less annotation would not decode
            annotations = {ANNOTATION: encode(assignment)} if assignment.gpus else {}
            self.binder.bind(ns, name, uid=uid, node=node, annotations=annotations)
        except ApiServerError as exc:
            self.ledger.end_bind(uid, ok=False)
            log.warning("bind failed: %s/%s to %s: %s", ns, name, node, exc)
            return {"Error": f"kubegpu: {exc}"}
        self.ledger.end_bind(uid, ok=True)
        log.info("bound %s/%s to %s GPUs %s", ns, name, node, list(assignment.gpus))
        return {"Error": ""}


def _name(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
