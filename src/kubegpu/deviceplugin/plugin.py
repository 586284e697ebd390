"""The resource manager behind one advertised resource: snapshots, preferred sets, Allocate answers.

This is where the device plugin's policy lives; the gRPC servicer in ``server.py`` only translates
protobuf to these calls and back. Health is read from the node-wide ``HealthTracker``, so a device is
Unhealthy whenever the physical GPU behind it is. ``preferred`` only ever returns IDs this plugin owns
from the caller's ``available`` list, always keeps the must-include IDs, and fails only when kubelet
names an ID the plugin never advertised: a policy that cannot answer falls back to a simple choice.
``allocate`` validates every ID (known, named once, healthy) before building anything. Every echo of
a client-supplied ID goes through ``kubegpu.echo.shorten``.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kubegpu.deviceplugin.config import AgentConfig
from kubegpu.deviceplugin.inventory import Device, Resource, ResourceKind
from kubegpu.deviceplugin.mps import MpsGate, share_limits
from kubegpu.deviceplugin.policies import ALLOCATION_POLICIES, REPLICA_POLICIES
from kubegpu.deviceplugin.response import ContainerAllocation, MountSpec, build_allocation
from kubegpu.echo import shorten
from kubegpu.errors import DeviceRequestError, DeviceRequestProblem, KubegpuError
from kubegpu.health.tracker import HealthTracker
from kubegpu.model.topology import Topology

if TYPE_CHECKING:
    from kubegpu.deviceplugin.shares import ShareBroker, ShareClaim

__all__ = ["MILLI_ENV", "DeviceStatus", "ResourcePlugin"]

log = logging.getLogger(__name__)

MILLI_ENV = "KUBEGPU_GPU_MILLI"  # a share's container learns its thousandths of the GPU

SHARED_REQUEST_LIMIT_MESSAGE = "maximum request size for shared resources is 1"


@dataclass(frozen=True, kw_only=True)
class DeviceStatus:
    """One device as ListAndWatch reports it."""

    id: str
    healthy: bool
    numa_node: int | None


class ResourcePlugin:
    """Policy for one resource; thread-safe (state is the immutable inventory plus the tracker)."""

    def __init__(
        self,
        *,
        resource: Resource,
        topology: Topology | None,
        config: AgentConfig,
        tracker: HealthTracker,
        annotation_id: Callable[[], str] = lambda: str(uuid.uuid4()),
        extra_mounts: tuple[MountSpec, ...] = (),
        shares: ShareBroker | None = None,
        mps: MpsGate | None = None,
        share_memory_mib: Mapping[int, int] | None = None,
    ) -> None:
        self.resource = resource
        self._mps = mps  # the MPS control daemons: a device is Unhealthy while its daemon is down
        self._share_memory_mib = share_memory_mib  # kubegpu.mps.shares: GPU memory for share limits
        self._shares = shares  # kubegpu.fractional: whose share an Allocate is, GPUs holding shares
        self._extra_mounts = extra_mounts  # simulated mode: the stand-in nvidia-smi
        self._topology = topology
        self._config = config
        self._tracker = tracker
        self._annotation_id = annotation_id
        self._allocation_policy = ALLOCATION_POLICIES[config.allocation_policy]
        self._replica_policy = REPLICA_POLICIES[config.replica_policy]

    # -- options and snapshots ----------------------------------------------------------------

    @property
    def pre_start_required(self) -> bool:
        return self._config.pre_start_check

    def wake(self) -> None:
        """Wake every ``watch`` so it notices it should stop."""
        self._tracker.wake()

    def _mps_down(self, gpu: int) -> str | None:
        """Why this resource's MPS control daemon cannot serve ``gpu`` now (None: it can, or no daemon)."""
        return self._mps.unavailable(str(self.resource.name), gpu) if self._mps is not None else None

    def _healthy(self, gpu: int) -> bool:
        return self._tracker.is_healthy(gpu) and self._mps_down(gpu) is None

    def _unhealthy_reason(self, gpu: int) -> str:
        if not self._tracker.is_healthy(gpu):
            return self._tracker.status(gpu).reason
        return self._mps_down(gpu) or ""

    def _versions(self) -> tuple[int, int]:
        return self._tracker.version, self._mps.version if self._mps is not None else 0

    def snapshot(self) -> tuple[DeviceStatus, ...]:
        return tuple(
            DeviceStatus(id=d.id, healthy=self._healthy(d.gpu), numa_node=d.numa_node)
            for d in self.resource.devices
        )

    def watch(
        self, is_active: Callable[[], bool], stopping: threading.Event, poll_s: float = 0.25
    ) -> Iterator[tuple[DeviceStatus, ...]]:
        """Yield the full snapshot now and again after every change, until inactive or stopping."""
        seen = self._versions()
        last = self.snapshot()
        yield last
        while is_active() and not stopping.is_set():
            self._tracker.wait_for_change(seen[0], poll_s)  # the MPS supervisor wakes it too
            version = self._versions()
            if version == seen or stopping.is_set():
                continue
            seen = version
            current = self.snapshot()
            if current != last:
                last = current
                yield current

    # -- GetPreferredAllocation ---------------------------------------------------------------

    def preferred(self, available: Sequence[str], must_include: Sequence[str], size: int) -> tuple[str, ...]:
        """The IDs to prefer among ``available`` (a subset of it), must-include IDs first.

        kubelet only offers IDs this plugin advertised, so an unknown ID in either list means kubelet
        and the plugin disagree about the devices (or the caller is not kubelet): it is refused with
        ``DeviceRequestProblem.UNKNOWN_DEVICE`` rather than dropped, and never returned.
        """
        for device_id in (*must_include, *available):
            if self.resource.device(device_id) is None:
                raise DeviceRequestError(DeviceRequestProblem.UNKNOWN_DEVICE, self._unknown(device_id))
        offered = list(dict.fromkeys(available))
        offered_set = set(offered)
        must = [i for i in dict.fromkeys(must_include) if i in offered_set]
        candidates: list[Device] = []
        for device_id in offered:
            device = self.resource.device(device_id)
            assert device is not None  # checked above
            if device_id in must or self._healthy(device.gpu):
                candidates.append(device)
        if size <= len(must):
            return tuple(must)
        if self.resource.kind is ResourceKind.MILLI:
            chosen = self._preferred_tokens(candidates, size, must)
        elif self.resource.sharing is not None:
            in_use: dict[int, int] = dict(self.resource.replicas_per_gpu)
            for d in candidates:
                in_use[d.gpu] -= 1
            chosen = self._replica_policy([(d.gpu, d.id) for d in candidates], size, must, in_use)
        elif self.resource.kind is ResourceKind.MIG:
            rest = sorted(
                (d for d in candidates if d.id not in must), key=lambda d: (d.gpu, d.mig_position or 0, d.id)
            )
            chosen = tuple(must) + tuple(d.id for d in rest[: size - len(must)])
        else:
            candidates = self._avoid_shared(candidates, size, must)
            by_gpu = {d.gpu: d.id for d in candidates}
            must_gpus = [d.gpu for d in candidates if d.id in must]
            picked = self._allocation_policy(self._topology, sorted(by_gpu), size, must_gpus)
            chosen = tuple(must) + tuple(by_gpu[g] for g in picked if by_gpu[g] not in must)
        result = [i for i in dict.fromkeys(chosen) if i in offered_set]
        return tuple(result[: max(size, len(must))])

    def _preferred_tokens(
        self, candidates: Sequence[Device], size: int, must: Sequence[str]
    ) -> tuple[str, ...]:
        """Shares: tokens of the GPU the pod being admitted will get (so PodResources names that GPU),
        then the others; the tokens themselves do not choose the GPU (``allocate`` does)."""
        gpu: int | None = None
        if self._shares is not None:
            try:
                claim = self._shares.peek(size)
            except KubegpuError as exc:
                log.warning("cannot guess whose share this is", extra={"error": str(exc)})
                claim = None
            gpu = claim.gpu if claim is not None else None
        rest = sorted(
            (d for d in candidates if d.id not in must), key=lambda d: (d.gpu != gpu, d.gpu, d.replica)
        )
        return tuple(must) + tuple(d.id for d in rest[: size - len(must)])

    def _avoid_shared(self, candidates: list[Device], size: int, must: Sequence[str]) -> list[Device]:
        """Whole GPUs: leave out GPUs holding shares when enough others are free (kubelet fills any
        shortfall itself, so a shared GPU is only ever given when nothing else is left)."""
        if self._shares is None:
            return candidates
        try:
            shared = self._shares.shared_gpus()
        except KubegpuError as exc:
            log.warning("cannot read which GPUs hold shares", extra={"error": str(exc)})
            return candidates
        free = [d for d in candidates if d.id in must or d.gpu not in shared]
        if len(free) >= size:
            return free
        log.warning(
            "whole GPUs: too few GPUs without shares free; kubelet may get a shared one",
            extra={"resource": str(self.resource.name), "size": size, "shared": sorted(shared)},
        )
        return candidates

    # -- Allocate -----------------------------------------------------------------------------

    def _unknown(self, device_id: str) -> str:
        return (
            f"{self.resource.name}: unknown device ID {shorten(device_id)}; this plugin advertises "
            f"{len(self.resource.devices)} devices (e.g. {self.resource.devices[0].id})"
        )

    def validate(self, device_ids: Sequence[str]) -> list[Device]:
        """The devices behind ``device_ids``; raises ``DeviceRequestError`` naming the first bad one.

        An empty list and an ID named twice are refused: kubelet never sends either, and silently
        de-duplicating would grant fewer devices than the container was admitted with.
        """
        if not device_ids:
            raise DeviceRequestError(
                DeviceRequestProblem.EMPTY, f"{self.resource.name}: the request names no devices"
            )
        devices: list[Device] = []
        seen: set[str] = set()
        for device_id in device_ids:
            device = self.resource.device(device_id)
            if device is None:
                raise DeviceRequestError(DeviceRequestProblem.UNKNOWN_DEVICE, self._unknown(device_id))
            if device_id in seen:
                raise DeviceRequestError(
                    DeviceRequestProblem.DUPLICATE_DEVICE,
                    f"{self.resource.name}: device ID {shorten(device_id)} is named twice in one request",
                )
            seen.add(device_id)
            devices.append(device)
        for device in devices:
            if not self._healthy(device.gpu):
                raise DeviceRequestError(
                    DeviceRequestProblem.UNHEALTHY,
                    f"{self.resource.name}: device {device.id} is unhealthy "
                    f"(GPU {device.gpu}: {self._unhealthy_reason(device.gpu)})",
                )
        if (
            self.resource.sharing is not None
            and self.resource.fail_requests_greater_than_one
            and len(devices) > 1
        ):
            raise DeviceRequestError(DeviceRequestProblem.TOO_MANY_SHARED, SHARED_REQUEST_LIMIT_MESSAGE)
        return devices

    def allocate(
        self, device_ids: Sequence[str], *, taken: list[ShareClaim] | None = None
    ) -> ContainerAllocation:
        devices = self.validate(device_ids)
        if self.resource.kind is ResourceKind.MILLI:
            return self._allocate_share(len(devices), taken)
        if self._shares is not None:  # the last line: no whole GPU where shares are handed out
            self._shares.check_whole(str(self.resource.name), sorted({d.gpu for d in devices}))
        return build_allocation(
            self.resource,
            devices,
            self._config,
            annotation_id=self._annotation_id,
            extra_mounts=self._extra_mounts,
        )

    def _allocate_share(self, milli: int, taken: list[ShareClaim] | None = None) -> ContainerAllocation:
        """The GPU the extender chose for the pod being admitted, with the env a whole GPU gets."""
        if self._shares is None:
            raise DeviceRequestError(
                DeviceRequestProblem.NO_SHARE,
                f"{self.resource.name}: this agent cannot tell whose share this is: it needs --node-name "
                "and API access (kubegpu.fractional)",
            )

        def check(claim: ShareClaim) -> str | None:
            if not any(d.gpu == claim.gpu for d in self.resource.devices):
                return "this agent does not share (MIG-enabled, or given to the DRA driver)"
            if not self._healthy(claim.gpu):
                return f"is unhealthy: {self._unhealthy_reason(claim.gpu)}"
            return None

        claim = self._shares.hand_out(milli, check=check)
        if taken is not None:
            taken.append(claim)
        device = next(d for d in self.resource.devices if d.gpu == claim.gpu)
        memory = self._share_memory_mib
        # kubegpu.mps.shares: the driver holds the share to its thousandths of threads and memory
        limits = share_limits(claim.milli, memory.get(claim.gpu, 0)) if memory is not None else None
        allocation = build_allocation(
            self.resource,
            [device],
            self._config,
            annotation_id=self._annotation_id,
            extra_mounts=self._extra_mounts,
            mps_limits=limits,
        )
        return replace(allocation, envs={**allocation.envs, MILLI_ENV: str(claim.milli)})

    def allocate_containers(self, requests: Sequence[Sequence[str]]) -> list[ContainerAllocation]:
        """One answer per container request; all are validated before any is built.

        No container requests is refused (``DeviceRequestProblem.EMPTY``): kubelet always sends exactly
        one, and an empty answer would only fail later, in kubelet, with a less helpful message.
        """
        if not requests:
            raise DeviceRequestError(
                DeviceRequestProblem.EMPTY,
                f"{self.resource.name}: the Allocate request has no container requests",
            )
        for device_ids in requests:
            self.validate(device_ids)
        taken: list[ShareClaim] = []
        try:
            return [self.allocate(device_ids, taken=taken) for device_ids in requests]
        except KubegpuError:
            if self._shares is not None:  # refused as a whole: no hand-out of it stays recorded
                for claim in reversed(taken):
                    self._shares.take_back(claim)
            raise

    def pre_start(self, device_ids: Sequence[str]) -> None:
        """With ``preStartCheck``: refuse to start a container on a device that turned unhealthy."""
        if self._config.pre_start_check:
            self.validate(device_ids)
