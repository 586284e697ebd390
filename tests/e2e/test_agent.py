"""The seeds' chain through a real kubelet, scheduler and API server, with `kubegpu agent` as a host process.

Each test asserts what a user would check with kubectl: node capacity/allocatable, which GPUs a pod's
environment names, scheduler events, admission errors. The agent's contract (issue 3): `kubegpu agent
--node-spec builtin:seed-8gpu --device-plugin-dir DIR [--config FILE] [--fault-file PATH]`; Allocate
answers with NVIDIA_VISIBLE_DEVICES; the fault file takes JSON lines such as {"gpu": 3, "xid": 79} and
{"gpu": 3, "healthy": true}.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import AgentProcess, Cluster, gpu_index_by_uuid, in_ns, pod, wait_until
from tests.e2e.rig.rig import NODE_NAME, Rig

pytestmark = pytest.mark.e2e

SEED = "builtin:seed-8gpu"
GPU = "nvidia.com/gpu"
GROUPS = ({0, 1, 2, 3}, {4, 5, 6, 7})  # the seed machine's two NVLink groups
StartAgent = Callable[..., AgentProcess]


def visible(env: dict[str, str]) -> list[str]:
    value = env.get("NVIDIA_VISIBLE_DEVICES", "")
    return [v for v in value.split(",") if v]


def run_gpu_pod(cluster: Cluster, ns: str, name: str, count: int, resource: str = GPU) -> list[str]:
    cluster.apply(in_ns(pod(name, resources={resource: count}), ns))
    cluster.wait_running(ns, name)
    return visible(cluster.env(ns, name))


def test_agent_registers_eight_gpus_with_the_real_kubelet(cluster: Cluster, start_agent: StartAgent) -> None:
    start_agent(SEED)
    cluster.wait_resource(GPU, allocatable=8, capacity=8, timeout_s=60)


def test_first_gpu_pod_sees_exactly_one_gpu_uuid(cluster: Cluster, start_agent: StartAgent) -> None:
    start_agent(SEED)
    cluster.wait_resource(GPU, allocatable=8, capacity=8)
    ns = cluster.namespace()
    ids = run_gpu_pod(cluster, ns, "first-gpu-pod", 1)
    assert len(ids) == 1, ids
    assert ids[0] in gpu_index_by_uuid(SEED), f"{ids[0]} is not one of the node's GPU UUIDs"


def test_four_gpu_pod_gets_the_free_nvlink_group_when_two_gpus_are_taken(
    cluster: Cluster, start_agent: StartAgent
) -> None:
    start_agent(SEED)
    cluster.wait_resource(GPU, allocatable=8, capacity=8)
    index = gpu_index_by_uuid(SEED)
    ns = cluster.namespace()
    taken = {index[u] for name in ("one-a", "one-b") for u in run_gpu_pod(cluster, ns, name, 1)}
    assert taken == {0, 1}, f"the two single-GPU pods got GPUs {sorted(taken)}, expected 0 and 1"
    four = {index[u] for u in run_gpu_pod(cluster, ns, "four", 4)}
    assert four == {4, 5, 6, 7}, f"4-GPU pod got {sorted(four)}; the free NVLink group is 4-7"


def test_pod_asking_for_more_gpus_than_free_stays_pending_as_insufficient(
    cluster: Cluster, start_agent: StartAgent
) -> None:
    start_agent(SEED)
    cluster.wait_resource(GPU, allocatable=8, capacity=8)
    ns = cluster.namespace()
    run_gpu_pod(cluster, ns, "holds-six", 6)
    cluster.apply(in_ns(pod("wants-three", resources={GPU: 3}), ns))
    msg = cluster.wait_event(ns, "wants-three", "FailedScheduling", "Insufficient nvidia.com/gpu")
    assert "0/1 nodes are available" in msg
    assert cluster.pod_phase(ns, "wants-three") == "Pending"


def test_injected_fault_lowers_allocatable_and_recovery_restores_it(
    cluster: Cluster, start_agent: StartAgent, tmp_path: Path
) -> None:
    faults = tmp_path / "faults.jsonl"
    faults.write_text("")
    start_agent(SEED, fault_file=faults)
    cluster.wait_resource(GPU, allocatable=8, capacity=8)
    with faults.open("a") as f:
        f.write(json.dumps({"gpu": 3, "xid": 79}) + "\n")
    cluster.wait_resource(GPU, allocatable=7, capacity=8, timeout_s=15)
    with faults.open("a") as f:
        f.write(json.dumps({"gpu": 3, "healthy": True}) + "\n")
    cluster.wait_resource(GPU, allocatable=8, capacity=8, timeout_s=15)


def test_kubelet_restart_agent_reregisters_and_running_pods_keep_their_gpus(
    rig: Rig, cluster: Cluster, start_agent: StartAgent
) -> None:
    start_agent(SEED)
    cluster.wait_resource(GPU, allocatable=8, capacity=8)
    ns = cluster.namespace()
    before = run_gpu_pod(cluster, ns, "survivor", 1)
    container_id = cluster.get("pod", "survivor", ns)["status"]["containerStatuses"][0]["containerID"]
    rig.restart_kubelet()
    # Allocatable first drops (stream broken) and must come back through re-registration within 30 s.
    cluster.wait_resource(GPU, allocatable=8, capacity=8, timeout_s=30)
    rig.wait_node_ready(timeout_s=60)
    status = cluster.get("pod", "survivor", ns)["status"]
    assert status["phase"] == "Running"
    assert status["containerStatuses"][0]["containerID"] == container_id
    assert status["containerStatuses"][0]["restartCount"] == 0
    assert visible(cluster.env(ns, "survivor")) == before
    # The restarted kubelet still counts the survivor's GPU as taken: 7 more fit and none of them is it.
    seven = run_gpu_pod(cluster, ns, "seven", 7)
    assert len(seven) == 7
    assert not set(seven) & set(before), f"kubelet handed out {before} twice after its restart"


TIME_SLICING = """version: v1
sharing:
  timeSlicing:
    resources:
      - name: nvidia.com/gpu
        replicas: 4
