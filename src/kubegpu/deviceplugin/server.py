"""gRPC plumbing: one DevicePlugin server per resource on a unix socket, and kubelet registration.

The servicer is a translator only: protobuf in, a ``ResourcePlugin`` call, protobuf out; refusals
become gRPC errors with the plugin's message (unknown ID -> INVALID_ARGUMENT, unhealthy device ->
FAILED_PRECONDITION), never silently skipped. Each server start uses a fresh socket name, as the
protocol reference recommends after a kubelet restart unlinks the old one.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import stat
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from kubegpu.deviceplugin.api import v1beta1_pb2 as pb
from kubegpu.deviceplugin.api import v1beta1_pb2_grpc as pb_grpc
from kubegpu.deviceplugin.plugin import DeviceRequestError, DeviceStatus, Problem, ResourcePlugin
from kubegpu.deviceplugin.response import ContainerAllocation
from kubegpu.deviceplugin.sockets import bound_with_mode, socket_name, socket_room, too_long
from kubegpu.errors import SourceError

__all__ = [
    "API_VERSION",
    "DevicePluginServicer",
    "PluginServer",
    "RegistrationFailed",
    "register",
    "to_proto_allocation",
]

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

_CODES = {
    Problem.EMPTY: grpc.StatusCode.INVALID_ARGUMENT,
    Problem.UNKNOWN_DEVICE: grpc.StatusCode.INVALID_ARGUMENT,
    Problem.DUPLICATE_DEVICE: grpc.StatusCode.INVALID_ARGUMENT,
    Problem.TOO_MANY_SHARED: grpc.StatusCode.INVALID_ARGUMENT,
    Problem.UNHEALTHY: grpc.StatusCode.FAILED_PRECONDITION,
}
_socket_counter = itertools.count()


def _device(status: DeviceStatus) -> pb.Device:
    device = pb.Device(ID=status.id, health=HEALTHY if status.healthy else UNHEALTHY)
    if status.numa_node is not None:
        device.topology.nodes.add(ID=status.numa_node)
    return device


def to_proto_allocation(allocation: ContainerAllocation) -> pb.ContainerAllocateResponse:
    response = pb.ContainerAllocateResponse(envs=allocation.envs, annotations=allocation.annotations)
    for m in allocation.mounts:
        response.mounts.add(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
    for d in allocation.devices:
        response.devices.add(
            container_path=d.container_path, host_path=d.host_path, permissions=d.permissions
        )
    for name in allocation.cdi_devices:
        response.cdi_devices.add(name=name)
    return response


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    """Translates the five DevicePlugin RPCs to one ``ResourcePlugin``."""

    def __init__(self, plugin: ResourcePlugin, stopping: threading.Event) -> None:
        self._plugin = plugin
        self._stopping = stopping

    def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return pb.DevicePluginOptions(
            pre_start_required=self._plugin.pre_start_required, get_preferred_allocation_available=True
        )

    def ListAndWatch(self, request: Any, context: Any) -> Any:
        for snapshot in self._plugin.watch(context.is_active, self._stopping):
            yield pb.ListAndWatchResponse(devices=[_device(s) for s in snapshot])

    def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        response = pb.PreferredAllocationResponse()
        try:
            for req in request.container_requests:
                ids = self._plugin.preferred(
                    list(req.available_deviceIDs), list(req.must_include_deviceIDs), req.allocation_size
                )
                response.container_responses.add(deviceIDs=ids)
        except DeviceRequestError as exc:
            log.warning(
                "preferred allocation refused",
                extra={"resource": self._plugin.resource.name, "error": str(exc)},
            )
            context.abort(_CODES[exc.problem], str(exc))
        return response

    def Allocate(self, request: Any, context: Any) -> Any:
        try:
            allocations = self._plugin.allocate_containers(
                [list(r.devices_ids) for r in request.container_requests]
            )
        except DeviceRequestError as exc:
            log.warning("allocate refused", extra={"resource": self._plugin.resource.name, "error": str(exc)})
            context.abort(_CODES[exc.problem], str(exc))
        return pb.AllocateResponse(container_responses=[to_proto_allocation(a) for a in allocations])

    def PreStartContainer(self, request: Any, context: Any) -> Any:
        try:
            self._plugin.pre_start(list(request.devices_ids))
        except DeviceRequestError as exc:
            context.abort(_CODES[exc.problem], str(exc))
        return pb.PreStartContainerResponse()


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


class PluginServer:
    """One gRPC server for one resource, on ``<plugin dir>/kubegpu-<name>-<hash>-<pid>-<n>.sock`` (0600)."""

    def __init__(self, plugin: ResourcePlugin, plugin_dir: Path, *, max_workers: int = 32) -> None:
        self.plugin = plugin
        self._dir = plugin_dir
        self._max_workers = max_workers
        self._server: grpc.Server | None = None
        self._stopping = threading.Event()
        self.socket_path: Path | None = None

    @property
    def endpoint(self) -> str:
        """The socket file name kubelet dials, relative to the plugin directory."""
        assert self.socket_path is not None
        return self.socket_path.name

    def start(self) -> None:
        """Serve on a fresh socket and check it answers before anyone is told about it."""
        self._stopping = threading.Event()
        problem = too_long(self._dir)
        if problem is not None:
            raise SourceError(problem)
        name = socket_name(
            self.plugin.resource.name,
            pid=os.getpid(),
            serial=next(_socket_counter),
            room=socket_room(self._dir),
        )
        path = self._dir / name
        if path.exists() or path.is_symlink():
            path.unlink()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self._max_workers))
        pb_grpc.add_DevicePluginServicer_to_server(  # type: ignore[no-untyped-call]
            DevicePluginServicer(self.plugin, self._stopping), server
        )
        cannot = (
            f"cannot listen on {path} (gRPC says why above); check that {self._dir} is a writable directory"
        )
        try:
            with bound_with_mode(path):
                port = server.add_insecure_port(f"unix://{path.absolute()}")
        except RuntimeError as exc:  # newer grpcio raises instead of returning 0
            raise SourceError(cannot) from exc
        if port == 0:
            raise SourceError(cannot)
        server.start()
        self._server = server
        self.socket_path = path
        with grpc.insecure_channel(f"unix://{path.absolute()}") as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=5)
            except grpc.FutureTimeoutError as exc:
                self.stop()
                raise SourceError(f"the device plugin server on {path} does not answer") from exc
        log.info("serving", extra={"resource": self.plugin.resource.name, "socket": str(path)})

    @property
    def serving(self) -> bool:
        return self._server is not None

    def socket_alive(self) -> bool:
        return self.socket_path is not None and _is_socket(self.socket_path)

    def stop(self, grace_s: float = 0.5) -> None:
        """End every ListAndWatch stream, stop serving and remove the socket."""
        self.finish_stop(self.begin_stop(grace_s), grace_s)

    def begin_stop(self, grace_s: float = 0.5) -> threading.Event | None:
        """Start stopping (streams end, no new calls); ``finish_stop`` waits and removes the socket."""
        self._stopping.set()
        self.plugin.wake()
        server, self._server = self._server, None
        return server.stop(grace_s) if server is not None else None

    def finish_stop(self, stopped: threading.Event | None, grace_s: float = 0.5) -> None:
        if stopped is not None:
            stopped.wait(grace_s + 1.0)
        if self.socket_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
            log.info(
                "stopped", extra={"resource": self.plugin.resource.name, "socket": str(self.socket_path)}
            )


class RegistrationFailed(Exception):
    """kubelet was absent or refused the registration; the message says which."""


def register(kubelet_socket: Path, server: PluginServer, *, timeout_s: float = 15.0) -> None:
    """Register ``server`` with kubelet (synchronous: kubelet calls back GetDevicePluginOptions)."""
    if not _is_socket(kubelet_socket):
        raise RegistrationFailed(f"no kubelet socket at {kubelet_socket}")
    options = pb.DevicePluginOptions(
        pre_start_required=server.plugin.pre_start_required, get_preferred_allocation_available=True
    )
    request = pb.RegisterRequest(
        version=API_VERSION,
        endpoint=server.endpoint,
        resource_name=server.plugin.resource.name,
        options=options,
    )
    started = time.monotonic()
    with grpc.insecure_channel(f"unix://{kubelet_socket}") as channel:
        try:
            pb_grpc.RegistrationStub(channel).Register(  # type: ignore[no-untyped-call]
                request, timeout=timeout_s
            )
        except grpc.RpcError as exc:
            raise RegistrationFailed(f"kubelet refused {request.resource_name}: {exc.details()}") from exc
    log.info(
        "registered",
        extra={
            "resource": request.resource_name,
            "endpoint": request.endpoint,
            "ms": round((time.monotonic() - started) * 1000, 1),
        },
    )
