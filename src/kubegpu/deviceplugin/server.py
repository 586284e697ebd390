"""gRPC plumbing: one DevicePlugin server per resource on a unix socket, and kubelet registration.

The servicer is a translator only: protobuf in, a ``ResourcePlugin`` call, protobuf out; refusals
become gRPC errors with the plugin's message (unknown ID -> INVALID_ARGUMENT, unhealthy device ->
FAILED_PRECONDITION), never silently skipped, and a bug becomes INTERNAL with its cause logged. Each
server start uses a fresh socket name, as the protocol reference recommends after a kubelet restart
unlinks the old one. ListAndWatch streams have their own worker budget, so unary calls never starve.
Registration carries a deadline, can be cancelled, and says whether kubelet was unreachable or refused.
"""

from __future__ import annotations

import itertools
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import TypeVar

import grpc

from kubegpu.deviceplugin.api import v1beta1_pb2 as pb
from kubegpu.deviceplugin.api import v1beta1_pb2_grpc as pb_grpc
from kubegpu.deviceplugin.plugin import DeviceStatus, ResourcePlugin
from kubegpu.deviceplugin.response import ContainerAllocation
from kubegpu.deviceplugin.sockets import bound_with_mode, socket_name, socket_room, too_long
from kubegpu.errors import DeviceRequestError, DeviceRequestProblem, RegistrationFailed, SourceError

__all__ = [
    "API_VERSION",
    "DEFAULT_MAX_STREAMS",
    "DEFAULT_UNARY_WORKERS",
    "REGISTER_TIMEOUT_S",
    "DevicePluginServicer",
    "PluginServer",
    "RpcObserver",
    "register",
    "to_proto_allocation",
]

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

_CODES = {
    DeviceRequestProblem.EMPTY: grpc.StatusCode.INVALID_ARGUMENT,
    DeviceRequestProblem.UNKNOWN_DEVICE: grpc.StatusCode.INVALID_ARGUMENT,
    DeviceRequestProblem.DUPLICATE_DEVICE: grpc.StatusCode.INVALID_ARGUMENT,
    DeviceRequestProblem.TOO_MANY_SHARED: grpc.StatusCode.INVALID_ARGUMENT,
    DeviceRequestProblem.UNHEALTHY: grpc.StatusCode.FAILED_PRECONDITION,
    DeviceRequestProblem.NO_SHARE: grpc.StatusCode.FAILED_PRECONDITION,
}
_socket_counter = itertools.count()
DEFAULT_MAX_STREAMS = 64  # kubelet opens one per registration; the rest is for tools and stale streams
DEFAULT_UNARY_WORKERS = 16  # workers no stream can take: Allocate & co. never wait behind streams
REGISTER_TIMEOUT_S = 5.0  # kubelet's Register dials our (already serving) socket and asks for options
_MAX_CAUSE = 300  # characters of an unexpected exception's text that go into the gRPC status
_T = TypeVar("_T")

