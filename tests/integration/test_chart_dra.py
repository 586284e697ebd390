"""The chart's DRA option: nothing by default; with dra.enabled the driver's DaemonSet (kubelet's plugin
paths mounted at the same paths), its least-privilege RBAC, the per-node admission policy, the two
DeviceClasses, and the agent's ConfigMap handing the same GPUs to DRA so the device plugin skips them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubegpu.deviceplugin.config import load_config
from kubegpu.deviceplugin.inventory import build_inventory
from kubegpu.model.dra import DraGpus, device_classes
from kubegpu.sources.spec import load_node
from tests.integration.chart import by_kind, helm, render
from tests.unit.plan.k8s_schema import problems

__all__ = ["helm"]  # the fixture, re-used

pytestmark = pytest.mark.integration


def agent_config(docs: list[dict[str, Any]], tmp_path: Path) -> Any:
    cm = by_kind(docs, "ConfigMap")["kubegpu-config"]
    path = tmp_path / "config.yaml"
    path.write_text(cm["data"]["config.yaml"])
    return load_config(path)


def test_nothing_of_dra_by_default(helm: Path, tmp_path: Path) -> None:
    docs = render(helm)
    assert "kubegpu-dra" not in by_kind(docs, "DaemonSet")
    assert not by_kind(docs, "DeviceClass")
    assert agent_config(docs, tmp_path).dra_gpus == DraGpus()


def test_the_driver_daemonset_mounts_kubelets_paths_at_the_same_paths(helm: Path) -> None:
    ds = by_kind(render(helm, "dra.enabled=true", "simulated.enabled=true"), "DaemonSet")["kubegpu-dra"]
    assert problems(ds, "V1DaemonSet") == []
    pod = ds["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert c["args"][:2] == ["dra", "serve"]
    assert "--config=/etc/kubegpu/config/config.yaml" in c["args"]
    assert "--node-spec=/etc/kubegpu/node-spec/node.yaml" in c["args"]
    hosts = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    for name in ("plugins-registry", "plugin", "cdi"):
        assert mounts[name] == hosts[name]
    assert hosts["plugin"] == "/var/lib/kubelet/plugins/gpu.kubegpu.io"
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["serviceAccountName"] == "kubegpu-dra"


def test_real_mode_reads_nvml(helm: Path) -> None:
    ds = by_kind(render(helm, "dra.enabled=true"), "DaemonSet")["kubegpu-dra"]
    [c] = ds["spec"]["template"]["spec"]["containers"]
    assert "--nvml" in c["args"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in c["env"]


def test_rbac_is_least_privilege_and_slices_are_kept_to_the_own_node(helm: Path) -> None:
    docs = render(helm, "dra.enabled=true")
    rules = by_kind(docs, "ClusterRole")["kubegpu-dra"]["rules"]
    granted = {
        (g, r): set(rule["verbs"]) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]
    }
    assert granted[("resource.k8s.io", "resourceclaims")] == {"get", "list", "watch"}
    assert granted[("", "nodes")] == {"get"}
    assert "*" not in {v for vs in granted.values() for v in vs}
    policy = by_kind(docs, "ValidatingAdmissionPolicy")["kubegpu-dra-own-node-slices"]
    condition = policy["spec"]["matchConditions"][0]["expression"]
    assert "system:serviceaccount:kubegpu:kubegpu-dra" in condition
    assert by_kind(docs, "ValidatingAdmissionPolicyBinding")["kubegpu-dra-own-node-slices"]["spec"][
        "validationActions"
    ] == ["Deny"]


def test_device_classes_are_the_ones_kubegpu_dra_classes_prints(helm: Path) -> None:
    rendered = by_kind(render(helm, "dra.enabled=true"), "DeviceClass")
    for wanted in device_classes():
        assert rendered[wanted["metadata"]["name"]]["spec"] == wanted["spec"]


@pytest.mark.parametrize(("gpus", "served_by_plugin"), [("all", set()), ("4\\,5\\,6\\,7", {0, 1, 2, 3})])
def test_gpus_given_to_dra_are_left_out_by_the_agent(
    helm: Path, tmp_path: Path, gpus: str, served_by_plugin: set[int]
) -> None:
    config = agent_config(render(helm, "dra.enabled=true", f"dra.gpus={gpus}"), tmp_path)
    inventory = build_inventory(load_node("builtin:seed-8gpu"), config)
    assert {d.gpu for r in inventory.resources for d in r.devices} == served_by_plugin
