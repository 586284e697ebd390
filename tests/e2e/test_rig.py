"""The rig itself works as a Kubernetes node: what every agent test relies on, checked without the agent."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import Cluster, in_ns, pod
from tests.e2e.rig.rig import NODE_NAME

pytestmark = pytest.mark.e2e


def test_node_is_ready_and_schedulable_on_the_versions_the_rig_builds(cluster: Cluster) -> None:
    node = cluster.get("node", NODE_NAME)
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True", ready
    assert not any(t["key"].startswith("node.kubernetes.io/") for t in node["spec"].get("taints", []))
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == cluster.rig.paths.k8s_version
    # The rig's own containerd 2.x (CDI), not Debian's 1.6; the CRI reports the version without its "v".
    assert (
        info["containerRuntimeVersion"] == f"containerd://{cluster.rig.paths.containerd_version.lstrip('v')}"
    )


def test_busybox_pod_runs_and_its_log_reads_back(cluster: Cluster) -> None:
    ns = cluster.namespace()
    cluster.apply(
        in_ns(pod("hello", command="echo hello-from-the-rig; env; echo KUBEGPU_ENV_END=1; sleep 3600"), ns)
    )
    cluster.wait_running(ns, "hello")
    env = cluster.env(ns, "hello")
    assert "hello-from-the-rig" in cluster.logs(ns, "hello")
    assert env.get("HOSTNAME") == "hello"
    assert env.get("KUBERNETES_SERVICE_HOST") == "10.0.0.1"


def test_pod_asking_for_an_unadvertised_extended_resource_stays_pending_as_insufficient(
    cluster: Cluster,
) -> None:
    ns = cluster.namespace()
    cluster.apply(in_ns(pod("wants-nothing-here", resources={"example.com/absent": 1}), ns))
    msg = cluster.wait_event(ns, "wants-nothing-here", "FailedScheduling", "Insufficient example.com/absent")
    assert "0/1 nodes are available" in msg
    assert cluster.pod_phase(ns, "wants-nothing-here") == "Pending"


# What kubegpu's DRA driver (issue 14) needs from the API server: on by default in v1.37
# (docs/testing.md "DRA features"); the rig adds no gates for them (rig.FEATURE_GATES).
DRA_GATES = (
    "DynamicResourceAllocation",
    "DRADeviceTaints",
    "DRAPartitionableDevices",
    "DRAConsumableCapacity",
    "DRAPrioritizedList",
)


def test_the_dra_features_the_driver_needs_are_on_and_resource_k8s_io_v1_is_served(cluster: Cluster) -> None:
    enabled: dict[str, bool] = {}
    for line in str(cluster.rig.api("/metrics")).splitlines():
        if line.startswith("kubernetes_feature_enabled{"):
            labels, value = line.rsplit(" ", 1)
            name = labels.split('name="', 1)[1].split('"', 1)[0]
            enabled[name] = value.strip() == "1"
    assert {g: enabled.get(g) for g in DRA_GATES} == dict.fromkeys(DRA_GATES, True)
    served = {r["name"] for r in cluster.rig.api("/apis/resource.k8s.io/v1")["resources"]}
    assert {"deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices"} <= served
    assert "devicetaintrules" in served, served  # DRADeviceTaintRules, GA in v1.37
