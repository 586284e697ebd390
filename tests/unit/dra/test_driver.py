"""NodePrepareResources / NodeUnprepareResources decisions, per claim, with the checkpoint on disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kubegpu.dra.checkpoint import CdiStore, Checkpoint
from kubegpu.dra.driver import ClaimRef, DraDriver
from kubegpu.errors import ApiServerError
from kubegpu.model.dra import CDI_KIND, DRIVER_NAME, dra_devices
from kubegpu.sources.spec import load_node

NODE = "gpu-node-1"


class Claims:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.reads = 0
        self.fail = False

    def add(
        self, name: str, uid: str, results: list[dict[str, str]] | None, namespace: str = "default"
    ) -> ClaimRef:
        status: dict[str, Any] = {}
        if results is not None:
            status["allocation"] = {"devices": {"results": results}}
        self.objects[(namespace, name)] = {
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "status": status,
        }
        return ClaimRef(namespace=namespace, uid=uid, name=name)

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        if self.fail:
            raise ApiServerError("https://api: GET ...: not reachable: refused")
        return self.objects.get((namespace, name))


def result(device: str, request: str = "gpus", pool: str = NODE, driver: str = DRIVER_NAME) -> dict[str, str]:
    return {"request": request, "driver": driver, "pool": pool, "device": device}


@pytest.fixture
def claims() -> Claims:
    return Claims()


def make(tmp_path: Path, claims: Claims) -> DraDriver:
    node = load_node("builtin:seed-8gpu")
    return DraDriver(
        node_name=NODE,
        devices=dra_devices(node),
        claims=claims,
        checkpoint=Checkpoint(tmp_path / "plugin" / "checkpoint.json"),
        cdi=CdiStore(tmp_path / "cdi", kind=CDI_KIND),
    )


def spec_env(tmp_path: Path, uid: str) -> list[str]:
    doc = json.loads((tmp_path / "cdi" / f"kubegpu.io-gpu_{uid}.json").read_text())
    return [e for d in doc["devices"] for e in d["containerEdits"]["env"]]


def test_prepare_writes_a_cdi_spec_with_the_allocated_uuids(tmp_path: Path, claims: Claims) -> None:
    driver = make(tmp_path, claims)
    ref = claims.add("train", "uid-1", [result("gpu-2"), result("gpu-3")])
    answer = driver.prepare([ref])["uid-1"]
    assert answer.error == ""
    assert [d.device for d in answer.devices] == ["gpu-2", "gpu-3"]
    assert all(d.pool == NODE and d.request_names == ("gpus",) for d in answer.devices)
    assert answer.devices[0].cdi_ids == ("kubegpu.io/gpu=uid-1-dev-gpu-2", "kubegpu.io/gpu=uid-1-gpus")
    assert answer.devices[1].cdi_ids == ("kubegpu.io/gpu=uid-1-dev-gpu-3",)
    node = load_node("builtin:seed-8gpu")
    assert f"NVIDIA_VISIBLE_DEVICES={node.gpus[2].uuid},{node.gpus[3].uuid}" in spec_env(tmp_path, "uid-1")


def test_prepare_is_idempotent_and_survives_a_driver_restart(tmp_path: Path, claims: Claims) -> None:
    ref = claims.add("train", "uid-1", [result("gpu-0")])
    first = make(tmp_path, claims).prepare([ref])["uid-1"]
    (tmp_path / "cdi" / "kubegpu.io-gpu_uid-1.json").unlink()
    claims.objects.clear()  # the claim is gone from the API; a restarted driver must not need it
    again = make(tmp_path, claims).prepare([ref])["uid-1"]
    assert again == first
    assert spec_env(tmp_path, "uid-1")  # rewritten from the checkpoint


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda c: ClaimRef(namespace="default", uid="uid-9", name="gone"), "does not exist"),
        (
            lambda c: (
                c.add("x", "uid-other", [result("gpu-0")])
                and ClaimRef(namespace="default", uid="uid-9", name="x")
            ),
            "was replaced",
        ),
        (lambda c: c.add("x", "uid-9", None), "is not allocated"),
        (lambda c: c.add("x", "uid-9", [result("gpu-0", pool="other-node")]), "pool 'other-node'"),
        (lambda c: c.add("x", "uid-9", [result("gpu-42")]), "device gpu-42 is not published"),
    ],
)
def test_a_claim_that_cannot_be_prepared_gets_its_own_error(
    tmp_path: Path, claims: Claims, setup: Any, message: str
) -> None:
    driver = make(tmp_path, claims)
    bad = setup(claims)
    good = claims.add("fine", "uid-ok", [result("gpu-1")])
    answers = driver.prepare([bad, good])
    assert message in answers["uid-9"].error
    assert "default/" in answers["uid-9"].error
    assert answers["uid-ok"].error == "" and answers["uid-ok"].devices
    assert "uid-9" not in driver.prepared()


def test_api_server_down_is_a_per_claim_error(tmp_path: Path, claims: Claims) -> None:
    driver = make(tmp_path, claims)
    ref = claims.add("x", "uid-1", [result("gpu-0")])
    claims.fail = True
    assert "cannot be read from the API server" in driver.prepare([ref])["uid-1"].error


def test_results_of_other_drivers_are_left_to_them(tmp_path: Path, claims: Claims) -> None:
    driver = make(tmp_path, claims)
    ref = claims.add("x", "uid-1", [result("nic-0", driver="net.example.com"), result("gpu-4")])
    assert [d.device for d in driver.prepare([ref])["uid-1"].devices] == ["gpu-4"]


def test_a_claim_with_no_device_of_ours_succeeds_empty(tmp_path: Path, claims: Claims) -> None:
    driver = make(tmp_path, claims)
    ref = claims.add("x", "uid-1", [result("nic-0", driver="net.example.com")])
    assert driver.prepare([ref])["uid-1"].devices == ()
    assert not (tmp_path / "cdi" / "kubegpu.io-gpu_uid-1.json").exists()


def test_subrequest_results_are_reported_under_the_base_request(tmp_path: Path, claims: Claims) -> None:
    driver = make(tmp_path, claims)
    ref = claims.add("x", "uid-1", [result("gpu-5", request="gpu/h100")])
    assert driver.prepare([ref])["uid-1"].devices[0].request_names == ("gpu",)


def test_unprepare_removes_spec_and_checkpoint_and_unknown_claims_succeed(
    tmp_path: Path, claims: Claims
) -> None:
    driver = make(tmp_path, claims)
    ref = claims.add("x", "uid-1", [result("gpu-0")])
    driver.prepare([ref])
    unknown = ClaimRef(namespace="default", uid="uid-never", name="never")
    assert driver.unprepare([ref, unknown]) == {"uid-1": "", "uid-never": ""}
    assert not (tmp_path / "cdi" / "kubegpu.io-gpu_uid-1.json").exists()
    assert make(tmp_path, claims).prepared() == {}


def test_a_corrupt_checkpoint_is_moved_aside_and_the_driver_starts_empty(
    tmp_path: Path, claims: Claims
) -> None:
    path = tmp_path / "plugin" / "checkpoint.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert make(tmp_path, claims).prepared() == {}
    assert [p.name.startswith("checkpoint.json.corrupt-") for p in path.parent.iterdir()] == [True]


def test_a_device_that_left_the_slice_is_refused_for_new_claims(tmp_path: Path, claims: Claims) -> None:
    driver = make(tmp_path, claims)
    node = load_node("builtin:seed-8gpu")
    driver.set_devices([d for d in dra_devices(node) if d.name != "gpu-3"])
    ref = claims.add("x", "uid-1", [result("gpu-3")])
    assert "failed a health check or was repartitioned" in driver.prepare([ref])["uid-1"].error


def test_a_cdi_directory_that_cannot_be_written_is_a_per_claim_error(tmp_path: Path, claims: Claims) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    node = load_node("builtin:seed-8gpu")
    driver = DraDriver(
        node_name=NODE,
        devices=dra_devices(node),
        claims=claims,
        checkpoint=Checkpoint(tmp_path / "plugin" / "checkpoint.json"),
        cdi=CdiStore(blocker / "cdi", kind=CDI_KIND),
    )
    ref = claims.add("x", "uid-1", [result("gpu-0")])
    other = claims.add("y", "uid-2", [result("nic-0", driver="net.example.com")])  # no spec to write
    answers = driver.prepare([ref, other])
    assert "cannot write its CDI spec" in answers["uid-1"].error
    assert answers["uid-2"].error == ""
    assert "uid-1" not in driver.prepared()
