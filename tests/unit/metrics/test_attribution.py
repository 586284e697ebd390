"""Which series a GPU gets: one per container holding it (replicas folded), MIG per instance, else one."""

from __future__ import annotations

from kubegpu.metrics.attribution import Owner, held_counts, targets
from kubegpu.model.holder import DeviceHolder
from kubegpu.model.node import Gpu, GpuUuid, MigInstance, Node


def _gpu(i: int, *, mig: tuple[MigInstance, ...] = ()) -> Gpu:
    return Gpu(
        index=i,
        uuid=GpuUuid(f"GPU-{i}"),
        model="A100-40GB",
        memory_mib=40960,
        numa_node=0,
        pci_bus_id=f"00000000:{i:02X}:00.0",
        mig_enabled=bool(mig),
        mig_instances=mig,
    )


def _holder(pod: str, *ids: str, container: str = "main", resource: str = "nvidia.com/gpu") -> DeviceHolder:
    return DeviceHolder(namespace="ns", pod=pod, container=container, resource=resource, device_ids=ids)


MIG_A = MigInstance(profile="1g.5gb", start_slot=0, uuid=GpuUuid("MIG-a"), gi_index=7)
MIG_B = MigInstance(profile="3g.20gb", start_slot=4, uuid=GpuUuid("MIG-b"), gi_index=2)
NODE = Node(name="n", gpus=(_gpu(0), _gpu(1), _gpu(2, mig=(MIG_A, MIG_B))), topology=None)


def _view(node: Node, holders: list[DeviceHolder]) -> list[tuple[int, str | None, str | None]]:
    return [
        (t.gpu.index, t.mig.profile if t.mig else None, t.owner.pod if t.owner else None)
        for t in targets(node, holders)
    ]


def test_an_unheld_node_has_one_series_per_gpu_and_per_mig_instance_without_pods() -> None:
    assert _view(NODE, []) == [(0, None, None), (1, None, None), (2, "1g.5gb", None), (2, "3g.20gb", None)]


def test_each_replica_holder_gets_its_own_series_and_the_other_gpus_stay_unlabelled() -> None:
    holders = [_holder("a", "GPU-0::0"), _holder("b", "GPU-0::3"), _holder("c", "GPU-1")]
    assert _view(NODE, holders)[:3] == [(0, None, "a"), (0, None, "b"), (1, None, "c")]


def test_one_container_holding_two_replicas_of_one_gpu_is_one_series() -> None:
    holders = [_holder("a", "GPU-0::0", "GPU-0::1")]
    assert _view(NODE, holders)[0:2] == [(0, None, "a"), (1, None, None)]
    assert held_counts(holders) == {"GPU-0": 1}


def test_mig_holders_label_their_instance_only() -> None:
    holders = [_holder("m", "MIG-b", resource="nvidia.com/mig-3g.20gb")]
    assert _view(NODE, holders)[2:] == [(2, "1g.5gb", None), (2, "3g.20gb", "m")]


def test_uuids_match_whatever_their_case_and_unknown_devices_are_ignored() -> None:
    holders = [_holder("a", "gpu-1"), _holder("x", "GPU-elsewhere")]
    got = targets(NODE, holders)
    assert [t.owner for t in got[:2]] == [None, Owner(namespace="ns", pod="a", container="main")]
    assert all(t.owner is None or t.owner.pod != "x" for t in got)


def test_containers_of_one_pod_are_separate_series() -> None:
    holders = [_holder("p", "GPU-0::0", container="one"), _holder("p", "GPU-0::1", container="two")]
    assert [t.owner.container for t in targets(NODE, holders)[:2] if t.owner] == ["one", "two"]
    assert held_counts(holders) == {"GPU-0": 2}
