"""The DRA driver's decisions: what NodePrepareResources and NodeUnprepareResources do for each claim.

Transport-free: the gRPC servicers in ``dra.server`` translate to and from protobuf; this module reads
the claim (through a ``ClaimReader``), checks what the scheduler allocated against what this node
publishes, writes the CDI spec and the checkpoint, and answers per claim. Rules (dra-protocol.md §1):

- one answer per claim UID asked, never a gRPC error for one bad claim: a claim that cannot be prepared
  gets its own ``error``, which kubelet puts in the pod's ``FailedPrepareDynamicResources`` event;
- prepare is idempotent: a claim already prepared (checkpointed) is answered from the checkpoint and
  its CDI spec rewritten if it went missing, without reading the API server;
- the claim is read from the API server and refused when it is gone, not allocated, or replaced (its
  UID differs), or when a result names a pool or device this node does not publish;
- unprepare of an unknown claim succeeds; unprepare removes the CDI spec, then the checkpoint entry;
- a checkpoint write that fails (a full disk, an I/O error) changes nothing in memory or on disk and is
  that claim's error: a prepare is not recorded (its CDI spec is removed again), an unprepared claim is
  not forgotten, and kubelet retries;
- all calls are serialised (one lock), as the Go helper does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kubegpu.dra.checkpoint import CdiStore, Checkpoint, PreparedClaim, PreparedDevice
from kubegpu.errors import ApiServerError, ClaimError
from kubegpu.model.dra import DRIVER_NAME, ClaimDevice, DraDevice, cdi_ids, cdi_spec

__all__ = ["ClaimReader", "ClaimRef", "DraDriver", "PrepareAnswer"]

log = logging.getLogger(__name__)


class ClaimReader(Protocol):
    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None: ...


@dataclass(frozen=True, kw_only=True)
class ClaimRef:
    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, kw_only=True)
class PrepareAnswer:
    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


class DraDriver:
    def __init__(
        self,
        *,
        node_name: str,
        devices: Sequence[DraDevice],
        claims: ClaimReader,
        checkpoint: Checkpoint,
        cdi: CdiStore,
        driver: str = DRIVER_NAME,
        mounts: Sequence[tuple[str, str]] = (),
        on_change: Callable[[], None] | None = None,
        control_nodes: Sequence[str] = (),
        gpu_nodes: bool = False,
        device_nodes: Mapping[str, Sequence[str]] | None = None,
        common_edits: dict[str, Any] | None = None,
    ) -> None:
        self.node_name = node_name
        self.driver = driver
        self._claims = claims
        self._checkpoint = checkpoint
        self._cdi = cdi
        self._mounts = tuple(mounts)
        self._lock = threading.Lock()
        self._on_change = on_change
        self._control_nodes = tuple(control_nodes)
        self._gpu_nodes = gpu_nodes
        self._device_nodes = dict(device_nodes or {})  # MIG devices' nvidia-caps nodes, by device name
        self._common_edits = common_edits  # the driver's files every claim's spec carries (model/cdi.py)
        self._devices: dict[str, DraDevice] = {d.name: d for d in devices}

    @property
    def pool(self) -> str:
        return self.node_name

    def set_devices(self, devices: Sequence[DraDevice]) -> None:
        """What the node publishes now (health or layout changed); prepared claims are not touched."""
        with self._lock:
            self._devices = {d.name: d for d in devices}

    def prepared(self) -> dict[str, PreparedClaim]:
        with self._lock:
            return dict(self._checkpoint.claims)

    # -- prepare ---------------------------------------------------------------------------------

    def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareAnswer]:
        answers: dict[str, PrepareAnswer] = {}
        with self._lock:
            for ref in refs:
                try:
                    answers[ref.uid] = PrepareAnswer(devices=self._prepare_one(ref))
                except ClaimError as exc:
                    log.warning(
                        "claim not prepared", extra={"claim": str(ref), "uid": ref.uid, "error": str(exc)}
                    )
                    answers[ref.uid] = PrepareAnswer(error=str(exc))
        self._changed()
        return answers

    def _changed(self) -> None:
        if self._on_change is not None:
            try:
                self._on_change()
            except Exception as exc:  # a listener's bug must not fail kubelet's call
                log.error("claim-change listener failed", extra={"error": str(exc)})

    def _prepare_one(self, ref: ClaimRef) -> tuple[PreparedDevice, ...]:
        done = self._checkpoint.claims.get(ref.uid)
        if done is not None:
            if done.cdi_spec is not None and not self._cdi.present(ref.uid):
                try:
                    self._cdi.write(ref.uid, done.cdi_spec)
                except OSError as exc:
                    raise ClaimError(
                        f"ResourceClaim {ref}: cannot rewrite its CDI spec in {self._cdi.directory}: "
                        f"{exc.strerror or exc}"
                    ) from exc
            return done.devices
        try:
            claim = self._claims.get_resource_claim(ref.namespace, ref.name)
        except ApiServerError as exc:
            raise ClaimError(f"ResourceClaim {ref}: cannot be read from the API server: {exc}") from exc
        if claim is None:
            raise ClaimError(f"ResourceClaim {ref} does not exist (deleted before the pod started?)")
        uid = str(claim.get("metadata", {}).get("uid", ""))
        if uid != ref.uid:
            raise ClaimError(
                f"ResourceClaim {ref} was replaced: kubelet asked for UID {ref.uid}, the API has {uid}"
            )
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            raise ClaimError(f"ResourceClaim {ref} is not allocated")
        picked: list[ClaimDevice] = []
        for result in (allocation.get("devices") or {}).get("results") or []:
            if result.get("driver") != self.driver:
                continue
            pool, name = str(result.get("pool", "")), str(result.get("device", ""))
            if pool != self.pool:
                raise ClaimError(
                    f"ResourceClaim {ref}: device {name} is allocated from pool {pool!r}, "
                    f"but this node's driver serves pool {self.pool!r}"
                )
            device = self._devices.get(name)
            if device is None:
                raise ClaimError(
                    f"ResourceClaim {ref}: device {name} is not published by node {self.node_name} "
                    "(it failed a health check or was repartitioned since the scheduler allocated it)"
                )
            request = str(result.get("request", "")).split("/", 1)[0]
            picked.append(ClaimDevice(request=request, device=device))
        spec = (
            cdi_spec(
                ref.uid,
                picked,
                mounts=self._mounts,
                control_nodes=self._control_nodes,
                gpu_nodes=self._gpu_nodes,
                device_nodes=self._device_nodes,
                common=self._common_edits,
            )
            if picked
            else None
        )
        seen: set[str] = set()
        prepared: list[PreparedDevice] = []
        for cd in picked:
            first = cd.request not in seen
            seen.add(cd.request)
            ids = cdi_ids(ref.uid, cd.request, cd.device.name, first_of_request=first)
            prepared.append(
                PreparedDevice(
                    request_names=(cd.request,), pool=self.pool, device=cd.device.name, cdi_ids=ids
                )
            )
        devices = tuple(prepared)
        if spec is not None:
            try:
                self._cdi.write(ref.uid, spec)
            except OSError as exc:
                self._forget_spec(ref)
                raise ClaimError(
                    f"ResourceClaim {ref}: cannot write its CDI spec in {self._cdi.directory}: "
                    f"{exc.strerror or exc}"
                ) from exc
        try:
            self._checkpoint.add(
                PreparedClaim(
                    uid=ref.uid, namespace=ref.namespace, name=ref.name, devices=devices, cdi_spec=spec
                )
            )
        except OSError as exc:  # the checkpoint is as it was: the claim is not prepared, kubelet asks again
            self._forget_spec(ref)
            raise ClaimError(
                f"ResourceClaim {ref}: not prepared, the checkpoint {self._checkpoint.path} cannot be "
                f"written: {exc.strerror or exc}"
            ) from exc
        log.info(
            "claim prepared",
            extra={"claim": str(ref), "uid": ref.uid, "devices": [d.device for d in devices]},
        )
        return devices

    def _forget_spec(self, ref: ClaimRef) -> None:
        """Remove the CDI spec of a claim that was not prepared after all (nothing half-prepared)."""
        try:
            self._cdi.remove(ref.uid)
        except OSError as exc:
            log.warning(
                "CDI spec of an unprepared claim left behind",
                extra={"claim": str(ref), "uid": ref.uid, "error": exc.strerror or str(exc)},
            )

    # -- unprepare -------------------------------------------------------------------------------

    def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        """The error per claim UID ("" = done); an unknown claim is done."""
        answers: dict[str, str] = {}
        with self._lock:
            for ref in refs:
                answers[ref.uid] = error = self._unprepare_one(ref)
                if error:
                    log.warning(
                        "claim not unprepared", extra={"claim": str(ref), "uid": ref.uid, "error": error}
                    )
        self._changed()
        return answers

    def _unprepare_one(self, ref: ClaimRef) -> str:
        try:
            self._cdi.remove(ref.uid)
        except OSError as exc:
            return (
                f"ResourceClaim {ref}: cannot remove its CDI spec from {self._cdi.directory}: "
                f"{exc.strerror or exc}"
            )
        try:
            if self._checkpoint.remove(ref.uid):
                log.info("claim unprepared", extra={"claim": str(ref), "uid": ref.uid})
        except OSError as exc:  # still recorded, on disk and in memory: kubelet asks again
            return (
                f"ResourceClaim {ref}: not unprepared, the checkpoint {self._checkpoint.path} cannot be "
                f"written: {exc.strerror or exc}"
            )
        return ""
