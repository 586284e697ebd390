"""The whole MIG manager inside the real agent, with real gRPC to kubelet's two APIs (the device plugin
double and the PodResources double) and an in-memory API server: relabel -> pending while a pod holds
a slice -> applied when it ends -> 14 x 1g.10gb at kubelet; and a restarted agent serves the layout it
applied (state file) before anything else, without applying it again."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from kubegpu.agent import Agent, AgentOptions
from kubegpu.sources.spec import load_node
from tests.integration.kubelet_double import KubeletDouble
from tests.integration.podresources_double import FakeContainer, FakePod, PodResourcesDouble

pytestmark = pytest.mark.integration

STATE = "nvidia.com/mig.config.state"
SPEC = load_node("builtin:h100-mig-mixed")


class FakeApi:
    """The node's labels and events, shared by every client the agent makes."""

    labels: ClassVar[dict[str, str]] = {}
    events: ClassVar[list[dict[str, Any]]] = []
    lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, *, kubeconfig: str | None = None, **_: Any) -> None:
        pass

    def get_node(self, name: str, *, quick: bool = False) -> dict[str, Any]:
        with self.lock:
            return {"metadata": {"name": name, "uid": "u", "labels": copy.deepcopy(self.labels)}}

    def apply_node(self, name: str, patch: dict[str, Any], **_: Any) -> None:
        with self.lock:
            self.labels.update(patch["metadata"]["labels"])

    def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        with self.lock:
            self.events.append(event)


def wait(what: str, probe: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[FakeApi]]:
    FakeApi.labels, FakeApi.events = {}, []
    monkeypatch.setattr("kubegpu.kubeapi.KubeApi", FakeApi)
    yield FakeApi


def test_relabel_waits_for_the_pod_applies_and_survives_a_restart(
    kubelet: KubeletDouble, plugin_dir: Path, api: type[FakeApi]
) -> None:
    pods = PodResourcesDouble(plugin_dir.parent / f"{plugin_dir.name}-podres" / "kubelet.sock").start()
    config = plugin_dir.parent / f"{plugin_dir.name}-mig.yaml"
    state = plugin_dir.parent / f"{plugin_dir.name}-state" / "mig.json"
    config.write_text(
        "version: v1\nflags: {migStrategy: mixed}\n"
        f"kubegpu:\n  node: {{labels: false}}\n  quarantine: {{enabled: false}}\n"
        f"  migManager: {{enabled: true, recheckSeconds: 0.1, stateFile: '{state}'}}\n"
    )
    options = AgentOptions(
        node_spec="builtin:h100-mig-mixed",
        device_plugin_dir=plugin_dir,
        config_file=config,
        node_name="n0",
        cli_overrides={"pod_resources_socket": str(pods.socket_path)},
    )
    held = str(SPEC.gpus[0].mig_instances[3].uuid)  # a 1g.10gb slice of GPU 0
    pods.pods = [
        FakePod(
            namespace="ml",
            name="trainer",
            containers=(FakeContainer(name="c", devices={"nvidia.com/mig-1g.10gb": (held,)}),),
        )
    ]
    agent = Agent(options)
    agent.start()
    try:
        assert kubelet.wait_for(lambda: kubelet.allocatable("nvidia.com/mig-3g.40gb") == 1, 20)
        with api.lock:
            api.labels["nvidia.com/mig.config"] = "all-1g.10gb"
        wait("state pending", lambda: api.labels.get(STATE) == "pending")
        time.sleep(0.5)
        assert api.labels[STATE] == "pending" and kubelet.allocatable("nvidia.com/mig-3g.40gb") == 1
        assert [e["reason"] for e in api.events] == ["MigConfigPending"]
        assert "ml/trainer" in api.events[0]["message"]

        pods.pods = []  # the pod ended
        wait("state success", lambda: api.labels.get(STATE) == "success")
        assert kubelet.wait_for(
            lambda: (
                kubelet.allocatable("nvidia.com/mig-1g.10gb") == 14
                and kubelet.allocatable("nvidia.com/mig-3g.40gb") == 0
                and kubelet.allocatable("nvidia.com/gpu") == 0
            ),
            20,
        )
        applied = kubelet.healthy("nvidia.com/mig-1g.10gb")
        assert [e["reason"] for e in api.events] == ["MigConfigPending", "MigConfigApplied"]
    finally:
        agent.stop()

    again = Agent(options)
    again.start()  # the layout comes back from the state file before anything is served
    try:
        assert again.node is not None and sum(len(g.mig_instances) for g in again.node.gpus) == 14
        assert kubelet.wait_for(lambda: kubelet.healthy("nvidia.com/mig-1g.10gb") == applied, 20)
        time.sleep(0.5)  # a few passes of the manager: nothing to apply, no second event
        assert api.labels[STATE] == "success"
        assert [e["reason"] for e in api.events] == ["MigConfigPending", "MigConfigApplied"]
    finally:
        again.stop()
        pods.stop()
        config.unlink(missing_ok=True)
