"""The agent's work on its own Node: GFD-compatible labels and the quarantine of a failed GPU.

One thread (``NodeHygiene``) keeps the Node as the agent wants it, retrying with backoff while the API
server fails, one log line per failure:

* **the GPUs' UUIDs** (``set_uuids``): the annotation ``kubegpu.io/gpu-uuids`` (index order, comma-
  separated), applied with the labels, so ``kubegpu extender``'s assignments name the real GPUs;
* **labels** (``set_labels``): the whole kubegpu label set is server-side applied with field manager
  ``kubegpu``, so a key it applied before and no longer wants is removed by the API server, and keys
  of other managers (GFD, the user) are never touched; a key another manager owns with another value
  is left to it (one warning) rather than taken over;
* **quarantine**, on the health tracker's changes: failed GPUs (``quarantine.failed_gpus``) give the
  node a condition (status subresource, manager ``kubegpu-quarantine``, server-side apply), a taint
  (a merge patch of ``spec.taints`` guarded by ``resourceVersion``: taints are one atomic list shared
  with kubelet and users) and evictions (policy/v1; a 429 from a PodDisruptionBudget is retried with
  backoff, never turned into a delete) within the fleet's cap (``lease.QuarantineLease``). When every
  GPU is healthy again (an explicit recovery, or the tracker's quiet-period policy) the taint and the
  condition are removed and the node's place in the Lease is given back.

The taint and the durable record (annotation ``kubegpu.io/quarantine``: every failed GPU and the taint
written, ``quarantine.record_text``) change together, in one merge patch. ``read_back`` (called by the
agent before health events flow) re-applies to the tracker the faults that a previous run recorded
(the record; the condition's message for a node an older agent quarantined, or when the record is
refused as garbage), so a restart keeps a quarantine rather than forgetting it, and recomputes the same
condition and taint rather than adding new ones.

A reload (``set_quarantine``) leaves nothing of the old settings behind: turned off, kubegpu's taint
and condition are removed and the node's Lease place given back; a new ``taintKey`` moves the taint
(removing under the old key only the taint kubegpu wrote, exactly: key, value and effect); a new
``lease`` gives the old Lease's place back.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from kubegpu.backoff import Backoff, describe
from kubegpu.errors import ApiServerError, KubegpuError
from kubegpu.health.quarantine import EvictionPolicy, QuarantineSettings
from kubegpu.health.tracker import HealthTracker
from kubegpu.kubeapi import FIELD_MANAGER, QUARANTINE_FIELD_MANAGER, KubeApi
from kubegpu.model.assignment import UUIDS_ANNOTATION
from kubegpu.model.holder import DeviceHolder
from kubegpu.node.eviction import PodEvictor
from kubegpu.node.lease import QuarantineLease
from kubegpu.node.quarantine import (
    CONDITION_TYPE,
    RECORD_ANNOTATION,
    FailedGpu,
    condition_for,
    eviction_targets,
    failed_gpus,
    read_record,
    record_text,
    recorded_faults,
    taints_with,
)

__all__ = ["CAPPED_RETRY_S", "NodeHygiene"]

log = logging.getLogger(__name__)

CAPPED_RETRY_S = 30.0  # a node the fleet cap refused asks the Lease again this often
_EMPTY_RECORD = record_text([], None)  # a lifted quarantine: the condition, if left, is not read back


def _is_taint(taint: Mapping[str, object], ours: tuple[str, str, str]) -> bool:
    """Whether ``taint`` is exactly the one kubegpu wrote (key, value and effect)."""
    return (taint.get("key"), taint.get("value") or "", taint.get("effect")) == ours


class NodeHygiene:
    """Labels and quarantine of node ``node_name``; ``labels``/``quarantine`` None turn a part off."""

    def __init__(
        self,
        api: KubeApi,
        *,
        node_name: str,
        tracker: HealthTracker,
        uuids: Sequence[str],
        index_of: Mapping[str, int],
        holders: Callable[[], list[DeviceHolder]],
        quarantine: QuarantineSettings | None,
        labels_enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._api, self._node = api, node_name
        self._tracker, self._uuids, self._index_of = tracker, list(uuids), dict(index_of)
        self._holders = holders
        self._q = quarantine if quarantine is not None and quarantine.enabled else None
        self._labels_enabled = labels_enabled
        self._clock, self._wall = clock, wall_clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._labels_wanted: dict[str, str] | None = None
        self._labels_applied: tuple[dict[str, str] | None, dict[str, str]] | None = None
        self._annotations_wanted = self._uuid_annotation(uuids)
        self._label_skip: set[str] = set()
        self._applied: tuple[object, ...] | None = None  # the quarantine state last written
        self._retry_at = 0.0
        self._backoff = Backoff(initial_s=0.5, max_s=30.0)
        self._evictor = PodEvictor(api, node_name=node_name, clock=clock)
        self._failed_since: float | None = None  # the tracker's time of the quarantine's first fault
        self._capped = False
        self._capped_retry_at = 0.0
        self._holders_error: str | None = None
        self._settings = quarantine  # as configured, on or off: an off one still names its Lease
        self._lease: QuarantineLease | None = self._lease_for(self._q)
        self._ours: tuple[str, str, str] | None = None  # the taint kubegpu wrote: (key, value, effect)
        self._retiring: dict[str, QuarantineLease] = {}  # Leases to give this node's place back to
        self._cleanup = False  # quarantine turned off: take away the taint and condition it wrote

    # -- public -------------------------------------------------------------------------------------

    def set_labels(self, labels: Mapping[str, str]) -> None:
        """The label set to keep on the node (applied by the thread)."""
        if not self._labels_enabled:
            return
        with self._lock:
            self._labels_wanted = dict(labels)
        self._tracker.wake()

    @staticmethod
    def _uuid_annotation(uuids: Sequence[str]) -> dict[str, str]:
        return {UUIDS_ANNOTATION: ",".join(uuids)} if uuids else {}

    def set_uuids(self, uuids: Sequence[str]) -> None:
        """The node's GPU UUIDs in index order (published as ``kubegpu.io/gpu-uuids``)."""
        with self._lock:
            self._uuids = list(uuids)
            self._annotations_wanted = self._uuid_annotation(uuids)
        self._tracker.wake()

    def set_index_of(self, index_of: Mapping[str, int]) -> None:
        """New GPU/MIG UUID -> GPU index map (a MIG repartition made new MIG UUIDs)."""
        with self._lock:
            self._index_of = dict(index_of)

    def _lease_for(self, q: QuarantineSettings | None) -> QuarantineLease | None:
        if q is None:
            return None
        ns, _, name = q.lease.partition("/")
        return QuarantineLease(
            self._api,
            namespace=ns,
            name=name,
            taint_key=q.taint_key,
            max_share=q.max_share,
            wall_clock=self._wall,
        )

    def set_quarantine(self, settings: QuarantineSettings | None) -> None:
        """New quarantine settings (a config reload); the next pass writes what follows from them.

        What the old settings wrote does not stay behind: turned off, the next pass removes kubegpu's
        taint (the exact key, value and effect it wrote) and condition and gives the node's place in
        the fleet's Lease back; with a new ``taintKey`` the taint moves to the new key (the old one,
        again only kubegpu's own, is removed); with a new ``lease`` the old Lease is released."""
        new = settings if settings is not None and settings.enabled else None
        with self._lock:
            old = self._q
            if old is not None and self._lease is not None:
                self._retiring[old.lease] = self._lease
            if new is not None:
                self._retiring.pop(new.lease, None)
            self._q, self._settings = new, settings
            self._lease = self._lease_for(new)
            self._cleanup = new is None and (old is not None or self._cleanup)
            self._applied = None
        self._tracker.wake()

    def read_back(self) -> int:
        """Restore into the tracker the faults a previous run recorded (the node's record, else its
        condition); how many. With quarantine off, a record left by an earlier run is cleaned up by the
        first pass instead (its taint, condition and Lease place)."""
        settings = self._settings
        if settings is None:
            return 0
        node = self._api.get_node(self._node, quick=True)  # the agent's start waits for this
        if node is None:
            return 0
        record, problem = read_record(node)
        if problem is not None:
            log.error(
                "quarantine record on the node refused; reading the condition instead",
                extra={"node": self._node, "annotation": RECORD_ANNOTATION, "problem": problem},
            )
        with self._lock:
            if record is not None:
                self._ours = record.taint
            if self._q is None:
                if record is not None and (record.taint is not None or record.gpus):
                    self._cleanup = True
                    lease = self._lease_for(settings)
                    if lease is not None:
                        self._retiring[settings.lease] = lease
                return 0
        by_uuid = {u.lower(): i for i, u in enumerate(self._uuids)}
        restored = 0
        for uuid, kind, xid, reason in recorded_faults(node):
            index = by_uuid.get(uuid.lower())
            if index is None:
                log.warning("recorded quarantine names a GPU this node does not have", extra={"uuid": uuid})
                continue
            if self._tracker.restore(index, cause=kind, xid=xid, reason=reason) is not None:
                restored += 1
        if restored:
            log.warning("quarantine of an earlier run kept", extra={"node": self._node, "gpus": restored})
        return restored

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="node-hygiene", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._tracker.wake()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    # -- the loop -----------------------------------------------------------------------------------

    def _run(self) -> None:
        seen = -1
        while not self._stop.is_set():
            now = self._clock()
            if now >= self._retry_at:
                try:
                    self.sync_once()
                except Exception as exc:  # an API failure, or a bug: this thread must not die
                    delay = self._backoff.failed()
                    self._retry_at = self._clock() + delay
                    log.warning(
                        "node update failed; retrying",
                        extra={
                            "node": self._node,
                            "error": describe(exc),
                            "retry_in_s": round(delay, 2),
                            "failures": self._backoff.failures,
                        },
                    )
                else:
                    if self._backoff.failures:
                        log.info("node updates work again", extra={"node": self._node})
                    self._backoff.reset()
            timeout = 0.5 if self._evictions_pending() or self._retry_at > now else 1.0
            seen = self._tracker.wait_for_change(seen, timeout)

    def _evictions_pending(self) -> bool:
        return self._evictor.pending

    def sync_once(self) -> None:
        """One pass: quiet-period recovery, quarantine and evictions, then labels. Each part is tried
        even when the other fails (labels must never hold a quarantine back); the first API failure is
        raised afterwards, for the loop's backoff."""
        failure: KubegpuError | None = None
        self._tracker.recover_quiet()
        with self._lock:
            q, lease, cleanup, retiring = self._q, self._lease, self._cleanup, dict(self._retiring)
        if cleanup:
            try:
                self._clean_up()
            except KubegpuError as exc:
                failure = exc
        for name, old in retiring.items():
            try:
                old.release(self._node)
            except KubegpuError as exc:
                failure = failure or exc
                continue
            with self._lock:
                if self._retiring.get(name) is old:
                    del self._retiring[name]
            log.info("node's place in an old quarantine Lease given back", extra={"lease": name})
        if q is not None:
            try:
                failed = failed_gpus(self._tracker.statuses(), self._uuids, q.policy)
                self._sync_quarantine(q, lease, failed)
                if failed and not self._capped:
                    self._evict(q, failed)
                elif not failed:
                    self._evictor.clear()
            except KubegpuError as exc:
                failure = exc
        try:
            self._sync_labels()
        except KubegpuError as exc:
            failure = failure or exc
        if failure is not None:
            raise failure

    # -- labels -------------------------------------------------------------------------------------

    def _sync_labels(self) -> None:
        """Labels and the UUID annotation, in one server-side apply (manager ``kubegpu``). With labels
        on, nothing is applied before the label set is known: an apply without them would remove them."""
        with self._lock:
            wanted = self._labels_wanted
            notes = dict(self._annotations_wanted)
        if self._labels_enabled and wanted is None:
            return
        if (wanted, notes) == self._labels_applied or (wanted is None and not notes):
            return
        labels = {k: v for k, v in (wanted or {}).items() if k not in self._label_skip}

        def body() -> dict[str, object]:
            meta: dict[str, object] = {}
            if wanted is not None:
                meta["labels"] = labels
            if notes:
                meta["annotations"] = notes
            return {"metadata": meta}

        try:
            self._api.apply_node(self._node, body(), field_manager=FIELD_MANAGER)
        except ApiServerError as exc:
            if exc.status != 409:
                raise
            node = self._api.get_node(self._node) or {}
            theirs = node.get("metadata", {}).get("labels", {}) or {}
            conflicting = {k for k, v in labels.items() if k in theirs and theirs[k] != v}
            self._label_skip |= conflicting
            log.warning(
                "labels owned by another manager with other values are left to it",
                extra={"node": self._node, "labels": sorted(conflicting)},
            )
            labels = {k: v for k, v in labels.items() if k not in self._label_skip}
            self._api.apply_node(self._node, body(), field_manager=FIELD_MANAGER)
        first = self._labels_applied is None
        self._labels_applied = (wanted, notes)
        log.info(
            "node labels applied",
            extra={"node": self._node, "labels": len(labels), "annotations": sorted(notes), "first": first},
        )

    # -- quarantine ---------------------------------------------------------------------------------

    def _sync_quarantine(
        self, q: QuarantineSettings, lease: QuarantineLease | None, failed: list[FailedGpu]
    ) -> None:
        state = (tuple((f.index, f.reason) for f in failed), q.taint_key, q.taint_effect)
        if state == self._applied and not (self._capped and self._clock() >= self._capped_retry_at):
            return
        t0 = self._clock()
        assert lease is not None  # built with the settings
        capped = False
        if failed:
            if self._failed_since is None:  # when the first quarantining fault arrived
                statuses = self._tracker.statuses()
                self._failed_since = min(statuses[f.index].since for f in failed)
            decision = lease.claim(self._node, failed[0].reason)
            capped = not decision.allowed
            if capped:
                log.error(
                    "quarantine withheld: the fleet's cap is reached",
                    extra={
                        "node": self._node,
                        "quarantined": decision.quarantined,
                        "gpu_nodes": decision.gpu_nodes,
                        "max_share": q.max_share,
                    },
                )
        condition = condition_for(
            failed, prefix="quarantine withheld (fleet cap reached): " if capped else ""
        )
        taint = None
        if failed and not capped:
            taint = {"key": q.taint_key, "value": failed[0].reason, "effect": q.taint_effect.value}
        # the taint and the record first, in one write: a restart between the two writes keeps the record
        self._write_node(q.taint_key, taint, record_text(failed, taint) if failed else None)
        self._write_condition(condition)
        if not failed:
            lease.release(self._node)
            if self._applied is not None and self._applied[0]:
                log.warning("quarantine lifted", extra={"node": self._node})
            self._failed_since = None
        else:
            log.warning(
                "node quarantined" if not capped else "node marked, not quarantined (cap)",
                extra={
                    "node": self._node,
                    "gpus": [f"{f.index} {f.uuid}" for f in failed],
                    "reason": failed[0].reason,
                    "taint": taint,
                    "write_s": round(self._clock() - t0, 3),
                    "since_fault_s": None
                    if self._failed_since is None
                    else round(self._clock() - self._failed_since, 3),
                },
            )
        self._capped = capped
        self._capped_retry_at = self._clock() + CAPPED_RETRY_S
        self._applied = state

    def _write_node(self, key: str | None, taint: dict[str, str] | None, record: str | None) -> None:
        """kubegpu's taint under ``key`` (``taint``, or none) and the durable record (``record``; None:
        no failed GPU, written as an empty record when the node carries one), in one merge patch
        guarded by ``resourceVersion``. A taint kubegpu wrote under another key (a reload changed
        ``taintKey``, or quarantine is off: ``key`` None) is removed if it is still exactly as written;
        a taint of someone else under that key stays."""
        for _ in range(5):
            node = self._api.get_node(self._node)
            if node is None:
                raise ApiServerError(f"node {self._node} does not exist", status=404)
            current = [dict(t) for t in node.get("spec", {}).get("taints", []) or []]
            stale = self._ours if self._ours is not None and self._ours[0] != key else None
            kept = [t for t in current if stale is None or not _is_taint(t, stale)]
            taints = taints_with(kept, key=key, desired=taint) if key is not None else None
            if taints is None and len(kept) != len(current):
                taints = kept
            notes = node.get("metadata", {}).get("annotations", {}) or {}
            note = record if record is not None else (_EMPTY_RECORD if RECORD_ANNOTATION in notes else None)
            if note is not None and notes.get(RECORD_ANNOTATION) == note:
                note = None
            if taints is None and note is None:
                break
            meta: dict[str, object] = {"resourceVersion": node.get("metadata", {}).get("resourceVersion")}
            patch: dict[str, object] = {"metadata": meta}
            if note is not None:
                meta["annotations"] = {RECORD_ANNOTATION: note}
            if taints is not None:
                patch["spec"] = {"taints": taints}
            try:
                self._api.merge_patch_node(self._node, patch, field_manager=QUARANTINE_FIELD_MANAGER)
            except ApiServerError as exc:
                if exc.status == 409:
                    continue  # the node changed since it was read (kubelet's status, a user's taint)
                raise
            if stale is not None and len(kept) != len(current):
                log.info(
                    "kubegpu's taint under an old key removed",
                    extra={"node": self._node, "taint": "{}={}:{}".format(*stale)},
                )
            break
        else:
            raise ApiServerError(f"node {self._node}: taints still contended after 5 attempts", status=409)
        self._ours = None if taint is None else (taint["key"], taint.get("value", ""), taint["effect"])

    def _clean_up(self) -> None:
        """Quarantine was turned off: remove kubegpu's taint and condition, mark the record empty
        (the Lease is given back by the pass, from ``_retiring``)."""
        self._write_node(None, None, None)
        self._write_condition(None)
        self._evictor.clear()
        self._failed_since, self._capped = None, False
        with self._lock:
            if self._q is None:
                self._cleanup = False
        log.warning("quarantine off: kubegpu's taint and condition removed", extra={"node": self._node})

    def _write_condition(self, condition: dict[str, str] | None) -> None:
        patch: dict[str, object] = {}
        if condition is not None:
            now = dt.datetime.fromtimestamp(self._wall(), tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            cond = dict(condition)
            cond |= {"lastHeartbeatTime": now, "lastTransitionTime": now}
            patch = {"status": {"conditions": [cond]}}
        # Without a condition the apply owns nothing: the API server removes the one applied before.
        self._api.apply_node(
            self._node, patch, field_manager=QUARANTINE_FIELD_MANAGER, status=True, force=True
        )

    def _evict(self, q: QuarantineSettings, failed: list[FailedGpu]) -> None:
        if q.eviction is EvictionPolicy.NONE:
            return
        try:
            holders = self._holders()
        except KubegpuError as exc:
            if str(exc) != self._holders_error:  # once per distinct cause, not every pass
                log.warning("cannot read who holds the failed GPUs; retrying", extra={"error": describe(exc)})
            self._holders_error = str(exc)
            return
        self._holders_error = None
        with self._lock:
            index_of = self._index_of
        targets = eviction_targets(holders, [f.index for f in failed], index_of, q.eviction)
        now = self._clock()
        for ns, pod in self._evictor.evict(targets):
            since = None if self._failed_since is None else round(now - self._failed_since, 3)
            log.warning(
                "pod evicted",
                extra={
                    "pod": f"{ns}/{pod}",
                    "node": self._node,
                    "condition": CONDITION_TYPE,
                    "since_fault_s": since,
                },
            )
