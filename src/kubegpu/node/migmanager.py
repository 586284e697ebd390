"""The MIG manager: repartition the node's GPUs when its ``nvidia.com/mig.config`` label changes.

One thread (``MigManager``) reads the agent's Node every ``recheck_s`` seconds. When the label names a
config it has not settled yet (the label's value, or the mig-parted file's content, changed):

1. the named config is read from the mig-parted file (``kubegpu.migManager.configFile``, a mounted
   ConfigMap) and planned against the node (``kubegpu.model.migplan.plan_transition``). A config the
   file lacks, one that breaks a placement rule, or one the agent could not advertise with its
   config (``can_serve``: e.g. mixed profiles under MIG strategy ``single``) sets
   ``nvidia.com/mig.config.state=failed`` with the reason in a Warning Node event; the GPUs keep
   their layout;
2. otherwise the state is ``pending``. Pods holding a device backed by a GPU that must change (from
   kubelet's PodResources) block it: without ``drain`` the manager waits for them to end (one Normal
   event naming them), with ``drain`` it evicts them through the Eviction API (``PodEvictor``);
3. with no pod in the way the backend applies the layout (``MigBackend``: simulated instances or
   NVML), the agent re-advertises the new node to kubelet (``on_applied``: the all-or-nothing server
   swap of ``Agent.reload``, no restart) and rewrites the GFD labels; then the state is ``success``
   and a Normal event says what changed and how long it took. A backend failure is ``failed`` with
   the reason; the agent then advertises what the GPUs really have (``MigBackend.current``).

Every plan starts from the layout the GPUs hold, read back through the backend (``MigBackend.current``;
a layout applied that the agent could not serve is what the GPUs hold, not the layout served), never
from the last label: relabelling to a config the GPUs already hold is ``success`` (and the agent is
made to serve it if it serves another layout), relabelling to one they no longer hold repartitions
them. A label value that leaves ``pending`` for another one is planned afresh when it comes back.
A settled config is not applied again until the label or the file changes; a restarted agent plans
again (a node that already has the layout settles at once as ``success``, nothing torn down). A state
label someone else changed or removed while settled is written back. The state label is applied
with its own field manager (``kubegpu-mig-manager``, forced: it is this manager's report) so the GFD
label writer never removes it. Events go to the ``default`` namespace, where kubelet writes Node
events (``kubectl describe node`` shows them).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubegpu.backoff import Backoff, describe
from kubegpu.echo import clip
from kubegpu.errors import InputError, KubegpuError, MigApplyError, MigLayoutError
from kubegpu.kubeapi import MIG_FIELD_MANAGER, KubeApi
from kubegpu.model.holder import DeviceHolder
from kubegpu.model.mig import PlacedInstance
from kubegpu.model.migparted import MigPartedConfig
from kubegpu.model.migplan import (
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    MigBackend,
    MigConfigState,
    MigManagerSettings,
    MigTransition,
    blocking_pods,
    plan_transition,
    repartitioned,
)
from kubegpu.model.node import Gpu, GpuUuid, Node
from kubegpu.node.eviction import PodEvictor
from kubegpu.sources.migparted import BUILTIN_PREFIX, load_mig_parted

__all__ = ["EVENT_NAMESPACE", "MigManager", "MigOutcome"]

log = logging.getLogger(__name__)

EVENT_NAMESPACE = "default"
COMPONENT = "kubegpu-mig-manager"


def _state_of(label: str | None) -> MigConfigState | None:
    """The state label's value as a state (None: absent, or a value this manager does not write)."""
    try:
        return MigConfigState(label)
    except ValueError:
        return None


def _layout(node: Node) -> tuple[tuple[int, bool, tuple[tuple[str, int, str], ...]], ...]:
    """What a repartition changes on a node: per GPU its MIG mode and instances (profile, slot, UUID)."""
    return tuple(
        (g.index, g.mig_enabled, tuple((m.profile, m.start_slot, str(m.uuid)) for m in g.mig_instances))
        for g in node.gpus
    )


