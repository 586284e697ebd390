"""Which of this node's devices ResourceClaims hold now, from one list and a watch.

Why: the DRA driver orders its slice's devices by what is allocated (``model.dra.order_devices``,
``--device-order topology``). It used to LIST every ResourceClaim of the cluster every resync (10 s),
on every node: at 15,000 nodes, 1,500 LISTs a second of 124 MiB each, and a driver of 964 MiB.
Now it lists once, page by page (``KubeApi.list_pages``), then watches from the list's resource
version; a watch the server ends is resumed from the last version seen, and only a watch that fails
(410 Gone: the version is too old; a broken connection) is followed by a fresh list, after a
backoff. Of each claim it keeps only the allocation results naming this driver and this node's pool
(claim uid -> device names), so its memory is this node's allocations, whatever the cluster's size.

ResourceClaims have no field selector for the node they are allocated on, so the watch still carries
every claim's changes (the cluster's claim churn); the periodic full list is gone (docs/dra.md says
why a watch rather than only the claims this driver prepared).

A claim that cannot be read is left out alone (logged); ``on_change`` is called when the set of held
devices changes (the slice is then republished in the new order).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from kubegpu.backoff import Backoff, describe
from kubegpu.errors import ApiServerError
from kubegpu.model.dra import allocated_devices

__all__ = ["CLAIMS", "ClaimPages", "ClaimWatch", "WatchApi"]

log = logging.getLogger(__name__)

CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"


class ClaimPages(Protocol):
    """``KubeApi.list_pages``: the pages of one list; its version once every page is taken."""

    def __iter__(self) -> Iterator[list[dict[str, Any]]]: ...

    @property
    def resource_version(self) -> str: ...


class WatchApi(Protocol):
    def list_pages(self, path: str) -> ClaimPages: ...

    def watch(self, path: str, *, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]: ...


class ClaimWatch:
    """This node's allocations (claim uid -> this driver's devices in ``pool``), kept by a daemon
    thread; ``allocated()`` is the devices held now, ``synced`` is set once the first list is in."""

    def __init__(
        self,
        api: WatchApi,
        *,
        pool: str,
        driver: str,
        on_change: Callable[[], None] = lambda: None,
        watch_timeout_s: int = 300,
        wait: Callable[[threading.Event, float], bool] = threading.Event.wait,
    ) -> None:
        self._api, self._pool, self._driver = api, pool, driver
        self._on_change = on_change
        self._timeout_s = watch_timeout_s
        self._wait = wait
        self._held: dict[str, frozenset[str]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.synced = threading.Event()
        self.lists = 0  # full lists made (1 unless watches failed)

    def allocated(self) -> frozenset[str]:
        with self._lock:
            return frozenset().union(*self._held.values())

    def claims(self) -> int:
        """Claims holding devices of this pool now."""
        with self._lock:
            return len(self._held)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dra-claims", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    # -- reading claims ----------------------------------------------------------------------------

    def _devices(self, claim: Mapping[str, Any]) -> frozenset[str]:
        return frozenset(allocated_devices([dict(claim)], pool=self._pool, driver=self._driver))

    def _keep(self, held: dict[str, frozenset[str]], claim: object) -> None:
        """Record ``claim``'s devices of this pool in ``held`` (nothing when it holds none)."""
        meta = claim.get("metadata") if isinstance(claim, Mapping) else None
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        if not isinstance(uid, str) or not uid or not isinstance(claim, Mapping):
            return
        try:
            devices = self._devices(claim)
        except Exception as exc:  # a claim of any shape: refused alone
            log.warning("ResourceClaim left out: %s: %s", uid[:64], describe(exc))
            held.pop(uid, None)
            return
        if devices:
            held[uid] = devices
        else:
            held.pop(uid, None)

    def _swap(self, held: dict[str, frozenset[str]]) -> None:
        with self._lock:
            before = frozenset().union(*self._held.values())
            self._held = held
            after = frozenset().union(*held.values())
        if after != before:
            self._on_change()

    def _event(self, kind: str, claim: object) -> None:
        with self._lock:
            before = frozenset().union(*self._held.values())
            if kind == "DELETED":
                meta = claim.get("metadata") if isinstance(claim, Mapping) else None
                uid = meta.get("uid") if isinstance(meta, Mapping) else None
                if isinstance(uid, str):
                    self._held.pop(uid, None)
            else:
                self._keep(self._held, claim)
            after = frozenset().union(*self._held.values())
        if after != before:
            self._on_change()

    # -- the loop ----------------------------------------------------------------------------------

    def _list(self) -> str:
        pages = self._api.list_pages(CLAIMS)
        held: dict[str, frozenset[str]] = {}
        for page in pages:
            for claim in page:
                self._keep(held, claim)
        self.lists += 1
        self._swap(held)
        self.synced.set()
        return pages.resource_version

    def _watch(self, version: str) -> str:
        """Apply events until the server ends the watch: the version to resume from ("" = list)."""
        for event in self._api.watch(CLAIMS, resource_version=version, timeout_s=self._timeout_s):
            if self._stop.is_set():
                return version
            if not isinstance(event, Mapping):
                continue
            kind = str(event.get("type", ""))
            obj = event.get("object")
            if kind == "ERROR":
                reason = obj.get("message", obj.get("reason", "")) if isinstance(obj, Mapping) else ""
                log.info("ResourceClaim watch ended by the server; listing again: %.200s", reason)
                return ""
            meta = obj.get("metadata") if isinstance(obj, Mapping) else None
            seen = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
            version = seen if isinstance(seen, str) and seen else version
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self._event(kind, obj)
        return version

    def _run(self) -> None:
        backoff = Backoff(initial_s=1.0, max_s=60.0)
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    version = self._list()
                version = self._watch(version)
                if version:
                    backoff.reset()
                else:  # 410: list again, after a pause
                    self._wait(self._stop, backoff.failed())
            except Exception as exc:  # the loop outlives anything: list again after a backoff
                if isinstance(exc, ApiServerError):
                    log.warning("ResourceClaim watch failed; listing again: %s", exc)
                else:
                    log.exception("ResourceClaim watch failed unexpectedly; listing again")
                version = ""
                self._wait(self._stop, backoff.failed())
