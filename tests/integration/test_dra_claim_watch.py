"""The DRA driver learns its pool's allocations from one list and a watch, never a cluster-wide LIST
on a timer (issue 57, item 3): a stub API server counts the requests while the slice is republished
many times, and the slice's order follows the watched allocations."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubegpu.dra.service import DraOptions, DraService, load_node
from kubegpu.kubeapi import KubeApi
from kubegpu.model.dra import DRIVER_NAME
from tests.integration.test_dra_service import NoClaims
from tests.stub_apiserver import StubApiServer, kubeconfig
from tests.unit.dra.fakes import Api

pytestmark = pytest.mark.integration

CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"


def claim(uid: str, pool: str, *devices: str, driver: str = DRIVER_NAME) -> dict[str, Any]:
    results = [{"request": "g", "driver": driver, "pool": pool, "device": d} for d in devices]
    return {
        "metadata": {"name": uid, "namespace": "default", "uid": uid},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def wait(what: str, probe: Any, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}", pytrace=False)
        time.sleep(0.05)


def first_published(api: Api) -> str | None:
    devices = [d["name"] for s in api.slices.values() for d in s["spec"]["devices"]]
    return devices[0] if devices else None


@pytest.fixture
def stub() -> Iterator[StubApiServer]:
    server = StubApiServer()
    server.serve(
        CLAIMS,
        [
            *(claim(f"other-{k}", f"node-{k}", "gpu-0", "gpu-1") for k in range(40)),
            claim("mine-5", "n1", "gpu-5"),
            claim("not-ours", "n1", "gpu-6", driver="other.example.com"),
        ],
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture
def service(tmp_path: Path, stub: StubApiServer) -> Iterator[tuple[DraService, Api]]:
    short = Path(tempfile.mkdtemp(prefix="kgcw-", dir="/tmp"))
    options = DraOptions(
        node_name="n1", node_spec="builtin:seed-8gpu", kubelet_dir=short / "kubelet",
        cdi_dir=tmp_path / "cdi", resync_s=0.05,
    )  # fmt: skip
    allocations = KubeApi(kubeconfig=str(kubeconfig(tmp_path / "kubeconfig", stub.url)), sleep=lambda s: None)
    slices = Api()
    svc = DraService(
        options, node=load_node(options).node, driver_version=None, api=slices, claims=NoClaims(),
        allocations=allocations,
    )  # fmt: skip
    svc.start()
    yield svc, slices
    svc.stop()
    shutil.rmtree(short, ignore_errors=True)


def test_the_driver_lists_claims_once_then_follows_a_watch_never_a_list_per_resync(
    service: tuple[DraService, Api], stub: StubApiServer
) -> None:
    svc, slices = service
    # gpu-5 is held, so its NVLink group (gpu-4..7, fewer free) comes first
    wait("the listed allocation to order the slice", lambda: first_published(slices) == "gpu-4")
    stub.push(CLAIMS, "MODIFIED", claim("mine-5", "n1"))  # deallocated
    wait("the freed GPU to reorder the slice", lambda: first_published(slices) == "gpu-0")
    stub.push(CLAIMS, "ADDED", claim("mine-6", "n1", "gpu-6"))
    wait("the new allocation to reorder the slice", lambda: first_published(slices) == "gpu-4")
    stub.push(CLAIMS, "DELETED", claim("mine-6", "n1", "gpu-6"))
    wait("the deleted claim to free its GPU", lambda: first_published(slices) == "gpu-0")
    time.sleep(1.0)  # 20 resync periods of 50 ms: the old driver made a cluster-wide LIST in each
    assert len(stub.lists(CLAIMS)) == 1, [r.query for r in stub.lists(CLAIMS)]
    assert stub.lists(CLAIMS)[0].query.get("limit") == "500"  # paginated
    assert stub.watches(CLAIMS)  # the changes came from a watch
    watch = svc._claim_watch
    assert watch is not None and watch.claims() == 0  # only this pool's claims are ever kept
    stub.push(CLAIMS, "ADDED", claim("mine-7", "n1", "gpu-7", "gpu-3"))
    wait("the claim to be kept", lambda: watch.allocated() == {"gpu-7", "gpu-3"} and watch.claims() == 1)


def test_a_watch_the_server_expires_is_followed_by_one_fresh_list(
    service: tuple[DraService, Api], stub: StubApiServer
) -> None:
    _, slices = service
    wait("the first list", lambda: len(stub.lists(CLAIMS)) == 1 and len(stub.watches(CLAIMS)) == 1)
    stub.expire(CLAIMS)  # history gone: the watch from the old version answers 410
    stub.end_watches()
    wait("a fresh list after the 410", lambda: len(stub.lists(CLAIMS)) == 2)
    stub.push(CLAIMS, "ADDED", {"metadata": {"uid": "hostile"}, "status": ["not", "an", "object"]})
    stub.push(CLAIMS, "MODIFIED", claim("mine-5", "n1"))  # a claim that cannot be read is left out alone
    wait("the watch after the relist", lambda: first_published(slices) == "gpu-0")
    assert len(stub.lists(CLAIMS)) == 2