# Told of every unary RPC once it is answered: (rpc, resource, seconds, ok). The agent's metrics use it;
# an observer that raises is logged and otherwise ignored.
RpcObserver = Callable[[str, str, float, bool], None]


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
    """Translates the five DevicePlugin RPCs to the server's current ``ResourcePlugin``.

    Every handler is guarded: a refusal (``DeviceRequestError``) becomes its status code and message;
    any other exception is a bug and becomes ``INTERNAL`` with a one-line cause, logged once as JSON
    (the traceback goes to a debug line), never gRPC's generic ``UNKNOWN``. At most ``max_streams``
    ListAndWatch streams are served at once, so they can never take the workers unary calls need.
    """

    def __init__(
        self,
        plugin: Callable[[], ResourcePlugin],
        stopping: threading.Event,
        *,
        max_streams: int,
        observer: RpcObserver | None = None,
    ) -> None:
        self._plugin = plugin
        self._observer = observer
        self._stopping = stopping
        self._max_streams = max_streams
        self._streams = threading.BoundedSemaphore(max_streams)

    def _fail(self, rpc: str, plugin: ResourcePlugin, exc: Exception) -> tuple[grpc.StatusCode, str]:
        """The status for an exception a handler raised, logged once."""
        resource = str(plugin.resource.name)
        if isinstance(exc, DeviceRequestError):
            log.warning("request refused", extra={"rpc": rpc, "resource": resource, "error": str(exc)})
            return _CODES[exc.problem], str(exc)
        cause = f"{type(exc).__name__}: {exc}"
        if len(cause) > _MAX_CAUSE:
            cause = cause[: _MAX_CAUSE - 1] + "…"
        log.error("RPC failed unexpectedly", extra={"rpc": rpc, "resource": resource, "error": cause})
        log.debug("traceback of the failed RPC", extra={"rpc": rpc, "resource": resource}, exc_info=exc)
        return grpc.StatusCode.INTERNAL, f"{rpc} failed inside kubegpu ({cause}); see the agent log"

    def _unary(self, rpc: str, context: grpc.ServicerContext, answer: Callable[[ResourcePlugin], _T]) -> _T:
        plugin = self._plugin()
        started = time.perf_counter()
        try:
            reply = answer(plugin)
        except Exception as exc:
            self._observe(rpc, plugin, started, ok=False)
            code, message = self._fail(rpc, plugin, exc)
        else:
            self._observe(rpc, plugin, started, ok=True)
            return reply
        context.abort(code, message)
        raise AssertionError("unreachable: context.abort raises")

    def _observe(self, rpc: str, plugin: ResourcePlugin, started: float, *, ok: bool) -> None:
        if self._observer is None:
            return
        try:
            self._observer(rpc, str(plugin.resource.name), time.perf_counter() - started, ok)
        except Exception as exc:
            log.warning("RPC observer failed", extra={"rpc": rpc, "error": f"{type(exc).__name__}: {exc}"})

    def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> pb.DevicePluginOptions:
        return self._unary("GetDevicePluginOptions", context, _options)

    def ListAndWatch(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> Iterator[pb.ListAndWatchResponse]:
        plugin = self._plugin()
        if not self._streams.acquire(blocking=False):
            log.warning(
                "ListAndWatch refused: too many streams",
                extra={"resource": str(plugin.resource.name), "max_streams": self._max_streams},
            )
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{plugin.resource.name}: {self._max_streams} ListAndWatch streams are open on this "
                "socket already; close one (kubelet needs only one)",
            )
            return
        try:
            failure: tuple[grpc.StatusCode, str] | None = None
            try:
                for snapshot in plugin.watch(context.is_active, self._stopping):
                    yield pb.ListAndWatchResponse(devices=[_device(s) for s in snapshot])
            except Exception as exc:
                failure = self._fail("ListAndWatch", plugin, exc)
            if failure is not None:
                context.abort(*failure)
        finally:
            self._streams.release()

    def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        def answer(plugin: ResourcePlugin) -> pb.PreferredAllocationResponse:
            response = pb.PreferredAllocationResponse()
            for req in request.container_requests:
                ids = plugin.preferred(
                    list(req.available_deviceIDs), list(req.must_include_deviceIDs), req.allocation_size
                )
                response.container_responses.add(deviceIDs=ids)
            return response

        return self._unary("GetPreferredAllocation", context, answer)

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse:
        def answer(plugin: ResourcePlugin) -> pb.AllocateResponse:
            allocations = plugin.allocate_containers(
                [list(r.devices_ids) for r in request.container_requests]
            )
            return pb.AllocateResponse(container_responses=[to_proto_allocation(a) for a in allocations])

        return self._unary("Allocate", context, answer)

    def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> pb.PreStartContainerResponse:
        def answer(plugin: ResourcePlugin) -> pb.PreStartContainerResponse:
            plugin.pre_start(list(request.devices_ids))
            return pb.PreStartContainerResponse()

        return self._unary("PreStartContainer", context, answer)


def _options(plugin: ResourcePlugin) -> pb.DevicePluginOptions:
    return pb.DevicePluginOptions(
        pre_start_required=plugin.pre_start_required, get_preferred_allocation_available=True
    )


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


