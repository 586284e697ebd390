"""A client of kubelet's PodResources API v1 (``List``): who holds which device on this node.

kubelet serves it on ``<kubelet-root>/pod-resources/kubelet.sock`` without TLS, rate-limited to
100 requests/s with a burst of 10 (``RESOURCE_EXHAUSTED`` beyond). The metrics exporter and the node
quarantine ask at most a few times a second, through one channel kept open between calls; a failed
call raises ``PodResourcesUnavailable`` naming the socket and what went wrong, and the next call
dials again. Containers without devices, and resources other than the ones asked for, are left out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import grpc

from kubegpu.echo import clip
from kubegpu.errors import PodResourcesUnavailable
from kubegpu.model.holder import DeviceHolder
from kubegpu.podresources.api import v1_pb2 as pb
from kubegpu.podresources.api import v1_pb2_grpc as pb_grpc

__all__ = ["DEFAULT_POD_RESOURCES_SOCKET", "PodResourcesClient"]

DEFAULT_POD_RESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # kubelet's own limit on this API's messages


class PodResourcesClient:
    """Thread-safe; ``wanted(resource_name)`` picks the resources to report (default: every one)."""

    def __init__(
        self,
        socket_path: Path = DEFAULT_POD_RESOURCES_SOCKET,
        *,
        timeout_s: float = 2.0,
        wanted: Callable[[str], bool] = lambda _name: True,
    ) -> None:
        self.socket_path = socket_path.absolute()
        self._timeout_s = timeout_s
        self._wanted = wanted
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None

    def _stub(self) -> pb_grpc.PodResourcesListerStub:
        if self._channel is None:
            self._channel = grpc.insecure_channel(
                f"unix://{self.socket_path}",
                options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
            )
        return pb_grpc.PodResourcesListerStub(self._channel)  # type: ignore[no-untyped-call]

    def holders(self) -> list[DeviceHolder]:
        """Every container on the node holding devices of a wanted resource, in kubelet's order."""
        with self._lock:
            if not self.socket_path.exists():
                raise PodResourcesUnavailable(
                    f"kubelet's PodResources socket {self.socket_path} does not exist "
                    "(is the kubelet running, and is /var/lib/kubelet/pod-resources mounted?)"
                )
            try:
                reply = self._stub().List(pb.ListPodResourcesRequest(), timeout=self._timeout_s)
            except grpc.RpcError as exc:
                self._close_locked()
                code = exc.code() if isinstance(exc, grpc.Call) else None
                detail = exc.details() if isinstance(exc, grpc.Call) else str(exc)
                name = code.name if code is not None else "ERROR"
                why = clip(detail or "", limit=200)
                raise PodResourcesUnavailable(
                    f"PodResources List on {self.socket_path} failed: {name}: {why}"
                ) from exc
        return [
            DeviceHolder(
                namespace=p.namespace,
                pod=p.name,
                container=c.name,
                resource=d.resource_name,
                device_ids=tuple(d.device_ids),
            )
            for p in reply.pod_resources
            for c in p.containers
            for d in c.devices
            if d.device_ids and self._wanted(d.resource_name)
        ]

    def _close_locked(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def close(self) -> None:
        with self._lock:
            self._close_locked()
