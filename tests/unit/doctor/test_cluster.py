"""Cluster checks over recorded API objects: allocatable, capacity, readiness, labels, taints, plugin pods."""

from __future__ import annotations

from typing import Any

import pytest

from kubegpu.doctor import ClusterUnreachable, RecordedCluster, Status, cluster_report
from kubegpu.doctor.chain import Report
from kubegpu.doctor.clusterprobe import ClusterApi
from tests.unit.doctor.apiobjects import event, node, pod


def report(cluster: RecordedCluster, **kwargs: object) -> Report:
    return cluster_report(lambda: cluster, **kwargs)  # type: ignore[arg-type]


def test_healthy_recorded_cluster_passes_every_check(cluster: RecordedCluster) -> None:
    r = report(cluster)
    assert r.exit_code == 0
    statuses = {f.id: f.status for f in r.findings}
    assert statuses.pop("cluster.gpu-operator") is Status.SKIP  # the plugin runs as a plain DaemonSet
    assert set(statuses.values()) == {Status.OK}, [f for f in r.findings if f.status is not Status.OK]
    assert "2 in scope" in r.by_id("cluster.api").summary  # the two GPU nodes, not the CPU node


def test_unreachable_api_fails_and_blocks_the_cluster_checks() -> None:
    def connect() -> ClusterApi:
        raise ClusterUnreachable("https://10.0.0.1:6443: ConnectionRefusedError")

    r = cluster_report(connect)
    assert r.by_id("cluster.api").status is Status.FAIL
    assert "ConnectionRefusedError" in r.by_id("cluster.api").summary
    assert all(f.summary == "blocked by cluster.api" for f in r.findings[1:])
    skipped = cluster_report(connect, unreachable_is_skip=True)
    assert skipped.by_id("cluster.api").status is Status.SKIP
    assert skipped.exit_code == 0


def test_unknown_node_name_fails_and_lists_the_nodes(cluster: RecordedCluster) -> None:
    f = report(cluster, node="gpu-node-9").by_id("cluster.api")
    assert f.status is Status.FAIL
    assert "gpu-node-9" in f.summary and any("gpu-node-1" in e for e in f.evidence)


def test_gpu_node_without_allocatable_gpus_points_at_the_device_plugin(cluster: RecordedCluster) -> None:
    n = node(cluster, "gpu-node-2")
    del n["status"]["allocatable"]["nvidia.com/gpu"]
    del n["status"]["capacity"]["nvidia.com/gpu"]
    f = report(cluster).by_id("cluster.allocatable")
    assert f.status is Status.FAIL
    assert "gpu-node-2" in f.summary and "device plugin" in f.summary
    assert "systemctl restart kubelet" in f.fix


def test_cluster_without_any_gpu_node_fails(cluster: RecordedCluster) -> None:
    cluster.nodes = [node(cluster, "cpu-node-1")]
    f = report(cluster).by_id("cluster.allocatable")
    assert f.status is Status.FAIL
    assert "nvidia.com/gpu.present=true" in f.fix


def test_unhealthy_gpu_shows_as_capacity_above_allocatable_with_node_events(cluster: RecordedCluster) -> None:
    node(cluster, "gpu-node-1")["status"]["allocatable"]["nvidia.com/gpu"] = "7"
    cluster.events.append(
        event(
            "default",
            "Node",
            "gpu-node-1",
            "GPUXidError",
            "GPU 0000:86:00 reported Xid 79: fallen off the bus",
        )
    )
    f = report(cluster).by_id("cluster.capacity")
    assert f.status is Status.FAIL
    assert "gpu-node-1 has 1 of 8 unhealthy" in f.summary
    assert any("Xid 79" in e for e in f.evidence)
    assert "dmesg" in f.fix


def test_not_ready_gpu_node_fails_and_cordoned_one_warns(cluster: RecordedCluster) -> None:
    node(cluster, "gpu-node-1")["status"]["conditions"][1]["status"] = "False"
    assert report(cluster).by_id("cluster.node-ready").status is Status.FAIL
    node(cluster, "gpu-node-1")["status"]["conditions"][1]["status"] = "True"
    node(cluster, "gpu-node-2")["spec"]["unschedulable"] = True
    f = report(cluster).by_id("cluster.node-ready")
    assert f.status is Status.WARN and "kubectl uncordon" in f.fix


