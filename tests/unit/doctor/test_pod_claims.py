"""pod.claims: a pod pending on a ResourceClaim gets the first reason that holds, with the fix."""

from __future__ import annotations

from typing import Any

from kubegpu.doctor import RecordedCluster, Status, pod_report
from kubegpu.doctor.chain import Finding
from kubegpu.model.dra import device_classes, dra_devices, resource_slices
from kubegpu.sources.spec import load_node
from tests.unit.doctor.apiobjects import event, pending_pod

NS = "ml"


def claim(
    name: str, count: int, *, clique: bool = False, device_class: str = "gpu.kubegpu.io"
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "devices": {
            "requests": [{"name": "gpus", "exactly": {"deviceClassName": device_class, "count": count}}]
        }
    }
    if clique:
        spec["devices"]["constraints"] = [
            {"requests": ["gpus"], "matchAttribute": "gpu.kubegpu.io/nvlinkClique"}
        ]
    return {"kind": "ResourceClaim", "metadata": {"name": name, "namespace": NS}, "spec": spec, "status": {}}


def allocate(c: dict[str, Any], node: str, devices: list[str]) -> dict[str, Any]:
    c["status"]["allocation"] = {
        "devices": {
            "results": [
                {"request": "gpus", "driver": "gpu.kubegpu.io", "pool": node, "device": d} for d in devices
            ]
        }
    }
    return c


def claim_pod(cluster: RecordedCluster, claim_name: str) -> None:
    cluster.pods.append(
        pending_pod(
            NS,
            "train",
            [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "gpus"}]}}],
            spec={"resourceClaims": [{"name": "gpus", "resourceClaimName": claim_name}]},
        )
    )


def publish(cluster: RecordedCluster, node: str = "gpu-node-1") -> None:
    devices = dra_devices(load_node("builtin:seed-8gpu"))
    cluster.dra += [
        {"kind": "ResourceSlice", **s}
        for s in resource_slices(node_name=node, node_uid=None, devices=devices, generation=1)
    ]


def classes(cluster: RecordedCluster) -> None:
    cluster.dra += [{"kind": "DeviceClass", **c} for c in device_classes()]


def finding(cluster: RecordedCluster) -> Finding:
    return pod_report(lambda: cluster, NS, "train").by_id("pod.claims")


def test_a_pod_without_claims_is_fine(cluster: RecordedCluster) -> None:
    cluster.pods.append(pending_pod(NS, "train", [{"name": "main", "image": "cuda"}]))
    assert finding(cluster).status is Status.OK


def test_a_missing_claim(cluster: RecordedCluster) -> None:
    claim_pod(cluster, "pair")
    f = finding(cluster)
    assert f.status is Status.FAIL and "ResourceClaim ml/pair" in f.summary and "does not exist" in f.summary


def test_no_such_device_class_suggests_installing_kubegpus(cluster: RecordedCluster) -> None:
    claim_pod(cluster, "pair")
    cluster.dra.append(claim("pair", 2))
    f = finding(cluster)
    assert f.status is Status.FAIL and "DeviceClass 'gpu.kubegpu.io', which does not exist" in f.summary
    assert "dra.enabled=true" in f.fix


def test_no_slices_means_the_driver_is_not_there(cluster: RecordedCluster) -> None:
    claim_pod(cluster, "pair")
    classes(cluster)
    cluster.dra.append(claim("pair", 2))
    f = finding(cluster)
    assert f.status is Status.FAIL and "no node publishes devices of driver gpu.kubegpu.io" in f.summary


def test_not_enough_free_devices_anywhere(cluster: RecordedCluster) -> None:
    claim_pod(cluster, "big")
    classes(cluster)
    publish(cluster)
    cluster.dra.append(allocate(claim("other", 4), "gpu-node-1", ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]))
    cluster.dra.append(claim("big", 5))
    f = finding(cluster)
    assert f.status is Status.FAIL
    assert "needs 5 device(s)" in f.summary and "most: 4 on gpu-node-1" in f.summary


def test_a_clique_constraint_no_node_can_meet(cluster: RecordedCluster) -> None:
    claim_pod(cluster, "three")
    classes(cluster)
    publish(cluster)
    held = ["gpu-0", "gpu-1", "gpu-4", "gpu-5"]  # two free in each NVLink group
    cluster.dra.append(allocate(claim("other", 4), "gpu-node-1", held))
    cluster.dra.append(claim("three", 3, clique=True))
    f = finding(cluster)
    assert f.status is Status.FAIL
    assert "matchAttribute gpu.kubegpu.io/nvlinkClique cannot be met" in f.summary
    assert "most free devices sharing one is 2" in f.summary
    assert "nvlinkDomain" in f.fix


def test_mig_class_counts_only_mig_devices(cluster: RecordedCluster) -> None:
    claim_pod(cluster, "slice")
    classes(cluster)
    publish(cluster)  # seed-8gpu has no MIG instances
    cluster.dra.append(claim("slice", 1, device_class="mig.kubegpu.io"))
    f = finding(cluster)
    assert f.status is Status.FAIL and "no node has that many free (most: 0)" in f.summary


def test_allocated_but_prepare_failed_quotes_the_driver(cluster: RecordedCluster) -> None:
    claim_pod(cluster, "pair")
    classes(cluster)
    publish(cluster)
    cluster.dra.append(allocate(claim("pair", 2), "gpu-node-1", ["gpu-2", "gpu-3"]))
    cluster.events.append(
        event(
            NS,
            "Pod",
            "train",
            "FailedPrepareDynamicResources",
            "Failed to prepare dynamic resources: NodePrepareResources failed for ResourceClaim pair: "
            "device gpu-3 is not published by node gpu-node-1",
        )
    )
    f = finding(cluster)
    assert f.status is Status.FAIL
    assert "could not prepare it" in f.summary and "gpu-3 is not published" in f.summary


def test_allocated_and_fine(cluster: RecordedCluster) -> None:
    claim_pod(cluster, "pair")
    classes(cluster)
    publish(cluster)
    cluster.dra.append(allocate(claim("pair", 2), "gpu-node-1", ["gpu-2", "gpu-3"]))
    cluster.pods[-1]["status"]["phase"] = "Running"
    f = finding(cluster)
    assert f.status is Status.OK and "gpu-node-1/gpu-2" in " ".join(f.evidence)


def test_recorded_objects_are_read_from_kubectl_lists() -> None:
    rec = RecordedCluster.from_objects([{"kind": "ResourceClaimList", "items": [claim("a", 1)]}])
    assert [c["metadata"]["name"] for c in rec.list_dra("ResourceClaim")] == ["a"]
