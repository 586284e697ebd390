"""kubegpu.fractional over the real device-plugin socket: kubelet (the double) admits shares with
kubegpu.io/gpu-milli tokens of any GPU, the agent hands each container the GPU its pod's
kubegpu.io/gpu-assignment names, whole GPUs stay off shared GPUs, and a restarted agent remembers."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from kubegpu.agent import Agent, AgentOptions
from kubegpu.deviceplugin.api import v1beta1_pb2 as pb
from kubegpu.sources.spec import load_node
from tests.integration.kubelet_double import AdmissionError, Container, KubeletDouble, Pod

pytestmark = pytest.mark.integration

MILLI = "kubegpu.io/gpu-milli"
GPU = "nvidia.com/gpu"
SEED = load_node("builtin:seed-8gpu")
UUIDS = [g.uuid for g in SEED.gpus]


class FakeApi:
    """The node's pods and metadata, shared by every client the agent makes."""

    pods: ClassVar[list[dict[str, Any]]] = []
    applied: ClassVar[list[dict[str, Any]]] = []
    lists: ClassVar[int] = 0
    lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, *, kubeconfig: str | None = None, **_: Any) -> None:
        pass

    def get_node(self, name: str, *, quick: bool = False) -> dict[str, Any]:
        return {"metadata": {"name": name, "uid": "u"}}

    def apply_node(self, name: str, patch: dict[str, Any], **_: Any) -> None:
        with self.lock:
            self.applied.append(patch)

    def list_objects(
        self, path: str, *, field_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        assert path == "/api/v1/pods" and field_selector == "spec.nodeName=n0"
        with self.lock:
            type(self).lists += 1
            return json.loads(json.dumps(self.pods)), "1"


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[FakeApi]]:
    FakeApi.pods, FakeApi.applied, FakeApi.lists = [], [], 0
    monkeypatch.setattr("kubegpu.kubeapi.KubeApi", FakeApi)
    yield FakeApi


def bound(
    name: str, gpu: int, milli: int, second: int, containers: tuple[str, ...] = ("main",)
) -> dict[str, Any]:
    doc = {"gpus": [gpu], "milli": milli * len(containers), "node": "n0", "uuids": [UUIDS[gpu]], "version": 1}
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": name,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"kubegpu.io/gpu-assignment": json.dumps(doc)},
        },
        "spec": {
            "containers": [{"name": c, "resources": {"limits": {MILLI: str(milli)}}} for c in containers]
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "lastTransitionTime": f"2026-01-01T00:00:{second:02d}Z"}],
        },
    }


def share(uid: str, milli: int, containers: tuple[str, ...] = ("main",)) -> Pod:
    return Pod(uid=uid, containers=[Container(name=c, requests={MILLI: milli}) for c in containers])


def options(plugin_dir: Path, tmp_path: Path) -> AgentOptions:
    config = tmp_path / "agent.yaml"
    config.write_text("version: v1\nkubegpu:\n  fractional: true\n  quarantine: {enabled: false}\n")
    return AgentOptions(
        node_spec="builtin:seed-8gpu", device_plugin_dir=plugin_dir, config_file=config, node_name="n0"
    )


def test_shares_reach_the_gpu_the_extender_chose_and_survive_a_restart(
    kubelet: KubeletDouble, plugin_dir: Path, tmp_path: Path, api: type[FakeApi]
) -> None:
    api.pods = [bound("a", 3, 500, 1), bound("b", 3, 500, 2), bound("c", 6, 500, 3)]
    agent = Agent(options(plugin_dir, tmp_path))
    agent.start()
    try:
        assert kubelet.wait_for(
            lambda: kubelet.allocatable(MILLI) == 8000 and kubelet.allocatable(GPU) == 8, 20
        )
        got = {uid: kubelet.admit_pod(share(uid, 500))["main"].envs for uid in ("a", "b")}
        assert got["a"]["NVIDIA_VISIBLE_DEVICES"] == got["b"]["NVIDIA_VISIBLE_DEVICES"] == UUIDS[3]
        assert got["a"]["KUBEGPU_GPU_MILLI"] == "500"
        asked = kubelet.calls_named("GetPreferredAllocation")[0].request.container_requests[0]
        assert len(asked.available_deviceIDs) == 8000 and asked.allocation_size == 500
        # the node's UUIDs are published with the labels
        assert any(
            p["metadata"].get("annotations", {}).get("kubegpu.io/gpu-uuids") == ",".join(UUIDS)
            for p in api.applied
        )
    finally:
        agent.stop()

    again = Agent(options(plugin_dir, tmp_path))  # same plugin dir: the ledger is on disk
    again.start()
    try:
        assert kubelet.wait_for(lambda: kubelet.allocatable(MILLI) == 8000, 20)
        # a and b were handed out before the restart: the next 500 is c's, on GPU 6
        assert kubelet.admit_pod(share("c", 500))["main"].envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[6]
        # whole GPUs: kubelet offers all free GPUs; the preferred set leaves out 3 and 6 (shares)
        whole = kubelet.admit_pod(Pod(uid="w", containers=[Container(name="main", requests={GPU: 6})]))
        visible = whole["main"].envs["NVIDIA_VISIBLE_DEVICES"].split(",")
        assert set(visible) == {UUIDS[i] for i in (0, 1, 2, 4, 5, 7)}
        with pytest.raises(AdmissionError, match="no pod on node n0 waits for a share of 250"):
            kubelet.admit_pod(share("stray", 250))
    finally:
        again.stop()


