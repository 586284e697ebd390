"""An unexpected exception in an RPC handler is INTERNAL with a short message and one JSON log line.

Served in-process by the real ``PluginServer`` over a unix socket; the fault is injected into the
resource manager behind it (the servicer must not care where the exception came from).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from kubegpu.deviceplugin.api import v1beta1_pb2 as pb
from kubegpu.deviceplugin.config import AgentConfig
from kubegpu.deviceplugin.inventory import build_inventory
from kubegpu.deviceplugin.plugin import ResourcePlugin
from kubegpu.deviceplugin.server import PluginServer
from kubegpu.health.tracker import HealthTracker
from kubegpu.sources.spec import load_node
from tests.integration.helpers import plugin_stub

pytestmark = pytest.mark.integration

NODE = load_node("builtin:seed-8gpu")
UUIDS = [g.uuid for g in NODE.gpus]


class BrokenPlugin(ResourcePlugin):
    """A resource manager with a bug: every call past the options raises."""

    def preferred(self, available, must_include, size):  # type: ignore[no-untyped-def]
        raise ZeroDivisionError("division by zero in a policy")

    def allocate(self, device_ids, **_kwargs):  # type: ignore[no-untyped-def]
        raise KeyError("GPU-lost")

    def pre_start(self, device_ids):  # type: ignore[no-untyped-def]
        raise RuntimeError("pre-start bug")

    def snapshot(self):  # type: ignore[no-untyped-def]
        raise RuntimeError("snapshot bug")


def _server(plugin_dir: Path, plugin_type: type[ResourcePlugin], **kwargs: int) -> PluginServer:
    config = AgentConfig()
    inventory = build_inventory(NODE, config)
    tracker = HealthTracker(gpu_count=len(NODE.gpus), aliases={}, policy=config.health)
    plugin = plugin_type(
        resource=inventory.resources[0], topology=NODE.topology, config=config, tracker=tracker
    )
    return PluginServer(plugin, plugin_dir, **kwargs)


@pytest.fixture
def broken(plugin_dir: Path) -> Iterator[PluginServer]:
    server = _server(plugin_dir, BrokenPlugin)
    server.start()
    yield server
    server.stop(grace_s=0)


def _errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("kubegpu")]


@pytest.mark.parametrize(
    ("rpc", "request_message", "cause"),
    [
        (
            "GetPreferredAllocation",
            pb.PreferredAllocationRequest(
                container_requests=[
                    pb.ContainerPreferredAllocationRequest(available_deviceIDs=UUIDS, allocation_size=2)
                ]
            ),
            "ZeroDivisionError: division by zero in a policy",
        ),
        (
            "Allocate",
            pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=[UUIDS[0]])]),
            "KeyError: 'GPU-lost'",
        ),
        (
            "PreStartContainer",
            pb.PreStartContainerRequest(devices_ids=[UUIDS[0]]),
            "RuntimeError: pre-start bug",
        ),
    ],
)
def test_an_unexpected_exception_is_internal_with_the_cause_logged_once(
    broken: PluginServer, caplog: pytest.LogCaptureFixture, rpc: str, request_message: object, cause: str
) -> None:
    assert broken.socket_path is not None
    caplog.set_level(logging.DEBUG, logger="kubegpu")
    channel, stub = plugin_stub(broken.socket_path)
    with channel, pytest.raises(grpc.RpcError) as failed:
        getattr(stub, rpc)(request_message, timeout=5)
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    details = failed.value.details()
    assert details == f"{rpc} failed inside kubegpu ({cause}); see the agent log"
    assert "Traceback" not in details
    [record] = _errors(caplog)
    assert record.getMessage() == "RPC failed unexpectedly"
    assert record.__dict__["rpc"] == rpc
    assert record.__dict__["error"] == cause
    assert record.__dict__["resource"] == "nvidia.com/gpu"
    assert record.exc_info is None  # the traceback goes to a separate debug line
    debug = [r for r in caplog.records if r.name.startswith("kubegpu") and r.exc_info]
    assert len(debug) == 1


def test_a_list_and_watch_that_breaks_ends_with_internal(
    broken: PluginServer, caplog: pytest.LogCaptureFixture
) -> None:
    assert broken.socket_path is not None
    caplog.set_level(logging.INFO)
    channel, stub = plugin_stub(broken.socket_path)
    with channel, pytest.raises(grpc.RpcError) as failed:
        next(iter(stub.ListAndWatch(pb.Empty(), timeout=5)))
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    assert "RuntimeError: snapshot bug" in failed.value.details()
    [record] = _errors(caplog)
    assert record.__dict__["rpc"] == "ListAndWatch"


def test_streams_beyond_the_cap_are_refused_and_unary_calls_still_answer(plugin_dir: Path) -> None:
    server = _server(plugin_dir, ResourcePlugin, max_streams=2)
    server.start()
    try:
        assert server.socket_path is not None
        channel, stub = plugin_stub(server.socket_path)
        with channel:
            streams = [stub.ListAndWatch(pb.Empty(), timeout=30) for _ in range(2)]
            for stream in streams:
                assert len(next(stream).devices) == 8
            with pytest.raises(grpc.RpcError) as refused:
                next(iter(stub.ListAndWatch(pb.Empty(), timeout=5)))
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "2 ListAndWatch streams" in refused.value.details()
            assert stub.GetDevicePluginOptions(pb.Empty(), timeout=2).get_preferred_allocation_available
            for stream in streams:
                stream.cancel()
    finally:
        server.stop(grace_s=0)