def test_gpu_node_without_gpu_present_label_warns_with_the_label_command(cluster: RecordedCluster) -> None:
    del node(cluster, "gpu-node-2")["metadata"]["labels"]["nvidia.com/gpu.present"]
    f = report(cluster).by_id("cluster.labels")
    assert f.status is Status.WARN
    assert f.fix == "kubectl label nodes gpu-node-2 nvidia.com/gpu.present=true"


def test_gpu_node_without_taint_warns_with_the_taint_command(cluster: RecordedCluster) -> None:
    del node(cluster, "gpu-node-1")["spec"]["taints"]
    f = report(cluster).by_id("cluster.taints")
    assert f.status is Status.WARN
    assert "kubectl taint nodes gpu-node-1 nvidia.com/gpu=present:NoSchedule" in f.fix
    assert "gpu-node-2" not in f.summary


def test_health_taint_from_xid_tooling_warns(cluster: RecordedCluster) -> None:
    node(cluster, "gpu-node-1")["spec"]["taints"].append(
        {"key": "nvidia.com/gpu-xid-error", "value": "true", "effect": "NoSchedule"}
    )
    f = report(cluster).by_id("cluster.taints")
    assert f.status is Status.WARN and "gpu-xid-error" in f.summary


PLUGIN_LOG_ROWS = [
    ("E1130 05:00:01 main.go:132] Failed to initialize NVML: could not load NVML library", "NVML library"),
    ("I1130 05:00:01 main.go:287] No devices found. Waiting indefinitely.", "no NVIDIA GPU"),
    ("E1130 05:00:02 main.go:301] Unable to connect to kubelet: dial unix kubelet.sock", "socket path"),
    ("E1130 05:00:30 main.go:310] timed out waiting for kubelet to start", "before kubelet was ready"),
]


@pytest.mark.parametrize(("line", "cause"), PLUGIN_LOG_ROWS)
def test_each_row_of_the_plugin_log_table_names_its_cause(
    cluster: RecordedCluster, line: str, cause: str
) -> None:
    key = "kube-system/nvidia-device-plugin-ds-x7k2p/nvidia-device-plugin-ctr"
    cluster.logs[key] = cluster.logs[key] + "\n" + line
    del node(cluster, "gpu-node-1")["status"]["allocatable"]["nvidia.com/gpu"]
    f = report(cluster).by_id("plugin.pod")
    assert f.status is Status.FAIL
    assert cause in f.summary
    assert any(line.strip() in e for e in f.evidence)


def test_fail_on_init_error_advice_for_kubelet_timeout(cluster: RecordedCluster) -> None:
    cluster.logs["kube-system/nvidia-device-plugin-ds-x7k2p/nvidia-device-plugin-ctr"] = PLUGIN_LOG_ROWS[3][0]
    assert "--fail-on-init-error=false" in report(cluster).by_id("plugin.pod").fix


def test_init_error_of_a_plugin_whose_node_advertises_gpus_only_warns(cluster: RecordedCluster) -> None:
    key = "kube-system/nvidia-device-plugin-ds-x7k2p/nvidia-device-plugin-ctr"
    cluster.logs[key] = PLUGIN_LOG_ROWS[0][0] + "\n" + cluster.logs[key]  # retried and registered
    f = report(cluster).by_id("plugin.pod")
    assert f.status is Status.WARN
    assert "recovered" in f.summary


def test_gpu_node_without_plugin_pod_fails(cluster: RecordedCluster) -> None:
    cluster.pods.remove(pod(cluster, "kube-system", "nvidia-device-plugin-ds-q9f4m"))
    f = report(cluster).by_id("plugin.pod")
    assert f.status is Status.FAIL
    assert "gpu-node-2" in f.summary
    assert "nvidia.com/gpu.present=true" in f.fix