class PluginServer:
    """One gRPC server for one resource, on ``<plugin dir>/kubegpu-<name>-<hash>-<pid>-<n>.sock`` (0600).

    Worker threads: ``max_streams`` for ListAndWatch streams (each holds one while it is open; more
    streams are refused with RESOURCE_EXHAUSTED) plus ``unary_workers`` that only unary calls can
    use, so Allocate and GetDevicePluginOptions never wait behind streams. Threads are created on
    demand, so the budget costs nothing until it is used.

    ``plugin`` may be replaced while serving (a reload that changed no device): calls that start
    afterwards see the new one; open streams keep the devices they watch, which are the same.
    """

    def __init__(
        self,
        plugin: ResourcePlugin,
        plugin_dir: Path,
        *,
        max_streams: int = DEFAULT_MAX_STREAMS,
        unary_workers: int = DEFAULT_UNARY_WORKERS,
        observer: RpcObserver | None = None,
    ) -> None:
        self.plugin = plugin
        self._observer = observer
        self._dir = plugin_dir
        self._max_streams = max_streams
        self._unary_workers = unary_workers
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
        directory = self._dir.absolute()
        problem = too_long(directory)
        if problem is not None:
            raise SourceError(problem)
        name = socket_name(
            self.plugin.resource.name,
            pid=os.getpid(),
            serial=next(_socket_counter),
            room=socket_room(directory),
        )
        path = directory / name
        cannot = (
            f"cannot listen on {path} (gRPC says why above); check that {directory} is a writable directory"
        )
        try:
            if path.exists() or path.is_symlink():
                path.unlink()
        except OSError as exc:
            raise SourceError(f"{cannot} ({exc.strerror or exc})") from exc
        server = grpc.server(
            futures.ThreadPoolExecutor(
                max_workers=self._max_streams + self._unary_workers, thread_name_prefix="deviceplugin"
            )
        )
        servicer = DevicePluginServicer(
            lambda: self.plugin, self._stopping, max_streams=self._max_streams, observer=self._observer
        )
        pb_grpc.add_DevicePluginServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
        try:
            with bound_with_mode(path):
                port = server.add_insecure_port(f"unix://{path}")
        except RuntimeError as exc:  # newer grpcio raises instead of returning 0
            raise SourceError(cannot) from exc
        if port == 0:
            raise SourceError(cannot)
        server.start()
        self._server = server
        self.socket_path = path
        with grpc.insecure_channel(f"unix://{path}") as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=5)
            except grpc.FutureTimeoutError as exc:
                self.stop(grace_s=0)
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
        """Wait (at most ``grace_s`` + 1 s) and remove the socket; one that cannot be removed is logged."""
        if stopped is not None:
            stopped.wait(grace_s + 1.0)
        if self.socket_path is None:
            return
        extra = {"resource": self.plugin.resource.name, "socket": str(self.socket_path)}
        try:
            self.socket_path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not remove the socket", extra={**extra, "error": exc.strerror or str(exc)})
        log.info("stopped", extra=extra)


def register(
    kubelet_socket: Path,
    server: PluginServer,
    *,
    timeout_s: float = REGISTER_TIMEOUT_S,
    cancel: threading.Event | None = None,
) -> None:
    """Register ``server`` with kubelet (synchronous: kubelet calls back GetDevicePluginOptions).

    The call carries a ``timeout_s`` deadline and is abandoned as soon as ``cancel`` is set, so a
    kubelet that hangs can never hold up the agent's shutdown.
    """
    path = kubelet_socket.absolute()  # grpc's unix:// needs an absolute path
    resource = server.plugin.resource.name
    if not _is_socket(path):
        raise RegistrationFailed(f"kubelet not reachable at {path}: no socket there")
    request = pb.RegisterRequest(
        version=API_VERSION, endpoint=server.endpoint, resource_name=resource, options=_options(server.plugin)
    )
    started = time.monotonic()
    with grpc.insecure_channel(f"unix://{path}") as channel:
        call = pb_grpc.RegistrationStub(channel).Register.future(  # type: ignore[no-untyped-call]
            request, timeout=timeout_s
        )
        while not call.done():
            if cancel is not None and cancel.wait(0.05):
                call.cancel()
                raise RegistrationFailed(f"registration of {resource} abandoned: the agent is stopping")
            if cancel is None:
                call.exception()  # waits for the call to end
        try:
            call.result()
        except grpc.RpcError as exc:
            code, details = exc.code(), exc.details()
            if code == grpc.StatusCode.UNAVAILABLE:
                raise RegistrationFailed(f"kubelet not reachable at {path}: {details}") from exc
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise RegistrationFailed(
                    f"kubelet did not answer the registration of {resource} within {timeout_s:g} s ({path})"
                ) from exc
            raise RegistrationFailed(f"kubelet refused registration of {resource}: {details}") from exc
    log.info(
        "registered",
        extra={
            "resource": request.resource_name,
            "endpoint": request.endpoint,
            "ms": round((time.monotonic() - started) * 1000, 1),
        },
    )