"""


def test_time_slicing_four_replicas_shares_a_gpu_only_after_every_gpu_has_a_pod(
    cluster: Cluster, start_agent: StartAgent, tmp_path: Path
) -> None:
    config = tmp_path / "time-slicing.yaml"
    config.write_text(TIME_SLICING)
    start_agent(SEED, config=config)
    cluster.wait_resource(GPU, allocatable=32, capacity=32)
    ns = cluster.namespace()
    seen: list[str] = []
    for i in range(9):
        ids = run_gpu_pod(cluster, ns, f"replica-{i}", 1)
        assert len(ids) == 1, ids
        seen.append(ids[0])
    assert len(set(seen[:8])) == 8, f"the first 8 replica pods should land on 8 different GPUs: {seen[:8]}"
    assert seen[8] in seen[:8], "the 9th pod must share a physical GPU (same UUID) with an earlier pod"
    assert set(seen) <= set(gpu_index_by_uuid(SEED)), "replica pods must see physical GPU UUIDs"


GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}


def test_gpu_taint_keeps_untolerating_pods_off_and_quota_caps_gpus(
    rig: Rig, cluster: Cluster, start_agent: StartAgent
) -> None:
    start_agent(SEED)
    cluster.wait_resource(GPU, allocatable=8, capacity=8)
    ns = cluster.namespace()
    rig.kubectl("taint", "node", NODE_NAME, "nvidia.com/gpu=present:NoSchedule")
    try:
        cluster.apply(in_ns(pod("no-toleration", resources={GPU: 1}), ns))
        msg = cluster.wait_event(ns, "no-toleration", "FailedScheduling", "untolerated taint")
        assert "0/1 nodes are available" in msg
        assert cluster.pod_phase(ns, "no-toleration") == "Pending"
        cluster.apply(in_ns(pod("tolerates", resources={GPU: 1}, tolerations=[GPU_TAINT]), ns))
        cluster.wait_running(ns, "tolerates")
    finally:
        rig.kubectl("taint", "node", NODE_NAME, "nvidia.com/gpu-", check=False)

    quota_ns = cluster.namespace("e2e-quota")
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpus", "namespace": quota_ns},
            "spec": {"hard": {"requests.nvidia.com/gpu": "2"}},
        }
    )
    wait_until(
        "quota status computed",
        lambda: cluster.get("resourcequota", "gpus", quota_ns).get("status", {}),
        30,
        accept=lambda st: "requests.nvidia.com/gpu" in st.get("hard", {}),
    )
    for name in ("q1", "q2"):
        cluster.apply(in_ns(pod(name, resources={GPU: 1}), quota_ns))
    third = cluster.apply(in_ns(pod("q3", resources={GPU: 1}), quota_ns), check=False)
    assert third.returncode != 0
    assert "exceeded quota" in third.stderr and "requests.nvidia.com/gpu" in third.stderr, third.stderr
    for name in ("q1", "q2"):
        cluster.wait_running(quota_ns, name)


# A single simulated H100 80GB with a mixed MIG layout (node-spec format: docs/node-spec.md).
H100_MIG_SPEC = """name: h100-mig-mixed
gpus:
  - model: H100-80GB
    mig:
      - 3g.40gb
      - 2g.20gb
      - 1g.10gb
      - 1g.10gb
"""
MIG_MIXED = """version: v1
flags:
  migStrategy: mixed
"""


def test_mig_mixed_node_advertises_each_profile_and_a_pod_gets_a_mig_device(
    cluster: Cluster, start_agent: StartAgent, tmp_path: Path
) -> None:
    spec = tmp_path / "h100-mig.yaml"
    spec.write_text(H100_MIG_SPEC)
    config = tmp_path / "mig-mixed.yaml"
    config.write_text(MIG_MIXED)
    start_agent(str(spec), config=config)
    for resource, count in (
        ("nvidia.com/mig-3g.40gb", 1),
        ("nvidia.com/mig-2g.20gb", 1),
        ("nvidia.com/mig-1g.10gb", 2),
    ):
        cluster.wait_resource(resource, allocatable=count, capacity=count)
    ns = cluster.namespace()
    ids = run_gpu_pod(cluster, ns, "mig-pod", 1, resource="nvidia.com/mig-1g.10gb")
    assert len(ids) == 1, ids
    assert ids[0].startswith("MIG-"), f"a MIG pod must get a MIG device UUID, got {ids[0]}"
    assert ids[0] not in gpu_index_by_uuid(str(spec)), "a MIG pod must get a MIG device, not the whole GPU"