def test_crash_looping_plugin_pod_fails_and_restarted_one_warns(cluster: RecordedCluster) -> None:
    p = pod(cluster, "kube-system", "nvidia-device-plugin-ds-q9f4m")
    status = p["status"]["containerStatuses"][0]
    status["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    status["restartCount"] = 12
    f = report(cluster).by_id("plugin.pod")
    assert f.status is Status.FAIL and "CrashLoopBackOff" in f.summary
    status["state"] = {"running": {"startedAt": "2026-11-30T06:00:00Z"}}
    assert report(cluster).by_id("plugin.pod").status is Status.WARN


def test_node_option_narrows_the_checks_to_that_node(cluster: RecordedCluster) -> None:
    del node(cluster, "gpu-node-2")["spec"]["taints"]
    assert report(cluster, node="gpu-node-1").by_id("cluster.taints").status is Status.OK
    assert report(cluster, node="gpu-node-2").by_id("cluster.taints").status is Status.WARN


def test_raw_api_lists_without_item_kinds_are_understood(cluster: RecordedCluster) -> None:
    raw = {
        "kind": "NodeList",
        "apiVersion": "v1",
        "items": [{k: v for k, v in n.items() if k != "kind"} for n in cluster.nodes],
    }
    rec = RecordedCluster.from_objects([raw])
    assert [n["metadata"]["name"] for n in rec.list_nodes()] == ["gpu-node-1", "gpu-node-2", "cpu-node-1"]


def operator_pod(
    name: str, node_name: str, *, phase: str = "Running", waiting: str | None = None
) -> dict[str, Any]:
    state: dict[str, Any] = {"waiting": {"reason": waiting}} if waiting else {"running": {}}
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "gpu-operator"},
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": phase, "containerStatuses": [{"name": "c", "restartCount": 0, "state": state}]},
    }


def test_gpu_operator_pods_running_pass(cluster: RecordedCluster) -> None:
    cluster.pods += [
        operator_pod("nvidia-dcgm-exporter-abcde", "gpu-node-1"),
        operator_pod("gpu-feature-discovery-x", "gpu-node-2"),
    ]
    f = report(cluster).by_id("cluster.gpu-operator")
    assert f.status is Status.OK and "2 GPU Operator pod(s)" in f.summary


def test_broken_driver_daemonset_fails_but_broken_dcgm_only_warns(cluster: RecordedCluster) -> None:
    cluster.pods.append(operator_pod("nvidia-dcgm-exporter-abcde", "gpu-node-1", waiting="CrashLoopBackOff"))
    f = report(cluster).by_id("cluster.gpu-operator")
    assert f.status is Status.WARN and "nvidia-dcgm-exporter-abcde (CrashLoopBackOff)" in f.summary
    cluster.pods.append(operator_pod("nvidia-driver-daemonset-5p2xq", "gpu-node-2", phase="Pending"))
    f = report(cluster).by_id("cluster.gpu-operator")
    assert f.status is Status.FAIL and "nvidia-driver-daemonset-5p2xq (Pending)" in f.summary


def test_failed_mig_reconfiguration_fails(cluster: RecordedCluster) -> None:
    node(cluster, "gpu-node-1")["metadata"]["labels"]["nvidia.com/mig.config.state"] = "failed"
    f = report(cluster).by_id("cluster.gpu-operator")
    assert f.status is Status.FAIL and "MIG reconfiguration failed on gpu-node-1" in f.summary


@pytest.mark.parametrize("value", ["abc", "-1", "1e999", "1.5", "4Gi", "\u0664", None, -4, True])
def test_a_gpu_capacity_that_is_not_a_whole_number_fails_naming_node_and_key(
    cluster: RecordedCluster, value: object
) -> None:
    node(cluster, "gpu-node-1")["status"]["capacity"]["nvidia.com/gpu"] = value
    r = report(cluster)
    f = r.by_id("cluster.capacity")
    assert f.status is Status.FAIL
    assert "gpu-node-1: status.capacity.nvidia.com/gpu" in f.summary
    assert "not a whole number" in f.summary
    assert r.exit_code == 1


def test_a_malformed_allocatable_is_named_rather_than_read_as_no_gpus(cluster: RecordedCluster) -> None:
    node(cluster, "gpu-node-2")["status"]["allocatable"]["nvidia.com/gpu"] = "abc"
    f = report(cluster).by_id("cluster.allocatable")
    assert f.status is Status.FAIL
    assert 'gpu-node-2: status.allocatable.nvidia.com/gpu = "abc"' in f.summary
