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
    # The rig's own containerd 2.x (CDI), not Debian's 1.6.
    assert info["containerRuntimeVersion"] == f"containerd://{cluster.rig.paths.containerd_version}"


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
