"""A faithful kubelet double for the Device Plugin API v1beta1 (reference: deviceplugin-protocol.md §16).

It does what kubelet's device manager does, over real gRPC on real unix sockets, so tests can drive
kubegpu's agent exactly as a node would:

* start: create the plugin dir, delete *sockets only*, load the checkpoint into stopped endpoints,
  serve ``Registration`` on ``kubelet.sock``;
* Register: check version and resource name, dial the plugin (10 s), call GetDevicePluginOptions
  *before* replying, keep those options, start a ListAndWatch reader; errors are UNKNOWN with
  kubelet's texts;
* snapshots: full replacement; Healthy only if ``health == "Healthy"``; capacity/allocatable;
* stream end: every device unhealthy, stop time recorded, no retry; after the grace period 0/0;
* ``admit_pod``: init containers then app containers, one resource at a time, reuse of devices from
  finished init containers, GetPreferredAllocation with the *full* request size, intersect-and-fill,
  Allocate with ``container_responses[0]``, kubelet's error strings, rollback on error;
* ``start_container``: PreStartContainer when required, merged runtime config;
* ``restart``/``stop``: break streams, delete sockets, a new ``kubelet.sock`` inode, reload checkpoint;
* a checkpoint file, and a log of every call so tests can assert ordering.

Like kubelet, the double holds its device-manager lock while choosing devices (GetPreferredAllocation)
but not during Allocate, so concurrent admissions really reach the plugin concurrently.
"""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from kubegpu.deviceplugin.api import v1beta1_pb2 as pb
from kubegpu.deviceplugin.api import v1beta1_pb2_grpc as pb_grpc

SUPPORTED_VERSIONS = ["v1beta1"]
CHECKPOINT = "kubelet_internal_checkpoint"
HEALTHY = "Healthy"


class AdmissionError(Exception):
    """kubelet's UnexpectedAdmissionError, with its message."""


@dataclass
class Call:
    name: str
    resource: str
    request: Any
    at: float


@dataclass
class Container:
    name: str
    requests: dict[str, int]
    restartable: bool = False  # a sidecar (restartable init container)


@dataclass
class Pod:
    uid: str
    containers: list[Container]
    init_containers: list[Container] = field(default_factory=list)


@dataclass
class RuntimeConfig:
    """What the container runtime would get: kubelet's merge of all Allocate responses."""

    envs: dict[str, str] = field(default_factory=dict)
    mounts: dict[str, pb.Mount] = field(default_factory=dict)
    devices: list[pb.DeviceSpec] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: list[str] = field(default_factory=list)


@dataclass
class Endpoint:
    resource: str
    socket: Path | None
    channel: grpc.Channel | None
    stub: pb_grpc.DevicePluginStub | None
    options: pb.DevicePluginOptions
    devices: dict[str, pb.Device] = field(default_factory=dict)
    stopped_at: float | None = None
    snapshots: int = 0


