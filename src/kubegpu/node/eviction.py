"""Evicting pods from the agent's node through the Eviction API (policy/v1), never by deleting them.

Shared by the quarantine (pods on a failed GPU) and the MIG manager's drain (pods on a GPU that must be
repartitioned). Each pass gets the pods that should go; a pod is first read back (still on this node,
not already terminating), then evicted. A refusal (429: a PodDisruptionBudget; any other API error) is
logged and retried with backoff per pod (1 s doubling to 30 s); a pod that left the list (kubelet no
longer reports it holding a device) is forgotten.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kubegpu.backoff import Backoff
from kubegpu.errors import ApiServerError
from kubegpu.kubeapi import KubeApi

__all__ = ["PodEvictor"]

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class _Eviction:
    next_at: float = 0.0
    backoff: Backoff = field(default_factory=lambda: Backoff(initial_s=1.0, max_s=30.0))
    done: bool = False


class PodEvictor:
    """Evictions of pods on node ``node_name``, each tried until done; not thread-safe (one caller)."""

    def __init__(self, api: KubeApi, *, node_name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._api, self._node, self._clock = api, node_name, clock
        self._pods: dict[tuple[str, str], _Eviction] = {}

    @property
    def pending(self) -> bool:
        """Some pod is still to be evicted (a retry is due later)."""
        return any(not e.done for e in self._pods.values())

    def clear(self) -> None:
        self._pods.clear()

    def evict(self, targets: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """One pass over (namespace, pod) ``targets``; the pods evicted in this pass."""
        wanted = list(dict.fromkeys(targets))
        for key in list(self._pods):
            if key not in wanted:
                del self._pods[key]  # gone from kubelet's list: evicted and stopped
        now = self._clock()
        evicted = []
        for ns, pod in wanted:
            ev = self._pods.setdefault((ns, pod), _Eviction())
            if ev.done or now < ev.next_at:
                continue
            obj = self._api.get_pod(ns, pod)
            if (
                obj is None
                or obj.get("metadata", {}).get("deletionTimestamp")
                or (obj.get("spec", {}).get("nodeName") not in (None, self._node))
            ):
                ev.done = True
                continue
            try:
                self._api.evict(ns, pod)
            except ApiServerError as exc:
                delay = ev.backoff.failed()
                ev.next_at = now + delay
                what = (
                    "eviction refused (PodDisruptionBudget); retrying"
                    if exc.status == 429
                    else "eviction failed; retrying"
                )
                log.warning(what, extra={"pod": f"{ns}/{pod}", "error": str(exc)[:300], "retry_in_s": delay})
                continue
            ev.done = True
            evicted.append((ns, pod))
        return evicted
