"""Keeps this node's ResourceSlices equal to what the driver publishes.

One reconcile reads the driver's slices for the node (field selectors ``spec.nodeName`` and
``spec.driver``, which the node authorizer also allows), compares a content hash kept in an
annotation (so API-server normalisation never looks like a change), and when anything differs
writes the whole pool at ``generation + 1``: every slice is created or replaced, then slices the pool
no longer needs are deleted (consumers ignore slices of an older generation meanwhile).

kubelet deletes every slice of its node when it starts, and a driver's slices 30 s after its last
instance disconnected (uninstall); ``SliceKeeper`` reconciles periodically and on ``poke()`` so slices
wiped by a kubelet restart come back within one period.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from kubegpu.errors import ApiServerError
from kubegpu.model.dra import DRIVER_NAME, DraDevice, resource_slices

__all__ = ["HASH_ANNOTATION", "SliceApi", "SliceKeeper", "SlicePublisher"]

log = logging.getLogger(__name__)

HASH_ANNOTATION = "kubegpu.io/content-hash"
ApiObject = dict[str, Any]


class SliceApi(Protocol):
    def get_node(self, name: str, *, quick: bool = False) -> ApiObject | None: ...
    def list_resource_slices(self, *, node_name: str, driver: str) -> list[ApiObject]: ...
    def create_resource_slice(self, body: ApiObject) -> ApiObject | None: ...
    def replace_resource_slice(self, body: ApiObject) -> ApiObject | None: ...
    def delete_resource_slice(self, name: str) -> None: ...


def _content_hash(slice_: ApiObject) -> str:
    spec = dict(slice_["spec"])
    spec["pool"] = {k: v for k, v in spec["pool"].items() if k != "generation"}
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _generation(slice_: ApiObject) -> int:
    try:
        return int(slice_["spec"]["pool"]["generation"])
    except (KeyError, TypeError, ValueError):
        return 0


class SlicePublisher:
    def __init__(self, api: SliceApi, *, node_name: str, driver: str = DRIVER_NAME) -> None:
        self._api = api
        self.node_name = node_name
        self.driver = driver
        self._node_uid: str | None = None
        self.generation = 0

    def _uid(self) -> str | None:
        if self._node_uid is None:
            node = self._api.get_node(self.node_name)
            if node is not None:
                self._node_uid = str(node.get("metadata", {}).get("uid") or "") or None
        return self._node_uid

    def publish(self, devices: Sequence[DraDevice]) -> bool:
        """Make the node's slices say ``devices``; ``True`` when anything was written."""
        existing = {
            str(s["metadata"]["name"]): s
            for s in self._api.list_resource_slices(node_name=self.node_name, driver=self.driver)
        }
        current = max((_generation(s) for s in existing.values()), default=0)
        desired = resource_slices(
            node_name=self.node_name,
            node_uid=self._uid(),
            devices=devices,
            generation=current,
            driver=self.driver,
        )
        for s in desired:
            s["metadata"].setdefault("annotations", {})[HASH_ANNOTATION] = _content_hash(s)
        same = set(existing) == {s["metadata"]["name"] for s in desired} and all(
            existing[s["metadata"]["name"]].get("metadata", {}).get("annotations", {}).get(HASH_ANNOTATION)
            == s["metadata"]["annotations"][HASH_ANNOTATION]
            and _generation(existing[s["metadata"]["name"]]) == current
            for s in desired
        )
        if same:
            self.generation = current
            return False
        generation = current + 1
        for s in desired:
            s["spec"]["pool"]["generation"] = generation
            old = existing.get(s["metadata"]["name"])
            if old is None:
                self._api.create_resource_slice(s)
            else:
                s["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion")
                self._api.replace_resource_slice(s)
        wanted = {s["metadata"]["name"] for s in desired}
        for name in sorted(set(existing) - wanted):
            self._api.delete_resource_slice(name)
        self.generation = generation
        log.info(
            "ResourceSlices published",
            extra={
                "node": self.node_name,
                "generation": generation,
                "devices": len(devices),
                "slices": len(desired),
            },
        )
        return True

    def remove(self) -> None:
        for s in self._api.list_resource_slices(node_name=self.node_name, driver=self.driver):
            self._api.delete_resource_slice(str(s["metadata"]["name"]))


class SliceKeeper:
    """Runs ``publisher.publish(devices())`` every ``interval_s`` and on ``poke()``, on its own thread."""

    def __init__(
        self,
        publisher: SlicePublisher,
        devices: Callable[[], Sequence[DraDevice]],
        *,
        interval_s: float = 10.0,
    ) -> None:
        self.publisher = publisher
        self._devices = devices
        self.interval_s = interval_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str = ""
        self.published = threading.Event()  # set after the first successful reconcile

    def reconcile(self) -> bool:
        try:
            changed = self.publisher.publish(self._devices())
        except ApiServerError as exc:
            if str(exc) != self.last_error:
                log.error("cannot publish ResourceSlices; retrying", extra={"error": str(exc)})
            self.last_error = str(exc)
            return False
        self.last_error = ""
        self.published.set()
        return changed

    def poke(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dra-slices", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            self.reconcile()
            self._wake.wait(self.interval_s if not self.last_error else min(self.interval_s, 2.0))

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
