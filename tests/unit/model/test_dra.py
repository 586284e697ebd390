"""What the DRA driver publishes: devices, attributes a claim can match on, slices and CDI specs."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import pytest

from kubegpu.model.dra import (
    CDI_KIND,
    DRIVER_NAME,
    MAX_DEVICES_PER_SLICE,
    ClaimDevice,
    DeviceKind,
    DeviceOrder,
    DraDevice,
    allocated_devices,
    cdi_device_name,
    cdi_device_name_of,
    cdi_spec,
    device_classes,
    dra_devices,
    order_devices,
    pairwise_nvlink,
    resource_slices,
    semver,
)
from kubegpu.model.node import GpuUuid, Node
from kubegpu.sources.spec import load_node
from tests.unit.dra.fakes import big

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _groups(node: Node, key: str) -> list[list[int]]:
    out: dict[object, list[int]] = {}
    for d in dra_devices(node):
        out.setdefault(d.attribute(key), []).append(d.gpu_index)
    return sorted(out.values())


def test_seed_8gpu_has_two_nvlink_groups_that_are_domains_and_cliques() -> None:
    node = load_node("builtin:seed-8gpu")
    assert _groups(node, "nvlinkDomain") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert _groups(node, "nvlinkClique") == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_dgx1_hybrid_cube_mesh_is_one_domain_but_two_fully_connected_quads() -> None:
    node = load_node("builtin:dgx1-v100")
    assert _groups(node, "nvlinkDomain") == [list(range(8))]
    cliques = _groups(node, "nvlinkClique")
    assert cliques == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert node.topology is not None
    for clique in cliques:
        assert pairwise_nvlink(node.topology, clique)
    assert not pairwise_nvlink(node.topology, [0, 1, 2, 3, 4])


def test_nvswitch_node_is_one_clique_of_eight() -> None:
    node = load_node("builtin:dgx-h100")
    assert _groups(node, "nvlinkClique") == [list(range(8))]


def test_whole_gpu_attributes_and_capacity() -> None:
    node = load_node("builtin:dgx-h100")
    device = dra_devices(node, driver_version="535.104.05")[3].to_api()
    assert device["name"] == "gpu-3"
    attrs = device["attributes"]
    assert attrs["type"] == {"string": "gpu"}
    assert attrs["uuid"] == {"string": str(node.gpus[3].uuid)}
    assert attrs["index"] == {"int": 3}
    assert attrs["productName"]["string"].startswith("NVIDIA H100")
    assert attrs["architecture"] == {"string": "hopper"}
    assert attrs["cudaComputeCapability"] == {"version": "9.0.0"}
    assert attrs["driverVersion"] == {"version": "535.104.5"}  # semver has no leading zeros
    assert device["capacity"] == {"memory": {"value": f"{node.gpus[3].memory_mib}Mi"}}
    assert len(attrs) + len(device["capacity"]) <= 32


def test_mig_gpu_publishes_its_instances_not_itself() -> None:
    node = load_node("builtin:h100-mig-mixed")
    devices = dra_devices(node)
    mig_gpus = {g.index for g in node.gpus if g.mig_enabled}
    assert mig_gpus
    assert not any(d.kind is DeviceKind.GPU and d.gpu_index in mig_gpus for d in devices)
    migs = [d for d in devices if d.kind is DeviceKind.MIG]
    assert len(migs) == sum(len(g.mig_instances) for g in node.gpus if g.mig_enabled)
    one = migs[0].to_api()
    parent = node.gpus[migs[0].gpu_index]
    assert one["attributes"]["parentUUID"] == {"string": str(parent.uuid)}
    assert one["attributes"]["profile"]["string"] in {m.profile for m in parent.mig_instances}
    assert 0 < migs[0].memory_mib < parent.memory_mib
    names = [d.name for d in devices]
    assert len(set(names)) == len(names)
    assert all(DNS_LABEL.match(n) and len(n) <= 63 for n in names)


def test_served_gpus_can_be_restricted() -> None:
    node = load_node("builtin:seed-8gpu")
    assert [d.gpu_index for d in dra_devices(node, include=lambda g: g.index >= 6)] == [6, 7]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("550.54.15", "550.54.15"),
        ("535.104.05", "535.104.5"),
        ("9.0", "9.0.0"),
        ("12", "12.0.0"),
        ("x", None),
    ],
)
def test_semver(text: str, expected: str | None) -> None:
    assert semver(text) == expected


def test_slices_hold_at_most_128_devices_and_all_share_one_generation() -> None:
    devices = dra_devices(big(MAX_DEVICES_PER_SLICE + 5))
    slices = resource_slices(node_name="n1", node_uid="u-1", devices=devices, generation=7)
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 5]
    for s in slices:
        assert s["spec"]["driver"] == DRIVER_NAME
        assert s["spec"]["nodeName"] == "n1"
        assert s["spec"]["pool"] == {"name": "n1", "generation": 7, "resourceSliceCount": 2}
        assert s["metadata"]["ownerReferences"][0] == {
            "apiVersion": "v1",
            "kind": "Node",
            "name": "n1",
            "uid": "u-1",
            "controller": True,
        }
    assert len({s["metadata"]["name"] for s in slices}) == 2


def test_a_node_without_devices_still_has_an_empty_pool() -> None:
    slices = resource_slices(node_name="n1", node_uid=None, devices=(), generation=1)
    assert len(slices) == 1
    assert slices[0]["spec"]["devices"] == []
    assert "ownerReferences" not in slices[0]["metadata"]


def test_device_classes_select_by_driver_and_type() -> None:
    gpu, mig = device_classes()
    assert gpu["metadata"]["name"] == "gpu.kubegpu.io"
    assert mig["metadata"]["name"] == "mig.kubegpu.io"
    assert '.type == "gpu"' in gpu["spec"]["selectors"][0]["cel"]["expression"]
    assert '.type == "mig"' in mig["spec"]["selectors"][0]["cel"]["expression"]


def test_cdi_spec_has_one_device_per_request_with_its_uuids() -> None:
    node = load_node("builtin:seed-8gpu")
    d = dra_devices(node)
    spec = cdi_spec(
        "uid-1",
        [
            ClaimDevice(request="gpus", device=d[0]),
            ClaimDevice(request="gpus", device=d[1]),
            ClaimDevice(request="extra", device=d[5]),
        ],
        mounts=[("/host/nvidia-smi", "/usr/bin/nvidia-smi")],
    )
    assert spec["kind"] == CDI_KIND
    by_name = {e["name"]: e["containerEdits"] for e in spec["devices"]}
    assert set(by_name) == {
        cdi_device_name("uid-1", "gpus"),
        cdi_device_name("uid-1", "extra"),
        *(cdi_device_name_of("uid-1", x.name) for x in (d[0], d[1], d[5])),
    }
    assert by_name[cdi_device_name_of("uid-1", "gpu-5")]["env"] == [f"KUBEGPU_DEVICE_GPU_5={d[5].uuid}"]
    gpus = by_name[cdi_device_name("uid-1", "gpus")]
    assert f"NVIDIA_VISIBLE_DEVICES={d[0].uuid},{d[1].uuid}" in gpus["env"]
    assert gpus["mounts"][0]["containerPath"] == "/usr/bin/nvidia-smi"
    assert f"NVIDIA_VISIBLE_DEVICES={d[5].uuid}" in by_name[cdi_device_name("uid-1", "extra")]["env"]


# -- device order: the stock allocator's first fit over kubegpu's order is a best fit ----------------


def first_fit(order: Sequence[DraDevice], taken: set[str], count: int, match: str | None) -> list[str] | None:
    """The scheduler's DRA allocator for one request, as the reference describes it: the first solution
    in device order, backtracking; ``match`` is a matchAttribute constraint."""

    def search(start: int, picked: list[DraDevice]) -> list[DraDevice] | None:
        if len(picked) == count:
            return picked
        for i in range(start, len(order)):
            d = order[i]
            if d.name in taken or (match and picked and d.attribute(match) != picked[0].attribute(match)):
                continue
            found = search(i + 1, [*picked, d])
            if found is not None:
                return found
        return None

    found = search(0, [])
    return None if found is None else [d.name for d in found]


def run(order: DeviceOrder, steps: list[tuple[str, str, int]]) -> dict[str, list[str] | None]:
    """Claims arrive and leave (``+name``/``-name``); the driver re-orders after every change."""
    devices = dra_devices(load_node("builtin:seed-8gpu"))
    held: dict[str, list[str]] = {}
    got: dict[str, list[str] | None] = {}
    for op, name, count in steps:
        if op == "-":
            held.pop(name, None)
            continue
        taken = {d for ds in held.values() for d in ds}
        result = first_fit(order_devices(devices, taken, order), taken, count, "nvlinkClique")
        got[name] = result
        if result is not None:
            held[name] = result
    return got


STEPS = [("+", "a", 4), ("+", "b", 1), ("-", "a", 0), ("+", "c", 2), ("+", "d", 4)]


def test_stock_index_order_strands_a_four_gpu_claim_that_topology_order_places() -> None:
    stock = run(DeviceOrder.INDEX, STEPS)
    ours = run(DeviceOrder.TOPOLOGY, STEPS)
    assert stock["c"] == ["gpu-0", "gpu-1"]  # breaks the only whole clique
    assert stock["d"] is None  # 2 free in one clique, 3 in the other: no 4 anywhere
    assert ours["c"] == ["gpu-5", "gpu-6"]  # the fuller clique (gpu-4 is taken by b)
    assert ours["d"] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


def test_mig_instances_pack_onto_gpus_already_in_use() -> None:
    node = load_node("builtin:h100-mig-mixed")
    first = next(g for g in node.gpus if g.mig_enabled)
    other = next(g for g in node.gpus if not g.mig_enabled)
    twin = dataclasses.replace(
        other,
        mig_enabled=True,
        mig_instances=tuple(
            dataclasses.replace(m, uuid=GpuUuid(f"MIG-twin-{i}")) for i, m in enumerate(first.mig_instances)
        ),
    )
    node = dataclasses.replace(node, gpus=tuple(twin if g.index == other.index else g for g in node.gpus))
    devices = [d for d in dra_devices(node) if d.kind is DeviceKind.MIG]
    parents = sorted({d.gpu_index for d in devices})
    assert len(parents) == 2
    on_second = next(d for d in devices if d.gpu_index == parents[1])
    ordered = order_devices(devices, {on_second.name}, DeviceOrder.TOPOLOGY)
    free = [d for d in ordered if d.name != on_second.name]
    assert free[0].gpu_index == parents[1]


def test_allocated_devices_reads_this_pools_results_only() -> None:
    claims = [
        {
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"driver": DRIVER_NAME, "pool": "n1", "device": "gpu-1"},
                            {"driver": DRIVER_NAME, "pool": "n2", "device": "gpu-2"},
                            {"driver": "net.example.com", "pool": "n1", "device": "nic-0"},
                        ]
                    }
                }
            }
        },
        {"status": {}},
        {},
    ]
    assert allocated_devices(claims, pool="n1") == {"gpu-1"}


def test_real_gpus_get_their_device_nodes_in_the_cdi_spec() -> None:
    d = dra_devices(load_node("builtin:seed-8gpu"))
    spec = cdi_spec(
        "uid-1",
        [ClaimDevice(request="gpus", device=d[2]), ClaimDevice(request="gpus", device=d[3])],
        control_nodes=["/dev/nvidiactl", "/dev/nvidia-uvm"],
        gpu_nodes=True,
    )
    nodes = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert nodes == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia2", "/dev/nvidia3"]
    simulated = cdi_spec("uid-1", [ClaimDevice(request="gpus", device=d[2])])
    assert "deviceNodes" not in simulated["devices"][0]["containerEdits"]
