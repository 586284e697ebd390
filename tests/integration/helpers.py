"""Small helpers shared by the integration tests (talking to a plugin socket directly)."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from kubegpu.deviceplugin.api import v1beta1_pb2 as pb
from kubegpu.deviceplugin.api import v1beta1_pb2_grpc as pb_grpc


def plugin_stub(socket: Path) -> tuple[grpc.Channel, pb_grpc.DevicePluginStub]:
    channel = grpc.insecure_channel(f"unix://{socket}")
    grpc.channel_ready_future(channel).result(timeout=10)
    return channel, pb_grpc.DevicePluginStub(channel)


def preferred(
    stub: pb_grpc.DevicePluginStub, available: list[str], size: int, must: list[str] | None = None
) -> list[str]:
    request = pb.PreferredAllocationRequest(
        container_requests=[
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=available, must_include_deviceIDs=must or [], allocation_size=size
            )
        ]
    )
    return list(stub.GetPreferredAllocation(request, timeout=10).container_responses[0].deviceIDs)


def allocate(stub: pb_grpc.DevicePluginStub, ids: list[str]) -> pb.ContainerAllocateResponse:
    request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])
    return stub.Allocate(request, timeout=10).container_responses[0]


def time_sliced(replicas: int, resource: str = "nvidia.com/gpu") -> str:
    """An NVIDIA v1 config that time-slices ``resource`` into ``replicas`` replicas."""
    return (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        f"    - name: {resource}\n      replicas: {replicas}\n"
    )


def log_records(text: str) -> list[dict[str, object]]:
    """The agent's JSON log lines as dicts (lines that are not JSON objects are skipped)."""
    records: list[dict[str, object]] = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def messages(text: str) -> list[str]:
    return [str(r.get("msg")) for r in log_records(text)]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> str:
    """One ``/metrics`` scrape of the agent on ``port``, in Prometheus' text format 0.0.4."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return str(reply.read().decode())


def scrape_until(
    port: int, log: Callable[[], str], accept: Callable[[str], bool], timeout: float = 20
) -> str:
    """Scrape until ``accept`` holds; on timeout fail with the last scrape and ``log()`` (the agent's)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            last = scrape(port)
            if accept(last):
                return last
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.2)
    pytest.fail(f"no matching scrape; last:\n{last[-3000:]}\nagent log:\n{log()[-3000:]}")
