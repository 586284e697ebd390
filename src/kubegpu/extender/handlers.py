"""The scheduler-extender verbs as functions of decoded JSON: filter, prioritize, bind.

A translator, like the device plugin's gRPC servicer: JSON in (kube-scheduler's ``ExtenderArgs`` /
``ExtenderBindingArgs``, Go field names), a ``Ledger`` call, JSON out (``ExtenderFilterResult``,
``HostPriorityList``, ``ExtenderBindingResult``). Requests are accepted with node names
(``nodeCacheCapable: true``, the recommended setting: the extender keeps its own node state from
the API) or with full Node objects; the answer uses the same form.

The decision is made in **filter**: the only node returned is the one the policy picks, so
kube-scheduler, left with one feasible node, takes it without scoring (its scores could not carry
the policy's choice: extender scores are integers 0-10 added to its own). Bind then writes the
GPUs chosen at filter time onto the pod, in the Binding itself (``docs/extender.md``), and only for a
pod this extender's own filter placed on that node, of a ``schedulerName`` it serves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from kubegpu.errors import ApiServerError, KubegpuError
from kubegpu.extender.assignment import ANNOTATION, encode
from kubegpu.extender.ledger import HoldKind, Ledger

__all__ = ["DEFAULT_SCHEDULER_NAMES", "MAX_PRIORITY", "Extender", "PodBinder", "definite_refusal"]

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


DEFAULT_SCHEDULER_NAMES = frozenset({"kubegpu"})  # the chart's profile (deploy/helm/kubegpu)


def definite_refusal(exc: BaseException) -> bool:
    """Whether a failed write certainly did not happen: the API server answered 4xx (409 Conflict, 404,
    422, 403, 429 ...). A 5xx, a timeout or a broken connection (status 0) leaves it unknown: the write
    may have landed, or land later; 408 (the request timed out) too."""
    status = exc.status if isinstance(exc, ApiServerError) else 0
    return 400 <= status < 500 and status != 408


class Extender:
    """The three verbs over one ``Ledger``.

    ``ready``: filter answers an error until it is true; it is the flag (false until the first list
    of the API is in, set by the caller) and, when given, ``readiness()`` (the API watches are
    current). ``alive``: ``liveness()`` when given (the watch threads run), else true.
    ``scheduler_names``: the ``spec.schedulerName`` of the pods bind may bind.
    """

    def __init__(
        self,
        ledger: Ledger,
        binder: PodBinder,
        *,
        ready: bool = True,
        readiness: Callable[[], bool] | None = None,
        liveness: Callable[[], bool] | None = None,
        scheduler_names: Iterable[str] = DEFAULT_SCHEDULER_NAMES,
    ) -> None:
        self.ledger = ledger
        self.binder = binder
        self._ready = ready
        self._readiness = readiness
        self._liveness = liveness
        self.scheduler_names = frozenset(scheduler_names)

    @property
    def ready(self) -> bool:
        return self._ready and (self._readiness is None or self._readiness())

    @ready.setter
    def ready(self, value: bool) -> None:
        self._ready = value

    @property
    def alive(self) -> bool:
        return self._liveness is None or self._liveness()

    def filter(self, args: Mapping[str, Any]) -> dict[str, Any]:
        names, by_name = _candidates(args)
        pod = _object(args.get("Pod"))
        if not self.ready:
            return {
                "NodeNames": None,
                "Nodes": None,
                "FailedNodes": {},
                "Error": "kubegpu extender: not synced yet with the API server (its first list, or a "
                "watch failing); kube-scheduler retries the pod",
            }
        self._settle(pod)
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

    def _settle(self, pod: Mapping[str, Any]) -> None:
        """A pod filtered again after a bind with no known outcome: read it, so that the ledger learns
        whether that bind landed (``Ledger.settle``)."""
        meta = _object(pod.get("metadata"))
        held = self.ledger.holding(str(meta.get("uid", "")))
        if held is None or held.kind is not HoldKind.UNCERTAIN:
            return
        try:
            fresh = self.binder.get_pod(str(meta.get("namespace", "")), str(meta.get("name", "")))
        except KubegpuError as exc:
            log.warning("cannot read %s to settle its earlier bind: %s", _name(pod), exc)
            return
        if fresh is not None and (fresh.get("metadata") or {}).get("uid") == held.uid:
            self.ledger.settle(fresh)

    def prioritize(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The policy's node gets the top score, the rest 0 (only used if configured; filter decides)."""
        names, _ = _candidates(args)
        best = self.ledger.preview(_object(args.get("Pod")), names) if self.ready else None
        return [{"Host": n, "Score": MAX_PRIORITY if n == best else 0} for n in names]

    def bind(self, args: Mapping[str, Any]) -> dict[str, str]:
        """Write the Binding of a pod this extender's filter placed on ``Node``, with its GPUs.

        Refused, before anything is written, unless the ledger holds a reservation of this extender's
        own filter for the pod's uid on exactly that node, and the pod read from the API has that uid
        and a ``schedulerName`` this extender serves: ``/bind`` is no proxy for the permission to bind
        any pod anywhere. A refusal there leaves the reservation as it is (it lapses, or the next
        filter replaces it). The write's failure gives the GPUs back only when it was certainly
        refused; an unknown outcome keeps them until the pod is seen bound or gone."""
        ns, name = str(args.get("PodNamespace", "")), str(args.get("PodName", ""))
        uid, node = str(args.get("PodUID", "")), str(args.get("Node", ""))
        who = f"{ns}/{name} to {node}"
        held = self.ledger.holding(uid)
        if held is not None and held.node == node and held.kind is HoldKind.BOUND:
            return {"Error": f"kubegpu: cannot bind {who}: the pod is bound already"}
        if held is None or held.node != node or held.kind is HoldKind.BOUND:
            return {
                "Error": f"kubegpu: cannot bind {who}: no filter of this extender placed the pod on that "
                "node; kube-scheduler will retry"
            }
        if held.kind is HoldKind.BINDING:
            return {"Error": f"kubegpu: cannot bind {who}: a bind of the pod is already in flight"}
        try:
            pod = self.binder.get_pod(ns, name)
        except KubegpuError as exc:
            return {"Error": f"kubegpu: cannot bind {who}: cannot read the pod: {exc}"}
        if pod is None or str(_object(pod.get("metadata")).get("uid")) != uid:
            return {"Error": f"kubegpu: pod {ns}/{name} (uid {uid}) is gone"}
        scheduler = str(_object(pod.get("spec")).get("schedulerName") or "default-scheduler")
        if scheduler not in self.scheduler_names:
            return {
                "Error": f"kubegpu: cannot bind {who}: its schedulerName {scheduler[:63]!r} is not one "
                f"this extender serves ({', '.join(sorted(self.scheduler_names))})"
            }
        assignment = self.ledger.begin_bind(uid, node)
        if assignment is None:
            return {
                "Error": f"kubegpu: cannot bind {who}: its reservation lapsed or no longer fits; "
                "kube-scheduler will retry"
            }
        try:
            # a pod without GPUs (CPU-only pods reach the extender when managedResources is empty) gets
            # no assignment: there is nothing to record, and a share-less annotation would not decode
            annotations = {ANNOTATION: encode(assignment)} if assignment.gpus else {}
            self.binder.bind(ns, name, uid=uid, node=node, annotations=annotations)
        except Exception as exc:  # any failure must settle the reservation, then answer
            return self._failed_bind(ns, name, uid, node, exc)
        self.ledger.end_bind(uid, ok=True)
        log.info("bound %s GPUs %s", who, list(assignment.gpus))
        return {"Error": ""}

    def _failed_bind(self, ns: str, name: str, uid: str, node: str, exc: Exception) -> dict[str, str]:
        """The Binding's write failed: read the pod back. Bound there (this write, or an earlier one of
        ours, landed after all): done. Bound elsewhere, or gone: the GPUs here are given back. Else a
        certain refusal gives them back, an unknown outcome keeps them (``UNCERTAIN``) until the pod is
        seen bound or gone."""
        who = f"{ns}/{name} to {node}"
        certain = definite_refusal(exc)
        try:
            pod = self.binder.get_pod(ns, name)
            read = True
        except Exception as read_exc:  # the read only helps; without it the status decides
            log.warning("cannot read %s after its failed bind: %s", who, read_exc)
            pod, read = None, False
        meta = _object(_object(pod).get("metadata"))
        where = _object(_object(pod).get("spec")).get("nodeName")
        if pod is not None and meta.get("uid") == uid and where == node:
            self.ledger.end_bind(uid, ok=True)
            log.info("bind of %s answered %s, but the pod is bound there: done", who, exc)
            return {"Error": ""}
        if pod is not None and meta.get("uid") == uid and where:
            self.ledger.end_bind(uid, ok=False, certain=True)
            self.ledger.observe_pod(pod)  # counted where the API says it is
        else:
            gone = read and (pod is None or meta.get("uid") != uid)
            self.ledger.end_bind(uid, ok=False, certain=certain or gone)
        log.warning("bind failed%s: %s: %s", "" if certain else " (outcome unknown)", who, exc)
        return {"Error": f"kubegpu: {exc}"}


def _object(value: object) -> Mapping[str, Any]:
    """``value`` if it is a JSON object, else ``{}`` (a request's pod may be anything)."""
    return value if isinstance(value, Mapping) else {}


def _name(pod: Mapping[str, Any]) -> str:
    meta = _object(pod.get("metadata"))
    return f"{str(meta.get('namespace', ''))[:253]}/{str(meta.get('name', ''))[:253]}"