def test_a_pods_two_containers_share_its_gpu(
    kubelet: KubeletDouble, plugin_dir: Path, tmp_path: Path, api: type[FakeApi]
) -> None:
    api.pods = [bound("pair", 5, 300, 1, containers=("x", "y")), bound("later", 1, 300, 9)]
    agent = Agent(options(plugin_dir, tmp_path))
    agent.start()
    try:
        assert kubelet.wait_for(lambda: kubelet.allocatable(MILLI) == 8000, 20)
        pair = kubelet.admit_pod(share("pair", 300, ("x", "y")))
        assert {pair[c].envs["NVIDIA_VISIBLE_DEVICES"] for c in ("x", "y")} == {UUIDS[5]}
        assert kubelet.admit_pod(share("later", 300))["main"].envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]
        ledger = json.loads((plugin_dir / "kubegpu-state" / "shares.json").read_text())
        assert [(h["pod"], h["container"], h["uuid"]) for h in ledger["handouts"]] == [
            ("pair", "x", UUIDS[5]),
            ("pair", "y", UUIDS[5]),
            ("later", "main", UUIDS[1]),
        ]
    finally:
        agent.stop()


def test_list_and_watch_carries_8000_share_devices(
    kubelet: KubeletDouble, plugin_dir: Path, tmp_path: Path, api: type[FakeApi]
) -> None:
    agent = Agent(options(plugin_dir, tmp_path))
    agent.start()
    try:
        assert kubelet.wait_for(lambda: kubelet.allocatable(MILLI) == 8000, 20)
        size = pb.ListAndWatchResponse(
            devices=[pb.Device(ID=f"{u}::{i}", health="Healthy") for u in UUIDS for i in range(1000)]
        ).ByteSize()
        assert size < 4 * 2**20, "under gRPC's default 4 MiB receive limit (kubelet's client)"
    finally:
        agent.stop()


def test_a_gpu_is_never_handed_out_past_1000_whatever_the_annotations_say(
    kubelet: KubeletDouble, plugin_dir: Path, tmp_path: Path, api: type[FakeApi]
) -> None:
    # the extender (or a forged annotation) put three half-GPU shares on GPU 3
    api.pods = [bound("a", 3, 500, 1), bound("b", 3, 500, 2), bound("c", 3, 500, 3)]
    agent = Agent(options(plugin_dir, tmp_path))
    agent.start()
    try:
        assert kubelet.wait_for(lambda: kubelet.allocatable(MILLI) == 8000, 20)
        for uid in ("a", "b"):
            assert kubelet.admit_pod(share(uid, 500))["main"].envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[3]
            with FakeApi.lock:
                next(p for p in api.pods if p["metadata"]["uid"] == uid)["status"]["phase"] = "Running"
        with pytest.raises(AdmissionError) as err:
            kubelet.admit_pod(share("c", 500))
        text = str(err.value)
        assert "ml/c" in text and "GPU 3" in text and "1000 of 1000" in text and "ml/a 500" in text
        ledger = json.loads((plugin_dir / "kubegpu-state" / "shares.json").read_text())
        assert [(h["pod"], h["uuid"]) for h in ledger["handouts"]] == [("a", UUIDS[3]), ("b", UUIDS[3])]
    finally:
        agent.stop()
