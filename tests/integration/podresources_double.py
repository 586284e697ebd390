"""A kubelet double for the PodResources API v1 (reference: podresources-protocol.md §6).

It serves ``v1.PodResourcesLister`` on a real unix socket, as kubelet does on
``<kubelet-root>/pod-resources/kubelet.sock``: ``List`` answers one entry per active pod with
restartable init containers (sidecars) first, then regular containers, and ordinary init containers
omitted; ``Get`` answers one pod or kubelet's not-found error; ``GetAllocatableResources`` the devices
set with ``allocatable``. Like kubelet it rate-limits (a token bucket, default 100/s with a burst of 10)
and answers ``RESOURCE_EXHAUSTED`` "rejected by rate limit" beyond it.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from kubegpu.podresources.api import v1_pb2 as pb
from kubegpu.podresources.api import v1_pb2_grpc as pb_grpc


@dataclass(frozen=True, kw_only=True)
class FakeContainer:
    name: str
    devices: dict[str, tuple[str, ...]] = field(default_factory=dict)  # resource -> device IDs
    kind: str = "regular"  # regular | sidecar | init


@dataclass(frozen=True, kw_only=True)
class FakePod:
    namespace: str
    name: str
    containers: tuple[FakeContainer, ...]


class _Bucket:
    def __init__(self, qps: float, burst: int) -> None:
        self._qps, self._burst = qps, burst
        self._tokens = float(burst)
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._at) * self._qps)
            self._at = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True


def _container(c: FakeContainer) -> pb.ContainerResources:
    return pb.ContainerResources(
        name=c.name,
        devices=[pb.ContainerDevices(resource_name=r, device_ids=list(ids)) for r, ids in c.devices.items()],
    )


def _pod(p: FakePod) -> pb.PodResources:
    ordered = [c for c in p.containers if c.kind == "sidecar"] + [
        c for c in p.containers if c.kind == "regular"
    ]
    return pb.PodResources(name=p.name, namespace=p.namespace, containers=[_container(c) for c in ordered])


class PodResourcesDouble(pb_grpc.PodResourcesListerServicer):
    """Serve on ``socket_path``; set ``pods`` (and ``allocatable``) at any time."""

    def __init__(self, socket_path: Path, *, qps: float = 100.0, burst: int = 10) -> None:
        self.socket_path = socket_path
        self.pods: list[FakePod] = []
        self.allocatable: dict[str, tuple[str, ...]] = {}
        self.calls = 0
        self._bucket = _Bucket(qps, burst)
        self._server: grpc.Server | None = None

    def start(self) -> PodResourcesDouble:
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_PodResourcesListerServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"unix://{self.socket_path}")
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None
        self.socket_path.unlink(missing_ok=True)

    def _admit(self, context: grpc.ServicerContext) -> None:
        self.calls += 1
        if not self._bucket.take():
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")

    def List(
        self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pb.ListPodResourcesResponse:
        self._admit(context)
        return pb.ListPodResourcesResponse(pod_resources=[_pod(p) for p in self.pods])

    def Get(
        self, request: pb.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> pb.GetPodResourcesResponse:
        self._admit(context)
        for p in self.pods:
            if (p.namespace, p.name) == (request.pod_namespace, request.pod_name):
                return pb.GetPodResourcesResponse(pod_resources=_pod(p))
        context.abort(
            grpc.StatusCode.UNKNOWN,
            f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
        )
        raise AssertionError("unreachable")

    def GetAllocatableResources(
        self, request: pb.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pb.AllocatableResourcesResponse:
        self._admit(context)
        return pb.AllocatableResourcesResponse(
            devices=[
                pb.ContainerDevices(resource_name=r, device_ids=list(ids))
                for r, ids in self.allocatable.items()
            ]
        )
