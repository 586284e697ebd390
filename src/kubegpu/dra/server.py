"""gRPC for the DRA driver: the DRAPlugin service (v1 and v1beta1) and kubelet plugin registration.

Two unix sockets, as kubelet expects (dra-protocol.md §2):

- the DRA service on ``<kubelet>/plugins/<driver>/dra.sock``, serving
  ``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` and ``…v1beta1.DRAPlugin`` (same answers);
- the registration service on ``<kubelet>/plugins_registry/<driver>-reg.sock``; kubelet's plugin
  watcher finds it (inotify), calls ``GetInfo`` (type ``DRAPlugin``, versions ``v1.DRAPlugin`` first)
  and then ``NotifyRegistrationStatus``.

The DRA socket serves before the registration socket appears, because kubelet connects right after
``GetInfo``. Stale sockets from an earlier run are removed before binding. ``stop()`` removes the
registration socket first (kubelet deregisters), then the service socket.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc

from kubegpu.deviceplugin.sockets import SUN_PATH_MAX, bound_with_mode, make_dirs
from kubegpu.dra.api import dra_v1_pb2 as v1
from kubegpu.dra.api import dra_v1_pb2_grpc as v1_grpc
from kubegpu.dra.api import dra_v1beta1_pb2 as v1beta1
from kubegpu.dra.api import dra_v1beta1_pb2_grpc as v1beta1_grpc
from kubegpu.dra.api import health_v1_pb2 as health_v1
from kubegpu.dra.api import health_v1_pb2_grpc as health_v1_grpc
from kubegpu.dra.api import health_v1alpha1_pb2 as health_v1alpha1
from kubegpu.dra.api import health_v1alpha1_pb2_grpc as health_v1alpha1_grpc
from kubegpu.dra.api import registration_v1_pb2 as reg
from kubegpu.dra.api import registration_v1_pb2_grpc as reg_grpc
from kubegpu.dra.driver import ClaimRef, DraDriver
from kubegpu.errors import InputError, RegistrationFailed

__all__ = [
    "HEALTH_VERSIONS",
    "PLUGIN_TYPE",
    "SUPPORTED_VERSIONS",
    "DeviceHealth",
    "DraServer",
    "HealthFeed",
    "RegistrationState",
]

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")  # kubelet takes the first it supports
HEALTH_VERSIONS = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")  # 1.37 prefers v1
HEALTH_TIMEOUT_S = 60  # kubelet marks a device Unknown when not refreshed for this long
HEALTH_REFRESH_S = 20.0  # the full list is re-sent at least this often
MESSAGE_MAX = 1024
_WORKERS = 8


@dataclass(frozen=True, kw_only=True)
class DeviceHealth:
    device: str
    healthy: bool
    message: str = ""


class HealthFeed(Protocol):
    """The pool's device health: a version that changes with it, a wait for the next change, and a
    way to end every wait at once (on shutdown)."""

    def health(self) -> tuple[int, Sequence[DeviceHealth]]: ...

    def wait_for_change(self, seen: int, timeout: float) -> int: ...

    def wake(self) -> None: ...


def _refs(claims: Any) -> list[ClaimRef]:
    return [ClaimRef(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]


class _DraServicer:
    """Serves one API version; ``pb`` is its generated message module."""

    def __init__(self, driver: DraDriver, pb: Any) -> None:
        self._driver = driver
        self._pb = pb

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        answers = self._driver.prepare(_refs(request.claims))
        response = self._pb.NodePrepareResourcesResponse()
        for uid, answer in answers.items():
            entry = response.claims[uid]
            if answer.error:
                entry.error = answer.error
                continue
            for d in answer.devices:
                entry.devices.add(
                    request_names=list(d.request_names),
                    pool_name=d.pool,
                    device_name=d.device,
                    cdi_device_ids=list(d.cdi_ids),
                )
        return response

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        answers = self._driver.unprepare(_refs(request.claims))
        response = self._pb.NodeUnprepareResourcesResponse()
        for uid, error in answers.items():
            response.claims[uid].error = error
        return response


class _HealthServicer:
    """NodeWatchResources: the whole device list now, again on every change and every refresh period,
    until kubelet closes the stream or the server stops."""

    def __init__(self, feed: HealthFeed, pool: str, pb: Any, stopping: threading.Event) -> None:
        self._feed = feed
        self._pool = pool
        self._pb = pb
        self._stopping = stopping

    def _response(self, devices: Sequence[DeviceHealth]) -> Any:
        now = int(time.time())
        pb = self._pb
        response = pb.NodeWatchResourcesResponse()
        for d in devices:
            response.devices.add(
                device=pb.DeviceIdentifier(pool_name=self._pool, device_name=d.device),
                health=pb.HEALTHY if d.healthy else pb.UNHEALTHY,
                last_updated_time=now,
                health_check_timeout_seconds=HEALTH_TIMEOUT_S,
                message=d.message[:MESSAGE_MAX],
            )
        return response

    def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        version, devices = self._feed.health()
        yield self._response(devices)
        while context.is_active() and not self._stopping.is_set():
            changed = self._feed.wait_for_change(version, HEALTH_REFRESH_S)
            if self._stopping.is_set() or not context.is_active():
                return
            version, devices = self._feed.health() if changed != version else (version, devices)
            yield self._response(devices)


class RegistrationState:
    """What kubelet last said about the registration (for readiness and logs)."""

    def __init__(self) -> None:
        self.registered = threading.Event()
        self.error: str = ""
        self.notifications = 0


class _RegistrationServicer(reg_grpc.RegistrationServicer):
    def __init__(
        self, *, driver_name: str, endpoint: Path, state: RegistrationState, health: bool = False
    ) -> None:
        versions = [*SUPPORTED_VERSIONS, *(HEALTH_VERSIONS if health else ())]
        self._info = reg.PluginInfo(
            type=PLUGIN_TYPE, name=driver_name, endpoint=str(endpoint), supported_versions=versions
        )
        self._state = state

    def GetInfo(self, request: reg.InfoRequest, context: grpc.ServicerContext) -> reg.PluginInfo:
        return self._info

    def NotifyRegistrationStatus(
        self, request: reg.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg.RegistrationStatusResponse:
        self._state.notifications += 1
        if request.plugin_registered:
            self._state.error = ""
            self._state.registered.set()
            log.info("registered with kubelet", extra={"driver": self._info.name})
            return reg.RegistrationStatusResponse()
        self._state.error = request.error
        self._state.registered.clear()
        log.error(
            "kubelet refused the registration", extra={"driver": self._info.name, "error": request.error}
        )
        context.abort(grpc.StatusCode.UNKNOWN, f"registration failed: {request.error}")
        raise AssertionError("unreachable")  # abort raises


def _bind(server: grpc.Server, path: Path) -> None:
    length = len(str(path).encode())
    if length > SUN_PATH_MAX:
        raise InputError(
            f"--kubelet-dir: the socket path {path} is {length} bytes, but a unix socket path holds at most "
            f"{SUN_PATH_MAX}; use a shorter kubelet directory"
        )
    make_dirs(path.parent)
    path.unlink(missing_ok=True)  # a stale socket of an earlier run
    with bound_with_mode(path):
        if server.add_insecure_port(f"unix://{path}") == 0:
            raise RegistrationFailed(f"cannot listen on {path}")


class DraServer:
    """Both sockets of one driver; ``start()`` then ``stop()``, once."""

    def __init__(
        self,
        driver: DraDriver,
        *,
        plugin_dir: Path,
        registry_dir: Path,
        driver_name: str,
        health: HealthFeed | None = None,
    ) -> None:
        self.driver = driver
        self.socket = (plugin_dir / "dra.sock").absolute()
        self.registration_socket = (registry_dir / f"{driver_name}-reg.sock").absolute()
        self.state = RegistrationState()
        self._driver_name = driver_name
        self._health = health
        self._stopping = threading.Event()
        self._service: grpc.Server | None = None
        self._registration: grpc.Server | None = None

    def start(self) -> None:
        service = grpc.server(futures.ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="dra"))
        v1_grpc.add_DRAPluginServicer_to_server(_DraServicer(self.driver, v1), service)  # type: ignore[no-untyped-call]
        v1beta1_grpc.add_DRAPluginServicer_to_server(_DraServicer(self.driver, v1beta1), service)  # type: ignore[no-untyped-call]
        self._stopping.clear()
        if self._health is not None:
            for pb, grpc_module in ((health_v1, health_v1_grpc), (health_v1alpha1, health_v1alpha1_grpc)):
                servicer = _HealthServicer(self._health, self.driver.pool, pb, self._stopping)
                grpc_module.add_DRAResourceHealthServicer_to_server(servicer, service)
        _bind(service, self.socket)
        service.start()
        self._service = service
        registration = grpc.server(futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="dra-reg"))
        reg_grpc.add_RegistrationServicer_to_server(  # type: ignore[no-untyped-call]
            _RegistrationServicer(
                driver_name=self._driver_name,
                endpoint=self.socket,
                state=self.state,
                health=self._health is not None,
            ),
            registration,
        )
        try:
            _bind(registration, self.registration_socket)
        except BaseException:
            service.stop(grace=0)
            self.socket.unlink(missing_ok=True)
            raise
        registration.start()
        self._registration = registration
        log.info(
            "DRA driver serving",
            extra={"socket": str(self.socket), "registration": str(self.registration_socket)},
        )

    def stop(self, grace_s: float = 1.0) -> None:
        self._stopping.set()
        if self._health is not None:
            # kubelet keeps a health stream open; its handler waits up to HEALTH_REFRESH_S for a
            # change, and the process cannot exit before that thread ends
            self._health.wake()
        if self._registration is not None:
            self.registration_socket.unlink(missing_ok=True)
            self._registration.stop(grace=0).wait(grace_s)
            self._registration = None
        if self._service is not None:
            self._service.stop(grace=grace_s).wait(grace_s + 1)
            self.socket.unlink(missing_ok=True)
            self._service = None
