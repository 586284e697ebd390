"""kubelet's unary calls never starve behind ListAndWatch streams (each stream holds a gRPC worker).

Against the real agent: with 40 idle streams open on one socket (more than the 32 workers it once
had), GetDevicePluginOptions, GetPreferredAllocation and Allocate still answer well inside their deadline.
"""

from __future__ import annotations

import stat
import time
from pathlib import Path

import grpc
import pytest

from kubegpu.deviceplugin.api import v1beta1_pb2 as pb
from kubegpu.deviceplugin.api import v1beta1_pb2_grpc as pb_grpc
from kubegpu.sources.spec import load_node

pytestmark = pytest.mark.integration

UUIDS = [g.uuid for g in load_node("builtin:seed-8gpu").gpus]
STREAMS = 40


def _plugin_socket(directory: Path, timeout: float = 30) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in directory.iterdir():
            if p.name.startswith("kubegpu-") and stat.S_ISSOCK(p.lstat().st_mode):
                return p
        time.sleep(0.05)
    raise AssertionError(f"no plugin socket in {directory}")


def test_forty_idle_list_and_watch_streams_do_not_starve_unary_calls(plugin_dir: Path, start_agent) -> None:
    agent = start_agent("--node-spec", "builtin:seed-8gpu", "--kubelet-socket", "")
    socket = _plugin_socket(plugin_dir)
    channels: list[grpc.Channel] = []
    streams = []
    try:
        for _ in range(STREAMS):
            channel = grpc.insecure_channel(f"unix://{socket}")
            channels.append(channel)
            stream = pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty(), timeout=60)
            assert len(next(stream).devices) == 8  # the stream is open and now idle
            streams.append(stream)
        channel = grpc.insecure_channel(f"unix://{socket}")
        channels.append(channel)
        stub = pb_grpc.DevicePluginStub(channel)
        started = time.monotonic()
        options = stub.GetDevicePluginOptions(pb.Empty(), timeout=2)
        assert options.get_preferred_allocation_available
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(available_deviceIDs=UUIDS, allocation_size=2)
            ]
        )
        assert len(stub.GetPreferredAllocation(request, timeout=2).container_responses[0].deviceIDs) == 2
        allocated = stub.Allocate(
            pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=[UUIDS[0]])]),
            timeout=2,
        )
        assert allocated.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[0]
        assert time.monotonic() - started < 2
        assert agent.proc.poll() is None
    finally:
        for stream in streams:
            stream.cancel()
        for channel in channels:
            channel.close()
    assert agent.terminate() == 0
