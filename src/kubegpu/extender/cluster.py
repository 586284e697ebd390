"""The extender's link to the API server: list and watch nodes and pods into the ledger; bind pods.

Why a module of its own: the ledger stays free of I/O and is tested with plain dicts; this adapter
owns the threads, the retries and the API calls, all through ``kubegpu.kubeapi`` (the project's one
API client). Each of the two collections is listed page by page (``KubeApi.list_pages``), each page
turned at once into the ledger's compact records (``GpuNode``, ``PodFacts``) so that one page of raw
objects at most is alive, the records handed to the ledger whole (``replace_*``), then watched from
the list's resource version; a watch that the server ends is resumed from the last
version seen, one that fails (or answers 410 Gone), or anything else that goes wrong, is followed by
a fresh list, after a backoff. An object that cannot be read is refused alone. ``ClusterSync.ready``
and ``alive`` are what the extender's ``/readyz`` and ``/healthz`` report.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubegpu.backoff import Backoff, describe
from kubegpu.errors import ApiServerError, PlacementError
from kubegpu.extender.ledger import Ledger
from kubegpu.extender.node import GpuNode, gpu_node_of
from kubegpu.extender.podfacts import PodFacts, facts_of
from kubegpu.extender.podpage import pod_page
from kubegpu.kubeapi import EXTENDER_FIELD_MANAGER, ApiObject, KubeApi

__all__ = ["ApiBinder", "ClusterSync", "WatchHealth"]

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


@dataclass(frozen=True, kw_only=True)
class WatchHealth:
    """One collection's list-and-watch loop: its thread is running, its first list is in, and for how
    long it has been failing (0 when its last list or watch went through)."""

    path: str
    alive: bool
    listed: bool
    failing_s: float
    error: str = ""


class ClusterSync:
    """Two daemon threads keeping ``ledger`` current; ``on_synced`` runs once both first lists are in.

    Nothing an object or the API server does ends a thread: an object the ledger cannot take is
    refused alone (logged), any other failure is followed, after a backoff, by a fresh list.
    ``ready()`` says whether the ledger can be trusted (both lists in, both threads running, neither
    failing for ``stale_after_s`` or more); ``alive()`` whether both threads still run (a thread that
    ended anyway is a bug, and only a restart of the process recovers)."""

    def __init__(
        self,
        api: KubeApi,
        ledger: Ledger,
        *,
        on_synced: Callable[[], None] = lambda: None,
        watch_timeout_s: int = 120,
        stale_after_s: float = 60.0,
        wait: Callable[[threading.Event, float], bool] = threading.Event.wait,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api, self._ledger, self._on_synced = api, ledger, on_synced
        self._timeout_s = watch_timeout_s
        self._stale_s = stale_after_s
        self._wait = wait
        self._clock = clock
        self._stop = threading.Event()
        self._synced: set[str] = set()
        self._ready_once = False  # both first lists in and on_synced returned
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self._failing_since: dict[str, float] = {}
        self._errors: dict[str, str] = {}

    def start(self) -> None:
        for path in (NODES, PODS):
            t = threading.Thread(target=self._run, args=(path,), name=f"extender-watch{path}", daemon=True)
            t.start()
            self._threads[path] = t

    def stop(self) -> None:
        self._stop.set()

    # -- health ------------------------------------------------------------------------------------

    def health(self) -> list[WatchHealth]:
        now = self._clock()
        with self._lock:
            return [
                WatchHealth(
                    path=path,
                    alive=path not in self._threads or self._threads[path].is_alive(),
                    listed=path in self._synced,
                    failing_s=now - self._failing_since[path] if path in self._failing_since else 0.0,
                    error=self._errors.get(path, ""),
                )
                for path in (NODES, PODS)
            ]

    def alive(self) -> bool:
        """Both loops still run (true before ``start``; false once stopped)."""
        return all(h.alive for h in self.health())

    def ready(self) -> bool:
        """The ledger is current: both first lists in, both loops running, none failing for long."""
        with self._lock:
            synced = self._ready_once
        return synced and all(h.alive and h.failing_s < self._stale_s for h in self.health())

    def _ok(self, path: str) -> None:
        with self._lock:
            self._failing_since.pop(path, None)
            self._errors.pop(path, None)

    def _failed(self, path: str, exc: BaseException) -> None:
        with self._lock:
            self._failing_since.setdefault(path, self._clock())
            self._errors[path] = describe(exc)

    # -- the loops ---------------------------------------------------------------------------------

    def _listed(self, path: str) -> None:
        with self._lock:
            first = len(self._synced) < 2
            self._synced.add(path)
            done = len(self._synced) == 2
        if first and done:
            log.info("extender synced: %d nodes", self._ledger.node_count())
            try:
                self._on_synced()
            except Exception:  # e.g. the warm-up: the extender serves without it
                log.exception("after the first lists: on_synced failed")
            with self._lock:
                self._ready_once = True

    def _relist(self, path: str) -> str:
        """List ``path`` into the ledger, page by page; the list's resource version."""
        if path == NODES:
            pages = self._api.list_pages(path)
            nodes: list[GpuNode] = []
            for page in pages:
                for item in page:
                    try:
                        nodes.append(gpu_node_of(item))
                    except Exception as exc:  # one node refused, not the list
                        log.warning("node left out: %s: %s", _name(item), describe(exc))
            self._ledger.replace_nodes(nodes)
        else:
            # a page's bytes become PodFacts at once: only the fields placement reads are decoded
            pages = self._api.list_pages(path, decode=pod_page)
            pods: list[PodFacts] = []
            for page in pages:  # (a test's stand-in API may hand raw objects: read them here)
                pods.extend(p if isinstance(p, PodFacts) else facts_of(p) for p in page)
            self._ledger.replace_pods(pods)  # refuses an unreadable pod alone
        return pages.resource_version

    def _event(self, path: str, kind: str, obj: ApiObject) -> None:
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        if path == NODES:
            name = meta.get("name")
            if kind == "DELETED":
                self._ledger.remove_node(str(name or ""))
                return
            try:
                node = gpu_node_of(obj)
            except PlacementError as exc:
                log.warning("node left out: %s: %s", _name(obj), exc)
                if isinstance(name, str):
                    self._ledger.remove_node(name)  # what it said before is no longer true
                return
            self._ledger.upsert_node(node)
        elif kind == "DELETED":
            self._ledger.remove_pod(str(meta.get("uid") or ""))
        else:
            self._ledger.observe_pod(facts_of(obj))

    def _run(self, path: str) -> None:
        backoff = Backoff(initial_s=0.5, max_s=10.0)
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    version = self._relist(path)
                    self._ok(path)
                    self._listed(path)
                version = self._watch(path, version)
                self._ok(path)
                backoff.reset()
            except Exception as exc:  # the loop must outlive anything: list again
                self._failed(path, exc)
                if isinstance(exc, ApiServerError):
                    log.warning("watch of %s failed; listing again: %s", path, exc)
                else:
                    log.exception("watch of %s failed unexpectedly; listing again", path)
                version = ""
                self._wait(self._stop, backoff.failed())

    def _watch(self, path: str, version: str) -> str:
        """Apply events until the server ends the watch; the version to resume from ("" = relist). An
        event the ledger cannot take is refused alone (logged); the watch goes on."""
        for event in self._api.watch(path, resource_version=version, timeout_s=self._timeout_s):
            if not isinstance(event, Mapping):
                log.warning("watch of %s: an event that is not an object; ignored", path)
                continue
            kind = str(event.get("type", ""))
            obj = event.get("object")
            obj = obj if isinstance(obj, Mapping) else {}
            if kind == "ERROR":
                log.info(
                    "watch of %s ended by the server: %.200s",
                    path,
                    obj.get("message", obj.get("reason", "")),
                )
                return ""
            meta = obj.get("metadata")
            seen = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
            version = seen if isinstance(seen, str) and seen else version
            if kind != "BOOKMARK":
                try:
                    self._event(path, kind, dict(obj))
                except Exception:  # a bug on one object must not stop the watch
                    log.exception("watch of %s: event refused: %s %s", path, kind, _name(obj))
            if self._stop.is_set():
                break
        return version


def _name(obj: object) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return "<no metadata>"
    return f"{str(meta.get('namespace', ''))[:253]}/{str(meta.get('name', ''))[:253]}".lstrip("/")