def _planned_uuid(gpu: Gpu, placed: PlacedInstance) -> GpuUuid:
    """A stand-in UUID for checking, before anything is applied, that the agent can serve a layout."""
    return GpuUuid(f"MIG-planned-{gpu.index}-{placed.profile.gi_profile_id}-{placed.start_slot}")


@dataclass(frozen=True, kw_only=True)
class MigOutcome:
    """What the last pass decided for a label value (for logs and tests)."""

    config: str
    state: MigConfigState
    message: str
    blocking: tuple[tuple[str, str], ...] = ()


class MigManager:
    """Follows ``nvidia.com/mig.config`` on node ``node_name`` (see the module docstring)."""

    def __init__(
        self,
        api: KubeApi,
        *,
        node_name: str,
        settings: MigManagerSettings,
        backend: MigBackend,
        node: Callable[[], Node],
        index_of: Callable[[], Mapping[str, int]],
        holders: Callable[[], list[DeviceHolder]],
        on_applied: Callable[[Node], bool],
        can_serve: Callable[[Node], str | None] | None = None,
        device_ids: Mapping[int, int] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._api, self._name = api, node_name
        self._settings = settings
        self._backend = backend
        self._node, self._index_of, self._holders = node, index_of, holders
        self._on_applied, self._can_serve = on_applied, can_serve
        self._device_ids = dict(device_ids or {})
        self._clock, self._wall = clock, wall_clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._evictor = PodEvictor(api, node_name=node_name, clock=clock)
        self._file_identity: tuple[object, ...] | None = None
        self._file: MigPartedConfig | None = None
        self._file_error: str | None = None
        self._settled: tuple[str, tuple[object, ...] | None] | None = None  # (label, file identity)
        self._settled_state = MigConfigState.SUCCESS  # what the state label said when it settled
        self._state_written: MigConfigState | None = None  # what the state label says now
        # the layout the GPUs hold when it is not the one the agent serves (applied, but the agent could
        # not serve it); None: the GPUs hold what the agent serves
        self._unserved: Node | None = None
        self._pending_since: float | None = None
        self._pending_for: str | None = None  # the label value _pending_since is about
        self._pending_told: tuple[str, tuple[tuple[str, str], ...]] | None = None
        self._node_uid: str | None = None
        self._backoff = Backoff(initial_s=0.5, max_s=30.0)
        self.last: MigOutcome | None = None

    # -- public -------------------------------------------------------------------------------------

    def set_settings(self, settings: MigManagerSettings) -> None:
        """New settings (a config reload): a changed file or drain is used from the next pass."""
        with self._lock:
            if settings.config_file != self._settings.config_file:
                self._file_identity = None
            self._settings = settings

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="mig-manager", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    # -- the loop -----------------------------------------------------------------------------------

    def _run(self) -> None:
        delay = 0.0
        while not self._stop.wait(delay):
            try:
                self.sync_once()
            except Exception as exc:  # an API failure, or a bug: this thread must not die
                delay = self._backoff.failed()
                log.warning(
                    "MIG manager pass failed; retrying",
                    extra={"node": self._name, "error": describe(exc), "retry_in_s": round(delay, 2)},
                )
                continue
            self._backoff.reset()
            with self._lock:
                delay = self._settings.recheck_s

    def sync_once(self) -> MigOutcome | None:
        """One pass; the outcome for the label's config, or ``None`` when there is nothing to do."""
        obj = self._api.get_node(self._name)
        if obj is None:
            raise MigApplyError(f"node {self._name} does not exist")
        meta = obj.get("metadata", {})
        self._node_uid = meta.get("uid") or self._node_uid
        labels: dict[str, str] = meta.get("labels", {}) or {}
        wanted = labels.get(MIG_CONFIG_LABEL)
        if not wanted:
            return None
        with self._lock:
            settings = self._settings
        identity = self._load_file(settings.config_file)
        key = (wanted, identity)
        state_now = labels.get(MIG_STATE_LABEL)
        self._state_written = _state_of(state_now)
        if key == self._settled:
            if self._state_written is not self._settled_state:  # the label was changed or removed
                self._write_state(self._settled_state)
            return None
        self._settled = None  # another value (or file) than the one settled: planned afresh
        outcome = self._pass(wanted, settings, state_now)
        self.last = outcome
        if outcome.state is not MigConfigState.PENDING:
            self._settled, self._settled_state = key, outcome.state
            self._pending_since = None
            self._pending_told = None
            self._evictor.clear()
        return outcome

    # -- one label value ----------------------------------------------------------------------------

    def _pass(self, wanted: str, settings: MigManagerSettings, state_now: str | None) -> MigOutcome:
        if self._file_error is not None or self._file is None:
            return self._fail(wanted, f"cannot read the mig-parted config: {self._file_error}")
        gpus = self._gpus()
        try:
            config = self._file.config(wanted)
            transition = plan_transition(gpus, config, device_ids=self._device_ids)
        except (InputError, MigLayoutError) as exc:
            return self._fail(wanted, f"config {clip(wanted)} refused: {exc}")
        if transition.affected and self._can_serve is not None:
            planned = repartitioned(gpus, transition, mig_uuid=_planned_uuid)
            problem = self._can_serve(planned)
            if problem is not None:
                return self._fail(
                    wanted, f"config {clip(wanted)} refused: the agent could not serve it: {problem}"
                )
        if not transition.affected:
            # the GPUs hold it already; the agent may serve another layout (one it could not serve)
            if _layout(gpus) != _layout(self._node()) and not self._on_applied(gpus):
                self._unserved = gpus
                why = f"the GPUs hold {clip(wanted)}, but its devices could not be served"
                return self._fail(wanted, why)
            self._unserved = None
            self._write_state(MigConfigState.SUCCESS)
            message = f"{transition.describe()} (nothing to change)"
            if state_now != MigConfigState.SUCCESS.value:
                self._event("Normal", "MigConfigApplied", message)
            log.info("MIG config already in place", extra={"node": self._name, "config": wanted})
            return MigOutcome(config=wanted, state=MigConfigState.SUCCESS, message=message)
        if self._pending_since is None or self._pending_for != wanted:
            self._pending_since, self._pending_for = self._clock(), wanted
        self._write_state(MigConfigState.PENDING)
        try:
            holders = self._holders()
        except KubegpuError as exc:
            message = f"cannot read which pods hold the GPUs to repartition; waiting: {exc}"
            log.warning(message, extra={"node": self._name, "config": wanted})
            return MigOutcome(config=wanted, state=MigConfigState.PENDING, message=message)
        blocking = blocking_pods(holders, transition.affected, self._index_of())
        if blocking:
            return self._wait_for(wanted, transition, blocking, drain=settings.drain)
        return self._apply(wanted, transition, gpus)

    def _gpus(self) -> Node:
        """The layout the GPUs hold now, read back through the backend (NVML reads the GPUs; simulated
        GPUs hold what the agent serves, or the layout last applied that it could not serve)."""
        return self._backend.current(self._unserved if self._unserved is not None else self._node())

    def _wait_for(
        self, wanted: str, transition: MigTransition, blocking: tuple[tuple[str, str], ...], *, drain: bool
    ) -> MigOutcome:
        pods = ", ".join(f"{ns}/{p}" for ns, p in blocking[:10]) + (" …" if len(blocking) > 10 else "")
        gpus = ",".join(map(str, transition.affected))
        if drain:
            message = f"{wanted}: evicting pods on GPU(s) {gpus} before repartitioning: {pods}"
            for ns, pod in self._evictor.evict(blocking):
                log.warning(
                    "pod evicted for a MIG repartition", extra={"pod": f"{ns}/{pod}", "config": wanted}
                )
        else:
            message = (
                f"{wanted}: waiting for pods on GPU(s) {gpus} to end before repartitioning "
                f"(kubegpu.migManager.drain is off): {pods}"
            )
        told = (wanted, blocking)
        if told != self._pending_told:
            self._pending_told = told
            self._event("Normal", "MigConfigPending", message)
            log.info("MIG repartition pending", extra={"node": self._name, "config": wanted, "pods": pods})
        return MigOutcome(config=wanted, state=MigConfigState.PENDING, message=message, blocking=blocking)

    def _apply(self, wanted: str, transition: MigTransition, gpus: Node) -> MigOutcome:
        t0 = self._clock()
        try:
            new = self._backend.apply(gpus, transition)
        except MigApplyError as exc:
            try:
                now = self._backend.current(gpus)
                self._unserved = None if self._on_applied(now) else now  # advertise what the GPUs have
            except KubegpuError as again:
                log.error("cannot re-read the GPUs after a failed repartition", extra={"error": str(again)})
            return self._fail(wanted, f"applying {clip(wanted)} failed: {exc}")
        if not self._on_applied(new):
            self._unserved = new  # the GPUs hold it: the next config is planned from it, not from the old
            why = f"{clip(wanted)} applied to the GPUs, but the new devices could not be served"
            return self._fail(wanted, why)
        self._unserved = None
        took = self._clock() - t0
        waited = t0 - (self._pending_since or t0)
        self._write_state(MigConfigState.SUCCESS)
        message = f"{transition.describe()} (applied in {took:.2f} s" + (
            f", after waiting {waited:.1f} s for pods)" if waited >= 0.5 else ")"
        )
        self._event("Normal", "MigConfigApplied", message)
        log.info(
            "MIG config applied",
            extra={
                "node": self._name,
                "config": wanted,
                "gpus": list(transition.affected),
                "took_s": round(took, 3),
            },
        )
        return MigOutcome(config=wanted, state=MigConfigState.SUCCESS, message=message)

    def _fail(self, wanted: str, message: str) -> MigOutcome:
        self._write_state(MigConfigState.FAILED)
        self._event("Warning", "MigConfigFailed", message)
        log.error("MIG config failed", extra={"node": self._name, "config": wanted, "error": message})
        return MigOutcome(config=wanted, state=MigConfigState.FAILED, message=message)

    # -- the file -----------------------------------------------------------------------------------

    def _load_file(self, source: str) -> tuple[object, ...] | None:
        """(Re)load the mig-parted file when its identity changed; its identity (None: unreadable)."""
        identity: tuple[object, ...] | None
        if source.startswith(BUILTIN_PREFIX):
            identity = (source,)
        else:
            try:
                real = os.path.realpath(source)
                st = os.stat(real)
                identity = (real, st.st_ino, st.st_size, st.st_mtime_ns)
            except OSError as exc:
                self._file, self._file_error, self._file_identity = None, f"{source}: {exc.strerror}", None
                return None
        if identity != self._file_identity:
            try:
                self._file, self._file_error = load_mig_parted(source), None
            except KubegpuError as exc:
                self._file, self._file_error = None, str(exc)
            self._file_identity = identity
        return identity

    # -- writing to the Node ------------------------------------------------------------------------

    def _write_state(self, state: MigConfigState) -> None:
        if state is self._state_written:
            return
        patch = {"metadata": {"labels": {MIG_STATE_LABEL: state.value}}}
        self._api.apply_node(self._name, patch, field_manager=MIG_FIELD_MANAGER, force=True)
        self._state_written = state

    def _event(self, kind: str, reason: str, message: str) -> None:
        now = dt.datetime.fromtimestamp(self._wall(), tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        involved: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "name": self._name}
        if self._node_uid:
            involved["uid"] = self._node_uid
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{self._name}.mig-", "namespace": EVENT_NAMESPACE},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": COMPONENT, "host": self._name},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._name,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._api.create_event(EVENT_NAMESPACE, event)
        except KubegpuError as exc:
            log.warning("cannot write a Node event", extra={"reason": reason, "error": str(exc)[:300]})
