"""The quarantine inside the real agent (real gRPC to the kubelet double, an in-memory API server): a
restart after an XID storm keeps every failed GPU however long the condition's message would be, and
a config reload that moves the taint key or turns the quarantine off leaves none of kubegpu's old
taint or Lease place behind."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from kubegpu.agent import Agent, AgentOptions
from kubegpu.health.quarantine import QuarantinePolicy
from kubegpu.model.event import GpuEvent, GpuEventKind
from kubegpu.node.quarantine import condition_for, failed_gpus
from kubegpu.sources.spec import load_node
from tests.integration.kubelet_double import KubeletDouble
from tests.unit.node.test_hygiene import KEY
from tests.unit.node.test_hygiene import FakeApi as NodeApi

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
NEW_KEY = "example.com/gpu-broken"
UUIDS = [g.uuid for g in load_node("builtin:seed-8gpu").gpus]
MESSAGE_LIMIT = 1024
LONG = "the driver says: " + "a long explanation of what went wrong " * 8


class FakeApi:
    """One in-memory node and Lease (``tests/unit/node``'s stand-in) shared by every client."""

    state: ClassVar[NodeApi] = NodeApi()
    lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, *, kubeconfig: str | None = None, **_: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.state, name)

        def locked(*args: Any, **kwargs: Any) -> Any:
            with self.lock:
                return method(*args, **kwargs)

        return locked


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[FakeApi]]:
    FakeApi.state = NodeApi()
    monkeypatch.setattr("kubegpu.kubeapi.KubeApi", FakeApi)
    yield FakeApi


def wait(what: str, probe: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with FakeApi.lock:
            if probe():
                return
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def start(plugin_dir: Path, config: Path, quarantine: str) -> Agent:
    config.write_text(f"version: v1\nkubegpu:\n  node: {{labels: false}}\n  quarantine: {quarantine}\n")
    agent = Agent(
        AgentOptions(
            node_spec="builtin:seed-8gpu", device_plugin_dir=plugin_dir, config_file=config, node_name="n0"
        )
    )
    agent.start()
    return agent


def keys(api: type[FakeApi]) -> list[str]:
    return [t["key"] for t in api.state.nodes["n0"]["spec"]["taints"]]


def test_a_restart_after_an_xid_storm_keeps_every_failed_gpu(
    kubelet: KubeletDouble, plugin_dir: Path, api: type[FakeApi]
) -> None:
    config = plugin_dir.parent / f"{plugin_dir.name}-q.yaml"
    agent = start(plugin_dir, config, "{}")
    try:
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20)
        for gpu in range(8):
            agent.apply_event(GpuEvent(gpu=gpu, kind=GpuEventKind.XID, xid=79, detail=LONG))
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 0, 20)
        assert agent.tracker is not None
        failed = failed_gpus(agent.tracker.statuses(), UUIDS, QuarantinePolicy())
        final = condition_for(failed)
        assert final is not None and len(failed) == 8 and len(final["message"]) <= MESSAGE_LIMIT
        wait(
            "the condition for all 8",
            lambda: (api.state.condition() or {}).get("message") == final["message"],
        )
        wait("the quarantine", lambda: "n0" in api.state.quarantined() and len(api.state.taints()) == 1)
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 0, 20)
    finally:
        agent.stop()
    again = start(plugin_dir, config, "{}")
    try:
        # every GPU the earlier run quarantined is unhealthy again, none comes back healthy
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 0, 20)
        time.sleep(0.3)
        assert kubelet.allocatable(GPU) == 0 and again.tracker is not None
        assert not any(again.tracker.is_healthy(i) for i in range(8))
        with FakeApi.lock:
            assert keys(api) == ["team", KEY]
    finally:
        again.stop()


def test_a_reload_moves_the_taint_to_a_new_key_and_turning_off_removes_taint_and_lease_place(
    kubelet: KubeletDouble, plugin_dir: Path, api: type[FakeApi]
) -> None:
    config = plugin_dir.parent / f"{plugin_dir.name}-q.yaml"
    agent = start(plugin_dir, config, "{}")
    try:
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20)
        agent.apply_event(GpuEvent(gpu=3, kind=GpuEventKind.XID, xid=79))
        wait("the quarantine", lambda: keys(api) == ["team", KEY] and "n0" in api.state.quarantined())

        config.write_text(
            f"version: v1\nkubegpu:\n  node: {{labels: false}}\n  quarantine: {{taintKey: {NEW_KEY}}}\n"
        )
        assert agent.reload()
        wait("the taint under the new key only", lambda: keys(api) == ["team", NEW_KEY])
        with FakeApi.lock:
            assert "n0" in api.state.quarantined() and api.state.condition() is not None

        config.write_text("version: v1\nkubegpu:\n  node: {labels: false}\n  quarantine: {enabled: false}\n")
        assert agent.reload()
        wait("no taint of kubegpu's", lambda: keys(api) == ["team"])
        wait("the Lease place given back", lambda: api.state.quarantined() == {})
        with FakeApi.lock:
            assert api.state.condition() is None
    finally:
        agent.stop()
