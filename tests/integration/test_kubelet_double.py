"""The kubelet double itself behaves as kubelet does (so the agent's tests mean something)."""

from __future__ import annotations

import threading
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from kubegpu.deviceplugin.api import v1beta1_pb2 as pb
from kubegpu.deviceplugin.api import v1beta1_pb2_grpc as pb_grpc
from tests.integration.kubelet_double import Container, KubeletDouble, Pod

pytestmark = pytest.mark.integration


class TinyPlugin(pb_grpc.DevicePluginServicer):
    """A minimal plugin: two devices, optional failing options call, records preferred requests."""

    def __init__(self, *, fail_options: bool = False) -> None:
        self.fail_options = fail_options
        self.stop = threading.Event()

    def GetDevicePluginOptions(self, request, context):
        if self.fail_options:
            context.abort(grpc.StatusCode.INTERNAL, "options broken")
        return pb.DevicePluginOptions(get_preferred_allocation_available=True)

    def ListAndWatch(self, request, context):
        yield pb.ListAndWatchResponse(devices=[pb.Device(ID=i, health="Healthy") for i in ("a", "b", "c")])
        while context.is_active() and not self.stop.wait(0.05):
            pass

    def GetPreferredAllocation(self, request, context):
        return pb.PreferredAllocationResponse(
            container_responses=[pb.ContainerPreferredAllocationResponse(deviceIDs=["zz", "c"])]
        )

    def Allocate(self, request, context):
        return pb.AllocateResponse(
            container_responses=[
                pb.ContainerAllocateResponse(envs={"IDS": ",".join(r.devices_ids)})
                for r in request.container_requests
            ]
        )


def serve(plugin_dir: Path, servicer: TinyPlugin, name: str = "tiny.sock") -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_DevicePluginServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{plugin_dir / name}")
    server.start()
    return server


def register(kubelet: KubeletDouble, **fields: object) -> grpc.RpcError | None:
    request = pb.RegisterRequest(
        version=str(fields.get("version", "v1beta1")),
        endpoint=str(fields.get("endpoint", "tiny.sock")),
        resource_name=str(fields.get("resource_name", "example.com/tiny")),
    )
    with grpc.insecure_channel(f"unix://{kubelet.socket}") as channel:
        try:
            pb_grpc.RegistrationStub(channel).Register(request, timeout=15)
        except grpc.RpcError as exc:
            return exc
    return None


def test_register_rejects_bad_version_and_name_with_kubelets_texts(kubelet: KubeletDouble) -> None:
    bad_version = register(kubelet, version="v1alpha")
    assert bad_version is not None and bad_version.code() is grpc.StatusCode.UNKNOWN
    assert bad_version.details() == (
        'requested API version "v1alpha" is not supported by kubelet. Supported version is ["v1beta1"]'
    )
    bad_name = register(kubelet, resource_name="gpu")
    assert bad_name is not None and bad_name.details() == 'the ResourceName "gpu" is invalid'


def test_options_failure_fails_register_and_no_list_and_watch_follows(
    kubelet: KubeletDouble, plugin_dir: Path
) -> None:
    server = serve(plugin_dir, TinyPlugin(fail_options=True))
    try:
        error = register(kubelet)
        assert error is not None
        assert error.details().startswith("failed to get device plugin options:")
        assert kubelet.calls_named("ListAndWatch") == []
        assert kubelet.capacity("example.com/tiny") == 0
    finally:
        server.stop(0)


def test_preferred_answer_is_intersected_and_the_shortfall_filled(
    kubelet: KubeletDouble, plugin_dir: Path
) -> None:
    plugin = TinyPlugin()
    server = serve(plugin_dir, plugin)
    try:
        assert register(kubelet) is None
        assert kubelet.wait_for(lambda: kubelet.allocatable("example.com/tiny") == 3)
        configs = kubelet.admit_pod(
            Pod(uid="p", containers=[Container(name="c", requests={"example.com/tiny": 2})])
        )
        # "zz" is not a candidate and is dropped; "c" is kept; kubelet fills the rest itself
        assert sorted(configs["c"].envs["IDS"].split(",")) == ["a", "c"]
        asked = kubelet.calls_named("GetPreferredAllocation")[0].request.container_requests[0]
        assert asked.allocation_size == 2
    finally:
        plugin.stop.set()
        server.stop(0)


def test_init_container_devices_are_reused_first_via_must_include(
    kubelet: KubeletDouble, plugin_dir: Path
) -> None:
    plugin = TinyPlugin()
    server = serve(plugin_dir, plugin)
    try:
        assert register(kubelet) is None
        assert kubelet.wait_for(lambda: kubelet.allocatable("example.com/tiny") == 3)
        pod = Pod(
            uid="p",
            init_containers=[Container(name="init", requests={"example.com/tiny": 1})],
            containers=[Container(name="app", requests={"example.com/tiny": 2})],
        )
        kubelet.admit_pod(pod)
        init_ids = kubelet.allocations[("p", "init", "example.com/tiny")][0]
        app_ids = kubelet.allocations[("p", "app", "example.com/tiny")][0]
        assert set(init_ids) <= set(app_ids)
        asked = kubelet.calls_named("GetPreferredAllocation")[-1].request.container_requests[0]
        assert list(asked.must_include_deviceIDs) == init_ids
    finally:
        plugin.stop.set()
        server.stop(0)


def test_stream_end_then_grace_period_gives_zero_capacity(plugin_dir: Path) -> None:
    now = [0.0]
    kubelet = KubeletDouble(plugin_dir, grace_s=300, clock=lambda: now[0])
    kubelet.start()
    plugin = TinyPlugin()
    server = serve(plugin_dir, plugin)
    try:
        assert register(kubelet) is None
        assert kubelet.wait_for(lambda: kubelet.allocatable("example.com/tiny") == 3)
        server.stop(0)
        assert kubelet.wait_for(lambda: kubelet.allocatable("example.com/tiny") == 0)
        assert kubelet.capacity("example.com/tiny") == 3
        now[0] = 301.0
        assert kubelet.capacity("example.com/tiny") == 0
    finally:
        plugin.stop.set()
        kubelet.stop()


def test_agent_keeps_retrying_a_refusing_kubelet(plugin_dir: Path, start_agent) -> None:
    kubelet = KubeletDouble(plugin_dir, refuse_registrations=3)
    kubelet.start()
    try:
        agent = start_agent("--node-spec", "builtin:seed-8gpu")
        assert kubelet.wait_for(lambda: kubelet.allocatable("nvidia.com/gpu") == 8, 30), agent.log
        assert len(kubelet.calls_named("Register")) == 4
        assert "registration failed; retrying" in agent.log
    finally:
        kubelet.stop()
