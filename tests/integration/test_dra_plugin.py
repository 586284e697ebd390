"""The DRA kubelet plugin over real gRPC on unix sockets, called the way kubelet calls it."""

from __future__ import annotations

import json
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from kubegpu.dra.api import dra_v1_pb2 as v1
from kubegpu.dra.api import dra_v1_pb2_grpc as v1_grpc
from kubegpu.dra.api import dra_v1beta1_pb2 as v1beta1
from kubegpu.dra.api import dra_v1beta1_pb2_grpc as v1beta1_grpc
from kubegpu.dra.api import health_v1_pb2 as health
from kubegpu.dra.api import health_v1_pb2_grpc as health_grpc
from kubegpu.dra.api import registration_v1_pb2 as reg
from kubegpu.dra.api import registration_v1_pb2_grpc as reg_grpc
from kubegpu.dra.checkpoint import CdiStore, Checkpoint
from kubegpu.dra.driver import DraDriver
from kubegpu.dra.server import DeviceHealth, DraServer
from kubegpu.model.dra import CDI_KIND, DRIVER_NAME, dra_devices
from kubegpu.sources.spec import load_node

pytestmark = pytest.mark.integration
NODE = "node-a"


class Claims:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((namespace, name))


@pytest.fixture
def claims() -> Claims:
    return Claims()


