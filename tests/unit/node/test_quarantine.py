"""The quarantine's decisions: which GPUs count as failed, the condition and taint, the cap, evictions."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kubegpu.health.policy import HealthPolicy
from kubegpu.health.quarantine import EvictionPolicy, QuarantinePolicy
from kubegpu.health.tracker import HealthTracker
from kubegpu.model.event import GpuEvent, GpuEventKind
from kubegpu.model.holder import DeviceHolder
from kubegpu.node.quarantine import (
    CONDITION_TYPE,
    cap_allows,
    condition_for,
    eviction_targets,
    failed_gpus,
    recorded_faults,
    taints_with,
)

UUIDS = ["GPU-aaaa", "GPU-bbbb", "GPU-cccc", "GPU-dddd"]
INDEX = {u: i for i, u in enumerate(UUIDS)} | {"MIG-m3": 3}
KEY = "nvidia.com/gpu.unhealthy"


def tracker(*events: GpuEvent) -> HealthTracker:
    t = HealthTracker(gpu_count=4, aliases=INDEX, policy=HealthPolicy())
    for e in events:
        t.apply(e)
    return t


def xid(gpu: int, code: int) -> GpuEvent:
    return GpuEvent(gpu=gpu, kind=GpuEventKind.XID, xid=code)


def test_only_quarantine_worthy_faults_count_and_a_later_one_is_not_hidden() -> None:
    t = tracker(xid(3, 79), xid(2, 94), xid(1, 13), xid(0, 94), xid(0, 48))
    failed = failed_gpus(t.statuses(), UUIDS, QuarantinePolicy())
    assert [(f.index, f.reason) for f in failed] == [(0, "Xid48"), (3, "Xid79")]


def test_the_condition_names_fault_and_uuid_and_is_read_back_the_same() -> None:
    t = tracker(xid(3, 79), GpuEvent(gpu=1, kind=GpuEventKind.LOST))
    failed = failed_gpus(t.statuses(), UUIDS, QuarantinePolicy())
    cond = condition_for(failed)
    assert cond is not None
    assert cond["type"] == CONDITION_TYPE and cond["status"] == "True" and cond["reason"] == "GpuLost"
    assert "GPU 3 GPU-dddd Xid79" in cond["message"] and "GPU 1 GPU-bbbb GpuLost" in cond["message"]
    node = {"status": {"conditions": [{"type": "Ready", "status": "True"}, cond]}}
    back = recorded_faults(node)
    assert [(u, k, x) for u, k, x, _ in back] == [
        ("GPU-bbbb", GpuEventKind.LOST, None),
        ("GPU-dddd", GpuEventKind.XID, 79),
    ]
    # restoring what was read into a fresh tracker gives the same condition: a restart changes nothing
    fresh = tracker()
    for uuid, kind, code, reason in back:
        fresh.restore(INDEX[uuid], cause=kind, xid=code, reason=reason)
    again = condition_for(failed_gpus(fresh.statuses(), UUIDS, QuarantinePolicy()))
    assert again is not None and again["reason"] == cond["reason"]
    assert [(f.index, f.reason) for f in failed_gpus(fresh.statuses(), UUIDS, QuarantinePolicy())] == [
        (1, "GpuLost"),
        (3, "Xid79"),
    ]


def test_no_failed_gpu_means_no_condition_and_a_false_condition_records_nothing() -> None:
    assert condition_for([]) is None
    assert (
        recorded_faults(
            {
                "status": {
                    "conditions": [
                        {"type": CONDITION_TYPE, "status": "False", "message": "GPU 3 GPU-dddd Xid79: x"}
                    ]
                }
            }
        )
        == []
    )


def test_taints_keep_others_replace_ours_and_say_when_nothing_changes() -> None:
    others = [
        {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
        {"key": "team", "value": "a", "effect": "NoSchedule"},
    ]
    ours = {"key": KEY, "value": "Xid79", "effect": "NoSchedule"}
    added = taints_with(others, key=KEY, desired=ours)
    assert added == [*others, ours]
    assert taints_with(added, key=KEY, desired=ours) is None  # idempotent: a restart adds no duplicate
    changed = taints_with(added, key=KEY, desired={**ours, "effect": "NoExecute"})
    assert changed == [*others, {**ours, "effect": "NoExecute"}]
    assert taints_with(added, key=KEY, desired=None) == others
    assert taints_with(others, key=KEY, desired=None) is None
    duplicated = [*others, ours, ours]
    assert taints_with(duplicated, key=KEY, desired=ours) == [*others, ours]


def test_the_cap_is_a_share_of_gpu_nodes_with_at_least_one() -> None:
    assert cap_allows([], "a", gpu_nodes=1, max_share=0.1)
    assert not cap_allows(["b"], "a", gpu_nodes=5, max_share=0.1)
    assert cap_allows(["b"], "a", gpu_nodes=20, max_share=0.1)
    assert not cap_allows(["b", "c"], "a", gpu_nodes=20, max_share=0.1)
    assert cap_allows(["a", "b"], "a", gpu_nodes=20, max_share=0.1), "a counted node keeps its place"


@given(st.integers(1, 500), st.floats(0.01, 1.0), st.integers(0, 600))
def test_a_storm_never_quarantines_more_than_the_cap(nodes: int, share: float, failing: int) -> None:
    quarantined: list[str] = []
    for i in range(failing):
        if cap_allows(quarantined, f"n{i}", gpu_nodes=nodes, max_share=share):
            quarantined.append(f"n{i}")
    assert len(quarantined) <= max(1, int(share * nodes + 1e-9))


def holder(pod: str, *ids: str, resource: str = "nvidia.com/gpu") -> DeviceHolder:
    return DeviceHolder(namespace="ml", pod=pod, container="c", resource=resource, device_ids=ids)


def test_evictions_take_holders_of_the_failed_gpu_replicas_and_mig_devices_only() -> None:
    holders = [
        holder("whole3", "GPU-dddd"),
        holder("replica3", "GPU-dddd::2"),
        holder("mig3", "MIG-m3", resource="nvidia.com/mig-1g.10gb"),
        holder("on0", "GPU-aaaa"),
        holder("two", "GPU-aaaa", "GPU-dddd"),
        holder("other-vendor", "amd-0"),
    ]
    on3 = eviction_targets(holders, [3], INDEX, EvictionPolicy.PODS_ON_FAILED_GPU)
    assert on3 == [("ml", "mig3"), ("ml", "replica3"), ("ml", "two"), ("ml", "whole3")]
    every = eviction_targets(holders, [3], INDEX, EvictionPolicy.ALL_GPU_PODS)
    assert len(every) == len(holders)
    assert eviction_targets(holders, [3], INDEX, EvictionPolicy.NONE) == []


def test_a_pod_with_two_containers_on_the_gpu_is_evicted_once() -> None:
    holders = [
        holder("p", "GPU-dddd"),
        DeviceHolder(
            namespace="ml", pod="p", container="d", resource="nvidia.com/gpu", device_ids=("GPU-dddd::1",)
        ),
    ]
    assert eviction_targets(holders, [3], INDEX, EvictionPolicy.PODS_ON_FAILED_GPU) == [("ml", "p")]
