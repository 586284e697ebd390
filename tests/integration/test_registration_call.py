"""``register()`` against a kubelet double that hangs: a deadline, a prompt cancel, messages saying which."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubegpu.deviceplugin.config import AgentConfig
from kubegpu.deviceplugin.inventory import build_inventory
from kubegpu.deviceplugin.plugin import ResourcePlugin
from kubegpu.deviceplugin.server import PluginServer, register
from kubegpu.errors import RegistrationFailed
from kubegpu.health.tracker import HealthTracker
from kubegpu.sources.spec import load_node
from tests.integration.kubelet_double import KubeletDouble

pytestmark = pytest.mark.integration

NODE = load_node("builtin:seed-8gpu")


@pytest.fixture
def server(plugin_dir: Path) -> Iterator[PluginServer]:
    config = AgentConfig()
    tracker = HealthTracker(gpu_count=len(NODE.gpus), aliases={}, policy=config.health)
    resource = build_inventory(NODE, config).resources[0]
    served = PluginServer(
        ResourcePlugin(resource=resource, topology=NODE.topology, config=config, tracker=tracker), plugin_dir
    )
    served.start()
    yield served
    served.stop(grace_s=0)


def test_a_register_that_hangs_fails_at_its_deadline_and_says_so(
    kubelet: KubeletDouble, server: PluginServer
) -> None:
    kubelet.register_gate.clear()
    started = time.monotonic()
    with pytest.raises(RegistrationFailed) as failed:
        register(kubelet.socket, server, timeout_s=0.5)
    assert time.monotonic() - started < 3
    assert str(failed.value) == (
        f"kubelet did not answer the registration of nvidia.com/gpu within 0.5 s ({kubelet.socket})"
    )


def test_a_register_in_flight_is_abandoned_as_soon_as_cancel_is_set(
    kubelet: KubeletDouble, server: PluginServer
) -> None:
    kubelet.register_gate.clear()
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(RegistrationFailed, match="abandoned: the agent is stopping"):
        register(kubelet.socket, server, timeout_s=30, cancel=cancel)
    assert time.monotonic() - started < 1.5


def test_a_missing_kubelet_socket_is_not_reachable(plugin_dir: Path, server: PluginServer) -> None:
    with pytest.raises(RegistrationFailed) as failed:
        register(plugin_dir / "kubelet.sock", server)
    assert str(failed.value) == f"kubelet not reachable at {plugin_dir / 'kubelet.sock'}: no socket there"