# kubelet's resource-name rule, transcribed clause by clause from the protocol reference §5
# (upstream: ``IsExtendedResourceName`` -> ``IsNativeResource`` + ``validation.IsQualifiedName``).
# It is deliberately written apart from the agent's ``inventory.is_extended_resource_name``, so that
# tests/integration/test_resource_name_rule.py catches a drift in either one. Go's ``regexp`` anchors
# ``^...$`` at the ends of the text, so every pattern is applied with ``fullmatch`` (Python's ``$``
# would also accept a trailing newline), and Go's ``len`` counts bytes.
_REQUESTS_PREFIX = "requests."  # DefaultResourceRequestsPrefix
_NATIVE_MARKER = "kubernetes.io/"  # a prefixed native resource contains it anywhere
_DNS1123_SUBDOMAIN_MAX_BYTES = 253
_QUALIFIED_NAME_MAX_BYTES = 63
_DNS1123_LABEL_PATTERN = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_PATTERN = re.compile(f"{_DNS1123_LABEL_PATTERN}(\\.{_DNS1123_LABEL_PATTERN})*")
_QUALIFIED_NAME_PATTERN = re.compile("([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def _byte_length(text: str) -> int:
    return len(text.encode())


def _is_native_resource(name: str) -> bool:
    """Native: no ``/`` at all, or ``kubernetes.io/`` somewhere (``foo.kubernetes.io/x`` too)."""
    if "/" not in name:
        return True
    return _NATIVE_MARKER in name


def _is_dns1123_subdomain(value: str) -> bool:
    if _byte_length(value) > _DNS1123_SUBDOMAIN_MAX_BYTES:
        return False
    return _DNS1123_SUBDOMAIN_PATTERN.fullmatch(value) is not None


def _is_qualified_name(value: str) -> bool:
    """``[prefix/]name``: at most one ``/``; a non-empty DNS-1123 prefix; a name of 1..63 bytes."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if prefix == "":
            return False
        if not _is_dns1123_subdomain(prefix):
            return False
    else:
        return False
    if name == "":
        return False
    if _byte_length(name) > _QUALIFIED_NAME_MAX_BYTES:
        return False
    return _QUALIFIED_NAME_PATTERN.fullmatch(name) is not None


def is_extended_resource_name(name: str) -> bool:
    """kubelet's ``IsExtendedResourceName`` (reference §5): what Register accepts."""
    if _is_native_resource(name):
        return False
    if name.startswith(_REQUESTS_PREFIX):
        return False
    # kubelet validates the name as a quota key, "requests.<name>", which must be a qualified name
    return _is_qualified_name(_REQUESTS_PREFIX + name)


class _Registration(pb_grpc.RegistrationServicer):
    def __init__(self, kubelet: KubeletDouble) -> None:
        self._kubelet = kubelet

    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        return self._kubelet._register(request, context)


class KubeletDouble:
    def __init__(
        self,
        plugin_dir: Path,
        *,
        grace_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        refuse_registrations: int = 0,
    ) -> None:
        self.dir = plugin_dir
        self.grace_s = grace_s
        self.refuse_registrations = refuse_registrations  # fault injection: refuse the first N
        # fault injection: clear it and every Register hangs (before any check) until it is set again
        self.register_gate = threading.Event()
        self.register_gate.set()
        self._clock = clock
        self._lock = threading.RLock()  # kubelet's device-manager mutex
        self._server: grpc.Server | None = None
        self.endpoints: dict[str, Endpoint] = {}
        self.calls: list[Call] = []
        # (pod uid, container name, resource) -> (device ids, allocate response)
        self.allocations: dict[tuple[str, str, str], tuple[list[str], pb.ContainerAllocateResponse]] = {}
        self._pods: dict[str, Pod] = {}
        self._changed = threading.Condition(self._lock)

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def socket(self) -> Path:
        return self.dir / "kubelet.sock"

    def _record(self, name: str, resource: str, request: Any = None) -> None:
        with self._lock:
            self.calls.append(Call(name=name, resource=resource, request=request, at=self._clock()))
            self._changed.notify_all()

    def start(self, *, keep_plugin_sockets: bool = False) -> None:
        self.dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        for entry in [] if keep_plugin_sockets else self.dir.iterdir():
            try:
                if stat.S_ISSOCK(entry.lstat().st_mode):
                    entry.unlink()
            except FileNotFoundError:
                pass
        self._load_checkpoint()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server
        self._record("kubelet.start", "")

    def stop(self) -> None:
        """kubelet goes away: streams break, its socket disappears."""
        self.register_gate.set()  # hanging Register handlers finish (their callers are gone anyway)
        with self._lock:
            endpoints = list(self.endpoints.values())
        for ep in endpoints:
            if ep.channel is not None:
                ep.channel.close()
        if self._server is not None:
            self._server.stop(0).wait(5)
            self._server = None
        if self.socket.exists():
            self.socket.unlink()

    def restart(self, *, keep_plugin_sockets: bool = False) -> None:
        """A new kubelet: sockets in the dir deleted, kubelet.sock recreated (on ext4 often with the
        same inode). ``keep_plugin_sockets`` recreates only kubelet.sock, leaving the plugins' sockets."""
        self.stop()
        with self._lock:
            self.endpoints.clear()
            self.allocations.clear()
        self.start(keep_plugin_sockets=keep_plugin_sockets)

    # -- Register --------------------------------------------------------------------------------

    def _register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        self._record("Register", request.resource_name, request)
        self.register_gate.wait(60)
        with self._lock:
            refuse = self.refuse_registrations > 0
            self.refuse_registrations -= int(refuse)
        if refuse:
            context.abort(grpc.StatusCode.UNKNOWN, "injected: kubelet is not ready")
        if request.version not in SUPPORTED_VERSIONS:
            context.abort(
                grpc.StatusCode.UNKNOWN,
                f'requested API version "{request.version}" is not supported by kubelet. '
                f"Supported version is {json.dumps(SUPPORTED_VERSIONS)}",
            )
        if not is_extended_resource_name(request.resource_name):
            context.abort(grpc.StatusCode.UNKNOWN, f'the ResourceName "{request.resource_name}" is invalid')
        socket = self.dir / request.endpoint
        channel = grpc.insecure_channel(f"unix://{socket}")
        try:
            grpc.channel_ready_future(channel).result(timeout=10)
        except grpc.FutureTimeoutError:
            channel.close()
            context.abort(
                grpc.StatusCode.UNKNOWN, f"failed to dial device plugin: context deadline exceeded ({socket})"
            )
        stub = pb_grpc.DevicePluginStub(channel)
        try:
            options = stub.GetDevicePluginOptions(pb.Empty())
        except grpc.RpcError as exc:
            channel.close()
            context.abort(grpc.StatusCode.UNKNOWN, f"failed to get device plugin options: {exc.details()}")
        self._record("GetDevicePluginOptions", request.resource_name, options)
        endpoint = Endpoint(
            resource=request.resource_name, socket=socket, channel=channel, stub=stub, options=options
        )
        with self._lock:
            old = self.endpoints.get(request.resource_name)
            self.endpoints[request.resource_name] = endpoint  # newest wins
        if old is not None and old.channel is not None:
            old.channel.close()
        threading.Thread(target=self._read_stream, args=(endpoint,), daemon=True).start()
        self._record("Register.reply", request.resource_name)
        return pb.Empty()

    def _read_stream(self, endpoint: Endpoint) -> None:
        assert endpoint.stub is not None
        self._record("ListAndWatch", endpoint.resource)
        try:
            for response in endpoint.stub.ListAndWatch(pb.Empty()):
                with self._lock:
                    endpoint.devices = {d.ID: d for d in response.devices}
                    endpoint.snapshots += 1
                    self._write_checkpoint()
                    self._changed.notify_all()
        except grpc.RpcError:
            pass
        with self._lock:
            # Keyed by the endpoint object: a late end of an old stream never touches a newer one.
            endpoint.stopped_at = self._clock()
            self._changed.notify_all()
        self._record("ListAndWatch.end", endpoint.resource)

    # -- node status ------------------------------------------------------------------------------

    def _live(self, resource: str) -> Endpoint | None:
        ep = self.endpoints.get(resource)
        if ep is not None and ep.stopped_at is not None and self._clock() - ep.stopped_at > self.grace_s:
            del self.endpoints[resource]
            self._write_checkpoint()
            return None
        return ep

    def capacity(self, resource: str) -> int:
        with self._lock:
            ep = self._live(resource)
            return 0 if ep is None else len(ep.devices)

    def allocatable(self, resource: str) -> int:
        return len(self.healthy(resource))

    def healthy(self, resource: str) -> set[str]:
        with self._lock:
            ep = self._live(resource)
            if ep is None or ep.stopped_at is not None:
                return set()
            return {i for i, d in ep.devices.items() if d.health == HEALTHY}

    def device_health(self, resource: str) -> dict[str, str]:
        with self._lock:
            ep = self._live(resource)
            if ep is None:
                return {}
            if ep.stopped_at is not None:
                return dict.fromkeys(ep.devices, "Unhealthy")
            return {i: d.health for i, d in ep.devices.items()}

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.05))
        return True

    # -- admission --------------------------------------------------------------------------------

    def _in_use(self) -> set[str]:
        return {i for ids, _ in self.allocations.values() for i in ids}

    def remove_pod(self, uid: str) -> None:
        """The pod finished: its devices are freed (kubelet frees allocations of inactive pods)."""
        with self._lock:
            self._pods.pop(uid, None)
            for key in [k for k in self.allocations if k[0] == uid]:
                del self.allocations[key]
            self._write_checkpoint()

    def _reusable(self, pod: Pod, upto: Container, resource: str) -> list[str]:
        """Devices of finished, non-restartable init containers of ``pod`` (kubelet reuses them first)."""
        out: list[str] = []
        for init in pod.init_containers:
            if init is upto:
                break
            if init.restartable:
                continue
            out.extend(self.allocations.get((pod.uid, init.name, resource), ([], None))[0])
        return out

    def _choose(self, pod: Pod, container: Container, resource: str, needed: int) -> list[str]:
        ep = self._live(resource)
        if ep is None or ep.stub is None:
            raise AdmissionError(f"cannot allocate unregistered device {resource}")
        healthy = self.healthy(resource)
        if not healthy:
            raise AdmissionError(f"no healthy devices present; cannot allocate unhealthy devices {resource}")
        reusable = [i for i in self._reusable(pod, container, resource) if i in healthy]
        if len(reusable) >= needed:
            return reusable[:needed]
        sidecar_or_app = self._in_use() - set(reusable)
        available = healthy - sidecar_or_app
        if len(available) < needed:
            raise AdmissionError(
                f"requested number of devices unavailable for {resource}. "
                f"Requested: {needed}, Available: {len(available)}"
            )
        chosen = list(reusable)
        if ep.options.get_preferred_allocation_available:
            request = pb.PreferredAllocationRequest(
                container_requests=[
                    pb.ContainerPreferredAllocationRequest(
                        available_deviceIDs=sorted(available | set(reusable)),
                        must_include_deviceIDs=reusable,
                        allocation_size=needed,
                    )
                ]
            )
            self._record("GetPreferredAllocation", resource, request)
            try:
                response = ep.stub.GetPreferredAllocation(request, timeout=30)
            except grpc.RpcError as exc:
                raise AdmissionError(
                    f"device plugin GetPreferredAllocation rpc failed: {exc.details()}"
                ) from exc
            self._record("GetPreferredAllocation.reply", resource, response)
            if response.container_responses:
                for device_id in response.container_responses[0].deviceIDs:
                    if len(chosen) >= needed:
                        break
                    if device_id in available and device_id not in chosen:
                        chosen.append(device_id)
        for device_id in sorted(available):  # fill any shortfall, as kubelet does
            if len(chosen) >= needed:
                break
            if device_id not in chosen:
                chosen.append(device_id)
        return chosen

    def admit_pod(self, pod: Pod) -> dict[str, RuntimeConfig]:
        """Allocate every container's devices; ``AdmissionError`` (and a rollback) on any failure."""
        done: list[tuple[str, str, str]] = []
        try:
            for container in [*pod.init_containers, *pod.containers]:
                for resource, needed in container.requests.items():
                    key = (pod.uid, container.name, resource)
                    with self._lock:
                        self._pods[pod.uid] = pod
                        if key in self.allocations:
                            if len(self.allocations[key][0]) != needed:
                                raise AdmissionError(
                                    f"pod {pod.uid} container {container.name} changed request for {resource}"
                                )
                            continue
                        chosen = self._choose(pod, container, resource, needed)
                        stub = self.endpoints[resource].stub
                        # reserve while the plugin is called (kubelet marks devices allocated first)
                        self.allocations[key] = (chosen, pb.ContainerAllocateResponse())
                        done.append(key)
                    assert stub is not None
                    request = pb.AllocateRequest(
                        container_requests=[pb.ContainerAllocateRequest(devices_ids=chosen)]
                    )
                    self._record("Allocate", resource, request)
                    try:
                        response = stub.Allocate(request, timeout=30)
                    except grpc.RpcError as exc:
                        raise AdmissionError(f"Allocate failed: {exc.code().name}: {exc.details()}") from exc
                    self._record("Allocate.reply", resource, response)
                    if not response.container_responses:
                        raise AdmissionError("no containers return in allocation response")
                    with self._lock:
                        self.allocations[key] = (chosen, response.container_responses[0])
                        self._write_checkpoint()
        except AdmissionError:
            with self._lock:
                for key in done:
                    self.allocations.pop(key, None)
                self._write_checkpoint()
            raise
        return {c.name: self.runtime_config(pod, c) for c in [*pod.init_containers, *pod.containers]}

    def runtime_config(self, pod: Pod, container: Container) -> RuntimeConfig:
        merged = RuntimeConfig()
        with self._lock:
            for resource in container.requests:
                _, response = self.allocations[(pod.uid, container.name, resource)]
                for k, v in response.envs.items():
                    merged.envs.setdefault(k, v)  # first wins
                for m in response.mounts:
                    merged.mounts.setdefault(m.container_path, m)
                merged.devices.extend(response.devices)
                merged.annotations.update(response.annotations)
                merged.cdi_devices.extend(d.name for d in response.cdi_devices)
        return merged

    def start_container(self, pod: Pod, container: Container) -> RuntimeConfig:
        """PreStartContainer (30 s) where a plugin asked for it, then the merged runtime config."""
        for resource in container.requests:
            with self._lock:
                ep = self.endpoints[resource]
                ids = self.allocations[(pod.uid, container.name, resource)][0]
            if ep.options.pre_start_required and ep.stub is not None:
                self._record("PreStartContainer", resource, ids)
                try:
                    ep.stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=ids), timeout=30)
                except grpc.RpcError as exc:
                    raise AdmissionError(f"PreStartContainer failed: {exc.details()}") from exc
        return self.runtime_config(pod, container)

    # -- checkpoint -------------------------------------------------------------------------------

    def _write_checkpoint(self) -> None:
        entries = []
        for (uid, name, resource), (ids, response) in self.allocations.items():
            numa: dict[str, list[str]] = {}
            ep = self.endpoints.get(resource)
            for device_id in ids:
                device = ep.devices.get(device_id) if ep else None
                nodes = [str(n.ID) for n in device.topology.nodes] if device is not None else []
                for node in nodes or ["-1"]:
                    numa.setdefault(node, []).append(device_id)
            entries.append(
                {
                    "PodUID": uid,
                    "ContainerName": name,
                    "ResourceName": resource,
                    "DeviceIDs": numa,
                    "AllocResp": base64.b64encode(response.SerializeToString()).decode(),
                }
            )
        registered = {
            r: sorted(i for i, d in ep.devices.items() if d.health == HEALTHY)
            for r, ep in self.endpoints.items()
        }
        data = {"Data": {"PodDeviceEntries": entries, "RegisteredDevices": registered}, "Checksum": 0}
        tmp = self.dir / (CHECKPOINT + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.dir / CHECKPOINT)

    def _load_checkpoint(self) -> None:
        path = self.dir / CHECKPOINT
        if not path.exists():
            return
        data = json.loads(path.read_text())["Data"]
        with self._lock:
            now = self._clock()
            for resource in data.get("RegisteredDevices", {}):
                # a stopped endpoint with no devices: capacity 0 until the plugin registers again
                self.endpoints.setdefault(
                    resource,
                    Endpoint(
                        resource=resource,
                        socket=None,
                        channel=None,
                        stub=None,
                        options=pb.DevicePluginOptions(),
                        stopped_at=now,
                    ),
                )
            for entry in data.get("PodDeviceEntries", []):
                ids = entry["DeviceIDs"]
                flat = [i for group in ids.values() for i in group] if isinstance(ids, dict) else list(ids)
                response = pb.ContainerAllocateResponse.FromString(base64.b64decode(entry["AllocResp"]))
                key = (entry["PodUID"], entry["ContainerName"], entry["ResourceName"])
                self.allocations[key] = (list(dict.fromkeys(flat)), response)

    # -- helpers for tests ------------------------------------------------------------------------

    def calls_named(self, name: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.name == name]
