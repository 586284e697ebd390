"""The extender's link to the API server: list and watch nodes and pods into the ledger; bind pods.

Why a module of its own: the ledger stays free of I/O and is tested with plain dicts; this adapter
owns the threads, the retries and the API calls, all through ``kubegpu.kubeapi`` (the project's one
API client). Each of the two collections is listed, handed to the ledger whole (``replace_*``), then
watched from the list's resource version; a watch that the server ends is resumed from the last
version seen, one that fails (or answers 410 Gone) is followed by a fresh list, after a backoff.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubegpu.backoff import Backoff
from kubegpu.errors import ApiServerError
from kubegpu.extender.ledger import Ledger
from kubegpu.extender.node import gpu_node_of
from kubegpu.kubeapi import EXTENDER_FIELD_MANAGER, ApiObject, KubeApi

__all__ = ["ApiBinder", "ClusterSync"]

log = logging.getLogger(__name__)

NODES, PODS = "/api/v1/nodes", "/api/v1/pods"


class ApiBinder:
    """``PodBinder`` over the API server: read a pod; create its Binding (annotations included)."""

    def __init__(self, api: KubeApi) -> None:
        self._api = api

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._api.get_pod(namespace, name)

    def bind(self, namespace: str, name: str, *, uid: str, node: str, annotations: Mapping[str, str]) -> None:
        self._api.bind_pod(
            namespace, name, uid=uid, node=node, annotations=annotations, field_manager=EXTENDER_FIELD_MANAGER
        )


class ClusterSync:
    """Two daemon threads keeping ``ledger`` current; ``on_synced`` runs once both first lists are in."""

    def __init__(
        self,
        api: KubeApi,
        ledger: Ledger,
        *,
        on_synced: Callable[[], None],
        watch_timeout_s: int = 120,
        wait: Callable[[threading.Event, float], bool] = threading.Event.wait,
    ) -> None:
        self._api, self._ledger, self._on_synced = api, ledger, on_synced
        self._timeout_s = watch_timeout_s
        self._wait = wait
        self._stop = threading.Event()
        self._synced: set[str] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for path in (NODES, PODS):
            t = threading.Thread(target=self._run, args=(path,), name=f"extender-watch{path}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()

    def _listed(self, path: str) -> None:
        with self._lock:
            first = len(self._synced) < 2
            self._synced.add(path)
            done = len(self._synced) == 2
        if first and done:
            log.info("extender synced: %d nodes", self._ledger.node_count())
            self._on_synced()

    def _replace(self, path: str, items: list[ApiObject]) -> None:
        if path == NODES:
            self._ledger.replace_nodes(gpu_node_of(i) for i in items)
        else:
            self._ledger.replace_pods(items)

    def _event(self, path: str, kind: str, obj: ApiObject) -> None:
        if path == NODES:
            name = str((obj.get("metadata") or {}).get("name", ""))
            if kind == "DELETED":
                self._ledger.remove_node(name)
            else:
                self._ledger.upsert_node(gpu_node_of(obj))
        elif kind == "DELETED":
            self._ledger.remove_pod(str((obj.get("metadata") or {}).get("uid", "")))
        else:
            self._ledger.observe_pod(obj)

    def _run(self, path: str) -> None:
        backoff = Backoff(initial_s=0.5, max_s=10.0)
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    items, version = self._api.list_objects(path)
                    self._replace(path, items)
                    self._listed(path)
                version = self._watch(path, version)
                backoff.reset()
            except ApiServerError as exc:
                log.warning("watch of %s failed; listing again: %s", path, exc)
                version = ""
                self._wait(self._stop, backoff.failed())

    def _watch(self, path: str, version: str) -> str:
        """Apply events until the server ends the watch; the version to resume from ("" = relist)."""
        for event in self._api.watch(path, resource_version=version, timeout_s=self._timeout_s):
            kind = str(event.get("type", ""))
            obj = event.get("object") or {}
            if kind == "ERROR":
                log.info(
                    "watch of %s ended by the server: %s", path, obj.get("message", obj.get("reason", ""))
                )
                return ""
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind != "BOOKMARK":
                self._event(path, kind, obj)
            if self._stop.is_set():
                break
        return version
