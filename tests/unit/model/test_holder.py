from kubegpu.model.holder import DeviceHolder, holders_of, physical_id


def holder(pod: str, *ids: str, resource: str = "nvidia.com/gpu") -> DeviceHolder:
    return DeviceHolder(namespace="ns", pod=pod, container="c", resource=resource, device_ids=ids)


def test_a_replica_id_names_the_gpu_behind_it() -> None:
    assert physical_id("GPU-aaa::3") == "GPU-aaa"
    assert physical_id("GPU-aaa") == "GPU-aaa"
    assert physical_id("MIG-bbb") == "MIG-bbb"


def test_holders_of_a_gpu_include_replica_and_mig_holders_and_nobody_else() -> None:
    index_of = {"GPU-a": 0, "GPU-b": 1, "MIG-b1": 1}
    held = [
        holder("full-a", "GPU-a"),
        holder("replica-b", "GPU-b::2"),
        holder("mig-b", "MIG-b1", resource="nvidia.com/mig-1g.10gb"),
        holder("foreign", "0000:3b:00.0", resource="example.com/fpga"),
    ]
    assert [h.pod for h in holders_of(held, 1, index_of)] == ["replica-b", "mig-b"]
    assert [h.pod for h in holders_of(held, 0, index_of)] == ["full-a"]
    assert holders_of(held, 7, index_of) == []
