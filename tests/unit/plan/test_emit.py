"""Emitted configuration parses, uses only real Kubernetes/NVIDIA fields, and matches the plan.

Kubernetes objects are checked offline against the official client's generated models
(``k8s_schema``); the server-side dry-run against a real API server runs in the e2e suite once the
rig exists. mig-parted and device plugin configs are checked against their documented strict schemas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kubegpu.errors import InputError
from kubegpu.model import mig
from kubegpu.model.gpu import gpu_model
from kubegpu.plan.emit import EmittedFile, emit_pools, emit_serve, write_files
from kubegpu.plan.pools import PoolsRequest, plan_pools
from kubegpu.plan.serve import ServePlan, ServeRequest, plan_serve
from tests.unit.plan.k8s_schema import manifest_problems, problems

# NVIDIA/mig-parted api/spec/v1 (strict: unknown keys are rejected).
MIG_PARTED_TOP = {"version", "mig-configs"}
MIG_PARTED_ENTRY = {"device-filter", "devices", "mig-enabled", "mig-devices"}
# NVIDIA/k8s-device-plugin api/config/v1.
PLUGIN_TOP = {"version", "flags", "resources", "sharing", "imex"}
PLUGIN_FLAGS = {
    "migStrategy",
    "failOnInitError",
    "nvidiaDriverRoot",
    "nvidiaDevRoot",
    "mpsRoot",
    "gdsEnabled",
    "mofedEnabled",
    "gdrcopyEnabled",
    "useNodeFeatureAPI",
    "deviceDiscoveryStrategy",
    "plugin",
    "gfd",
}
SHARING_KEYS = {"renameByDefault", "failRequestsGreaterThanOne", "resources"}
SHARING_RESOURCE = {"name", "replicas", "rename", "devices"}


def serve_plan(**overrides: object) -> ServePlan:
    args: dict[str, object] = {
        "model_gb": 14,
        "instances": 5,
        "gpu": gpu_model("H100-80GB"),
        "multi_tenant": True,
    }
    args.update(overrides)
    return plan_serve(ServeRequest(**args))  # type: ignore[arg-type]


TENANTS = [f"dept-{i}" for i in range(1, 6)]


def by_name(files: list[EmittedFile]) -> dict[str, EmittedFile]:
    return {f.name: f for f in files}


def docs(f: EmittedFile) -> list[Any]:
    return [d for d in yaml.safe_load_all(f.text) if d is not None]


def check_plugin_config(config: dict[str, Any]) -> None:
    assert config["version"] == "v1"
    assert set(config) <= PLUGIN_TOP
    assert set(config.get("flags", {})) <= PLUGIN_FLAGS
    for section in config.get("sharing", {}).values():
        assert set(section) <= SHARING_KEYS
        for res in section["resources"]:
            assert set(res) <= SHARING_RESOURCE
            assert res["replicas"] >= 2


def all_manifests(files: list[EmittedFile]) -> list[dict[str, Any]]:
    out = []
    for f in files:
        if f.name.endswith(".yaml"):
            out.extend(d for d in docs(f) if isinstance(d, dict) and "kind" in d)
    return out


def test_mig_plan_emits_a_mig_parted_config_and_the_label_that_selects_it() -> None:
    files = by_name(emit_serve(serve_plan(), TENANTS))
    (config,) = docs(files["mig-parted.yaml"])
    assert set(config) == MIG_PARTED_TOP and config["version"] == "v1"
    (entry,) = config["mig-configs"]["all-2g.20gb"]
    assert set(entry) <= MIG_PARTED_ENTRY
    assert entry == {"devices": "all", "mig-enabled": True, "mig-devices": {"2g.20gb": 3}}
    mig.validate_layout("H100-80GB", ["2g.20gb"] * entry["mig-devices"]["2g.20gb"])
    assert "nvidia.com/mig.config=all-2g.20gb" in files["nodes.sh"].text


def test_mig_plan_gives_each_tenant_namespace_a_quota_of_one_mig_instance() -> None:
    files = by_name(emit_serve(serve_plan(), TENANTS))
    objs = docs(files["tenants.yaml"])
    quotas = [o for o in objs if o["kind"] == "ResourceQuota"]
    assert sorted(q["metadata"]["namespace"] for q in quotas) == TENANTS
    assert all(q["spec"]["hard"] == {"requests.nvidia.com/mig-2g.20gb": "1"} for q in quotas)
    assert {o["metadata"]["name"] for o in objs if o["kind"] == "Namespace"} == set(TENANTS)
    (plugin,) = docs(files["device-plugin-config.yaml"])
    check_plugin_config(plugin)
    assert plugin["flags"]["migStrategy"] == "mixed"


@pytest.mark.parametrize("mode", ["mig", "time-slicing", "mps", "exclusive"])
def test_every_emitted_kubernetes_object_uses_only_real_api_fields(mode: str) -> None:
    plan = serve_plan(multi_tenant=False)
    chosen = next(o for o in plan.options if o.mode.value == mode and o.fits)
    files = emit_serve(plan, ["inference"], chosen)
    manifests = all_manifests(files)
    assert {m["kind"] for m in manifests} >= {"Namespace", "ResourceQuota", "ConfigMap", "Pod"}
    for m in manifests:
        assert manifest_problems(m) == [], m["kind"]
    # The toleration snippet is a pod spec fragment: check it as a PodSpec.
    (fragment,) = docs(by_name(files)["toleration.yaml"])
    assert problems(fragment, "V1PodSpec") == []


def test_the_schema_check_catches_an_invented_field() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"gpuCount": 1}}
    assert manifest_problems(pod) == ["Pod.spec.gpuCount: not a field of V1PodSpec"]


@pytest.mark.parametrize(("per_gpu", "section"), [(3, "timeSlicing"), (4, "mps")])
def test_shared_plans_emit_replicas_in_nvidias_sharing_schema(per_gpu: int, section: str) -> None:
    plan = serve_plan(multi_tenant=False)
    mode = "time-slicing" if section == "timeSlicing" else "mps"
    chosen = next(o for o in plan.options if o.mode.value == mode and o.instances_per_gpu == per_gpu)
    files = by_name(emit_serve(plan, ["inference"], chosen))
    (plugin,) = docs(files["device-plugin-config.yaml"])
    check_plugin_config(plugin)
    assert plugin["sharing"][section]["resources"] == [{"name": "nvidia.com/gpu", "replicas": per_gpu}]
    (cm,) = docs(files["device-plugin-configmap.yaml"])
    (key,) = cm["data"]
    assert yaml.safe_load(cm["data"][key]) == plugin
    assert f"nvidia.com/device-plugin.config={key}" in files["nodes.sh"].text
    (quota,) = [o for o in docs(files["tenants.yaml"]) if o["kind"] == "ResourceQuota"]
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "5"}


def test_the_toleration_tolerates_the_taint_the_node_script_sets() -> None:
    files = by_name(emit_serve(serve_plan(), TENANTS))
    (fragment,) = docs(files["toleration.yaml"])
    (tol,) = fragment["tolerations"]
    assert f"{tol['key']}=present:{tol['effect']}" in files["nodes.sh"].text
    assert tol["operator"] == "Exists"
    (pod,) = docs(files["pod-example.yaml"])
    assert pod["spec"]["tolerations"] == fragment["tolerations"]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-2g.20gb": "1"}


def test_tenant_count_must_match_instances_for_multi_tenant_plans() -> None:
    with pytest.raises(InputError, match="3 tenant namespace"):
        emit_serve(serve_plan(), TENANTS[:3])


def test_a_plan_without_recommendation_emits_nothing() -> None:
    plan = serve_plan(gpus_available=1)
    with pytest.raises(InputError, match="nothing to emit"):
        emit_serve(plan, TENANTS)


def pools_files() -> dict[str, EmittedFile]:
    plan = plan_pools(PoolsRequest(gpus=4, gpu=gpu_model("A100-80GB"), users=20, exclusive=2, replicas=4))
    return by_name(emit_pools(plan))


def test_pool_manifests_use_only_real_api_fields() -> None:
    files = pools_files()
    manifests = all_manifests(list(files.values()))
    assert {m["kind"] for m in manifests} >= {"Namespace", "PriorityClass", "LimitRange", "ConfigMap", "Pod"}
    for m in manifests:
        assert manifest_problems(m) == [], m["kind"]
    for name in ("device-plugin-config-time-sliced.yaml", "device-plugin-config-exclusive.yaml"):
        (config,) = docs(files[name])
        check_plugin_config(config)


def test_time_sliced_pool_advertises_four_replicas_and_exclusive_pool_none() -> None:
    files = pools_files()
    (shared,) = docs(files["device-plugin-config-time-sliced.yaml"])
    (whole,) = docs(files["device-plugin-config-exclusive.yaml"])
    assert shared["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 4
    assert "sharing" not in whole


def test_limit_range_never_defaults_a_gpu_into_containers() -> None:
    # A Container-level max or default on nvidia.com/gpu is defaulted into every container's limits.
    (lr,) = docs(pools_files()["limitrange.yaml"])
    for item in lr["spec"]["limits"]:
        if item["type"] == "Container":
            assert not any("nvidia.com/gpu" in item.get(k, {}) for k in ("max", "default", "defaultRequest"))
    pod_item = next(i for i in lr["spec"]["limits"] if i["type"] == "Pod")
    assert pod_item["max"] == {"nvidia.com/gpu": "1"}


def test_example_pods_select_and_tolerate_their_own_pool() -> None:
    files = pools_files()
    pods = {p["metadata"]["name"]: p for p in docs(files["pod-examples.yaml"])}
    exp, train = pods["experiment-example"], pods["training-example"]
    assert exp["spec"]["nodeSelector"] == {"kubegpu.io/gpu-pool": "time-sliced"}
    assert exp["spec"]["activeDeadlineSeconds"] == 8 * 3600
    assert exp["spec"]["priorityClassName"] == "gpu-experiment"
    assert "activeDeadlineSeconds" not in train["spec"]
    for pod, pool in ((exp, "time-sliced"), (train, "exclusive")):
        script = files[f"nodes-{pool}.sh"].text
        for tol in pod["spec"]["tolerations"]:
            assert tol["key"] in script and tol["effect"] in script
        assert f"kubegpu.io/gpu-pool={pool}:NoSchedule" in script


def test_write_files_writes_everything_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    files = emit_serve(serve_plan(), TENANTS)
    out = tmp_path / "out"
    written = write_files(out, files)
    assert (
        sorted(p.name for p in out.iterdir())
        == sorted(f.name for f in files)
        == sorted(p.name for p in written)
    )
    assert (out / "nodes.sh").stat().st_mode & 0o111
    for f in files:
        assert (out / f.name).read_text() == f.text


def test_write_files_refuses_a_file_as_directory(tmp_path: Path) -> None:
    target = tmp_path / "plain"
    target.write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        write_files(target, emit_serve(serve_plan(), TENANTS))


def test_write_files_refuses_a_directory_in_place_of_a_file_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "tenants.yaml").mkdir(parents=True)
    with pytest.raises(InputError, match=r"tenants\.yaml exists and is not a file"):
        write_files(out, emit_serve(serve_plan(), TENANTS))
    assert [p.name for p in out.iterdir()] == ["tenants.yaml"]


@pytest.mark.parametrize("tenants", [["BAD NS!"], [""], ["-a"], ["A"], ["a" * 64], ["x", "x"]])
def test_emit_serve_refuses_tenants_that_are_not_distinct_namespace_names(tenants: list[str]) -> None:
    plan = plan_serve(ServeRequest(model_gb=14, instances=len(tenants), gpu=gpu_model("H100-80GB")))
    with pytest.raises(InputError, match="--tenant"):
        emit_serve(plan, tenants)