@pytest.fixture
def root() -> Iterator[Path]:
    """Unix socket paths hold 107 bytes; pytest's tmp_path can be longer than that with our socket names."""
    path = Path(tempfile.mkdtemp(prefix="kgdra-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def new_server(root: Path, claims: Claims, health_feed: BlockingFeed | None = None) -> DraServer:
    node = load_node("builtin:seed-8gpu")
    driver = DraDriver(
        node_name=NODE,
        devices=dra_devices(node),
        claims=claims,
        checkpoint=Checkpoint(root / "plugins" / DRIVER_NAME / "checkpoint.json"),
        cdi=CdiStore(root / "cdi", kind=CDI_KIND),
    )
    return DraServer(
        driver,
        plugin_dir=root / "plugins" / DRIVER_NAME,
        registry_dir=root / "plugins_registry",
        driver_name=DRIVER_NAME,
        health=health_feed,
    )


@pytest.fixture
def server(root: Path, claims: Claims) -> Iterator[DraServer]:
    s = new_server(root, claims)
    s.start()
    yield s
    s.stop()


class BlockingFeed:
    """A health feed with no changes: a wait ends only on ``wake()`` (its timeout is ignored, as if
    the handler's refresh period were long), and counts who is waiting."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._woken = False
        self.waiting = 0

    def health(self) -> tuple[int, Sequence[DeviceHealth]]:
        return 1, [DeviceHealth(device="gpu-0", healthy=True)]

    def wait_for_change(self, seen: int, timeout: float) -> int:
        with self._cond:
            self.waiting += 1
            try:
                self._cond.wait_for(lambda: self._woken, timeout=600)
            finally:
                self.waiting -= 1
        return seen

    def wake(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify_all()


def poll(what: str, probe: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}", pytrace=False)
        time.sleep(0.02)


def channel(path: Path) -> grpc.Channel:
    return grpc.insecure_channel(f"unix://{path}")


def test_kubelet_finds_a_dra_plugin_and_its_endpoint(server: DraServer, root: Path) -> None:
    sock = root / "plugins_registry" / f"{DRIVER_NAME}-reg.sock"
    assert stat.S_ISSOCK(sock.stat().st_mode)
    with channel(sock) as ch:
        info = reg_grpc.RegistrationStub(ch).GetInfo(reg.InfoRequest(), timeout=1)
        assert info.type == "DRAPlugin"
        assert info.name == DRIVER_NAME
        assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
        assert Path(info.endpoint).is_absolute() and stat.S_ISSOCK(Path(info.endpoint).stat().st_mode)
        reg_grpc.RegistrationStub(ch).NotifyRegistrationStatus(
            reg.RegistrationStatus(plugin_registered=True), timeout=5
        )
    assert server.state.registered.is_set()


def test_a_refused_registration_is_answered_with_an_error(server: DraServer) -> None:
    with channel(server.registration_socket) as ch, pytest.raises(grpc.RpcError) as err:
        reg_grpc.RegistrationStub(ch).NotifyRegistrationStatus(
            reg.RegistrationStatus(plugin_registered=False, error="version mismatch"), timeout=5
        )
    assert "version mismatch" in str(err.value.details())
    assert server.state.error == "version mismatch"
    assert not server.state.registered.is_set()


@pytest.mark.parametrize(("pb", "stub"), [(v1, v1_grpc.DRAPluginStub), (v1beta1, v1beta1_grpc.DRAPluginStub)])
def test_prepare_and_unprepare_over_both_api_versions(
    server: DraServer, root: Path, claims: Claims, pb: Any, stub: Any
) -> None:
    claims.objects[("ml", "train")] = {
        "metadata": {"uid": "uid-1"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpus", "driver": DRIVER_NAME, "pool": NODE, "device": "gpu-4"},
                        {"request": "gpus", "driver": DRIVER_NAME, "pool": NODE, "device": "gpu-5"},
                    ]
                }
            }
        },
    }
    ok = pb.Claim(namespace="ml", uid="uid-1", name="train")
    missing = pb.Claim(namespace="ml", uid="uid-2", name="gone")
    with channel(server.socket) as ch:
        answer = stub(ch).NodePrepareResources(
            pb.NodePrepareResourcesRequest(claims=[ok, missing]), timeout=45
        )
        assert set(answer.claims) == {"uid-1", "uid-2"}
        assert "does not exist" in answer.claims["uid-2"].error
        got = answer.claims["uid-1"]
        assert got.error == ""
        assert [(d.pool_name, d.device_name, list(d.request_names)) for d in got.devices] == [
            (NODE, "gpu-4", ["gpus"]),
            (NODE, "gpu-5", ["gpus"]),
        ]
        spec = json.loads((root / "cdi" / "kubegpu.io-gpu_uid-1.json").read_text())
        edits = {f"{spec['kind']}={d['name']}": d["containerEdits"] for d in spec["devices"]}
        ids = [list(d.cdi_device_ids) for d in got.devices]
        assert all(i in edits for one in ids for i in one)  # every ID names a device of the spec
        assert ids[0][0] != ids[1][0]  # each device its own first ID: kubelet reports health by it
        node = load_node("builtin:seed-8gpu")
        env = [e for one in ids for i in one for e in edits[i].get("env", [])]
        assert env.count(f"NVIDIA_VISIBLE_DEVICES={node.gpus[4].uuid},{node.gpus[5].uuid}") == 1
        assert f"KUBEGPU_DEVICE_GPU_5={node.gpus[5].uuid}" in env

        again = stub(ch).NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[ok]), timeout=45)
        assert again.claims["uid-1"] == got

        done = stub(ch).NodeUnprepareResources(
            pb.NodeUnprepareResourcesRequest(claims=[ok, missing]), timeout=45
        )
        assert {uid: c.error for uid, c in done.claims.items()} == {"uid-1": "", "uid-2": ""}
    assert not (root / "cdi" / "kubegpu.io-gpu_uid-1.json").exists()


def test_stop_removes_both_sockets(root: Path, server: DraServer) -> None:
    server.stop()
    assert not server.socket.exists()
    assert not server.registration_socket.exists()


def test_a_stale_socket_of_an_earlier_run_is_replaced(root: Path, claims: Claims, server: DraServer) -> None:
    server.stop()
    server.socket.parent.mkdir(parents=True, exist_ok=True)
    server.socket.write_text("stale")
    server.start()
    with channel(server.registration_socket) as ch:
        assert reg_grpc.RegistrationStub(ch).GetInfo(reg.InfoRequest(), timeout=1).name == DRIVER_NAME


def test_stop_ends_the_health_stream_kubelet_holds_open(root: Path, claims: Claims) -> None:
    """kubelet keeps a DRAResourceHealth stream open for as long as the driver runs; on SIGTERM the
    driver stops its server, and the process can only exit once the stream's handler has returned."""
    feed = BlockingFeed()
    s = new_server(root, claims, feed)
    s.start()
    try:
        with channel(s.socket) as ch:
            stream = health_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
                health.NodeWatchResourcesRequest(), timeout=30
            )
            assert [d.device.device_name for d in next(stream).devices] == ["gpu-0"]
            poll("the stream's handler to wait for a change", lambda: feed.waiting == 1)
            s.stop()
            poll("the stream's handler to return after stop()", lambda: feed.waiting == 0)
    finally:
        feed.wake()  # a failing run must not leave the handler thread blocking the interpreter's exit
        s.stop()
