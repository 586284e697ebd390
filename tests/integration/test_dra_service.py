"""The DRA driver process's parts together: a GPU that fails its health check leaves the ResourceSlice
within seconds and comes back on recovery (threads, files and gRPC sockets are real; the API server is
a stand-in that stores slices)."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from kubegpu.dra.api import health_v1_pb2 as health
from kubegpu.dra.api import health_v1_pb2_grpc as health_grpc
from kubegpu.dra.api import registration_v1_pb2 as reg
from kubegpu.dra.api import registration_v1_pb2_grpc as reg_grpc
from kubegpu.dra.driver import ClaimRef
from kubegpu.dra.service import DraOptions, DraService, load_node
from kubegpu.model.dra import DRIVER_NAME
from tests.unit.dra.fakes import Api

pytestmark = pytest.mark.integration


class NoClaims:
    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return {
            "metadata": {"uid": "uid-1"},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [{"request": "g", "driver": DRIVER_NAME, "pool": "n1", "device": "gpu-2"}]
                    }
                }
            },
        }


def published(api: Api) -> list[str]:
    return [d["name"] for s in api.slices.values() for d in s["spec"]["devices"]]


def wait(what: str, probe: Any, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}", pytrace=False)
        time.sleep(0.05)


@pytest.fixture
def faults(tmp_path: Path) -> Path:
    path = tmp_path / "faults.jsonl"
    path.write_text("")
    return path


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Unix socket paths hold 107 bytes; pytest's tmp_path can be longer than that with our socket names."""
    path = Path(tempfile.mkdtemp(prefix="kgdra-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def service(tmp_path: Path, short_dir: Path, faults: Path) -> Iterator[tuple[DraService, Api]]:
    options = DraOptions(
        node_name="n1",
        node_spec="builtin:seed-8gpu",
        kubelet_dir=short_dir / "kubelet",
        cdi_dir=tmp_path / "cdi",
        fault_file=faults,
        resync_s=30,
        simulated_nvidia_smi=True,
    )
    api = Api()
    svc = DraService(options, node=load_node(options).node, driver_version=None, api=api, claims=NoClaims())
    svc.start()
    yield svc, api
    svc.stop()


def test_an_xid_79_gpu_leaves_the_slice_and_returns_when_healthy(
    service: tuple[DraService, Api], faults: Path
) -> None:
    svc, api = service
    wait("the first slice", lambda: len(published(api)) == 8)
    with faults.open("a") as f:
        f.write('{"gpu": 2, "xid": 79}\n')
    wait("gpu-2 to leave the slice", lambda: "gpu-2" not in published(api))
    assert len(published(api)) == 7
    ref = ClaimRef(namespace="default", uid="uid-1", name="c")
    assert "not published" in svc.driver.prepare([ref])["uid-1"].error
    with faults.open("a") as f:
        f.write('{"gpu": 2, "healthy": true}\n')
    wait("gpu-2 back in the slice", lambda: "gpu-2" in published(api))


def test_the_simulated_nvidia_smi_is_mounted_by_every_claims_spec(service: tuple[DraService, Api]) -> None:
    svc, _ = service
    ref = ClaimRef(namespace="default", uid="uid-1", name="c")
    prepared = svc.driver.prepare([ref])["uid-1"]
    assert prepared.error == ""
    spec = svc.driver.prepared()["uid-1"].cdi_spec
    assert spec is not None
    mounts = spec["devices"][0]["containerEdits"]["mounts"]
    assert {m["containerPath"] for m in mounts} == {"/usr/bin/nvidia-smi", "/bin/nvidia-smi"}
    assert all(Path(m["hostPath"]).is_file() for m in mounts)


def test_kubelet_sees_per_device_health_on_the_dra_resource_health_stream(
    service: tuple[DraService, Api], faults: Path
) -> None:
    svc, _ = service
    with grpc.insecure_channel(f"unix://{svc.server.registration_socket}") as ch:
        info = reg_grpc.RegistrationStub(ch).GetInfo(reg.InfoRequest(), timeout=2)
    assert "v1.DRAResourceHealth" in info.supported_versions
    assert list(info.supported_versions)[:2] == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    with grpc.insecure_channel(f"unix://{svc.server.socket}") as ch:
        stream = health_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
            health.NodeWatchResourcesRequest(), timeout=20
        )
        first = next(stream)
        assert len(first.devices) == 8
        assert {d.health for d in first.devices} == {health.HEALTHY}
        assert {d.device.pool_name for d in first.devices} == {"n1"}
        with faults.open("a") as f:
            f.write('{"gpu": 2, "xid": 79}\n')
        after = next(stream)
        by_name = {d.device.device_name: d for d in after.devices}
        assert by_name["gpu-2"].health == health.UNHEALTHY
        assert "79" in by_name["gpu-2"].message
        assert by_name["gpu-3"].health == health.HEALTHY
        stream.cancel()
