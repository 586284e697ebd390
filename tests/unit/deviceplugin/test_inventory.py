"""The inventory: resource names, device IDs, MIG strategies and sharing as NVIDIA defines them."""

from __future__ import annotations

import pytest

from kubegpu.deviceplugin.config import (
    AgentConfig,
    DeviceIdStrategy,
    MigStrategy,
    SharedResource,
    Sharing,
    SharingKind,
)
from kubegpu.deviceplugin.inventory import (
    Candidate,
    Resource,
    ResourceKind,
    ResourceName,
    build_inventory,
    check_names,
    is_extended_resource_name,
    mig_resource_name,
    resolve_sharing,
    split_resources,
)
from kubegpu.errors import ConfigError
from kubegpu.model.node import Gpu, GpuUuid, MigInstance, Node
from kubegpu.sources.spec import load_node

SEED = load_node("builtin:seed-8gpu")
MIG = load_node("builtin:h100-mig-mixed")


def _gpu(index: int, *, mig: tuple[str, ...] | None = None) -> Gpu:
    instances = tuple(
        MigInstance(profile=p, start_slot=i, uuid=GpuUuid(f"MIG-{index}-{i}"), gi_index=i)
        for i, p in enumerate(mig or ())
    )
    return Gpu(
        index=index,
        uuid=GpuUuid(f"GPU-{index}"),
        model="A100-SXM4-40GB",
        memory_mib=40960,
        numa_node=index // 2,
        pci_bus_id=f"00000000:{index:02x}:00.0",
        mig_enabled=mig is not None,
        mig_instances=instances,
    )


def _node(*gpus: Gpu) -> Node:
    return Node(name="n", gpus=gpus, topology=None)


def _shared(replicas: int = 4, **kw: object) -> AgentConfig:
    sharing = Sharing(
        kind=SharingKind.TIME_SLICING,
        rename_by_default=bool(kw.pop("rename", False)),
        fail_requests_greater_than_one=False,
        resources=(
            SharedResource(name="nvidia.com/gpu", replicas=replicas, rename=kw.pop("rename_to", None)),
        ),  # type: ignore[arg-type]
        per_gpu_replicas=kw.pop("per_gpu", ()),  # type: ignore[arg-type]
        exclusive=kw.pop("exclusive", ()),  # type: ignore[arg-type]
    )
    return AgentConfig(sharing=sharing)


def test_full_gpus_are_nvidia_com_gpu_with_uuid_ids_and_numa() -> None:
    inventory = build_inventory(SEED, AgentConfig())
    [resource] = inventory.resources
    assert resource.name == "nvidia.com/gpu"
    assert [d.id for d in resource.devices] == [g.uuid for g in SEED.gpus]
    assert [d.numa_node for d in resource.devices] == [g.numa_node for g in SEED.gpus]


def test_mig_strategy_none_advertises_mig_enabled_gpus_whole() -> None:
    [resource] = build_inventory(MIG, AgentConfig()).resources
    assert len(resource.devices) == len(MIG.gpus)
    assert resource.kind is ResourceKind.GPU


def test_mig_strategy_mixed_gives_one_resource_per_profile() -> None:
    inventory = build_inventory(MIG, AgentConfig(mig_strategy=MigStrategy.MIXED))
    names = {r.name: len(r.devices) for r in inventory.resources}
    assert names == {
        "nvidia.com/mig-3g.40gb": 1,
        "nvidia.com/mig-2g.20gb": 1,
        "nvidia.com/mig-1g.10gb": 2,
        "nvidia.com/gpu": 1,
    }
    mig = inventory.resource("nvidia.com/mig-1g.10gb")
    assert mig is not None and mig.kind is ResourceKind.MIG
    assert [d.visible_id(DeviceIdStrategy.INDEX) for d in mig.devices] == ["0:2", "0:3"]
    assert mig_resource_name("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"


def test_mig_strategy_single_uses_mig_devices_as_gpus() -> None:
    node = _node(_gpu(0, mig=("1g.5gb",) * 7), _gpu(1, mig=("1g.5gb",) * 7))
    [resource] = build_inventory(node, AgentConfig(mig_strategy=MigStrategy.SINGLE)).resources
    assert resource.name == "nvidia.com/gpu"
    assert len(resource.devices) == 14
    assert resource.devices[0].id == "MIG-0-0"


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (_node(_gpu(0, mig=("1g.5gb",)), _gpu(1)), "MIG disabled"),
        (_node(_gpu(0, mig=())), "no MIG instances"),
        (_node(_gpu(0, mig=("1g.5gb", "2g.10gb"))), "one profile"),
    ],
)
def test_mig_strategy_single_rejects_what_nvidia_rejects(node: Node, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_inventory(node, AgentConfig(mig_strategy=MigStrategy.SINGLE))


def test_mixed_warns_about_a_mig_gpu_without_instances() -> None:
    inventory = build_inventory(_node(_gpu(0, mig=()), _gpu(1)), AgentConfig(mig_strategy=MigStrategy.MIXED))
    assert [r.name for r in inventory.resources] == ["nvidia.com/gpu"]
    assert any("no MIG instances" in w for w in inventory.warnings)


def test_replicas_get_uuid_colon_colon_i_ids_and_keep_their_gpu() -> None:
    [resource] = build_inventory(SEED, _shared(3)).resources
    assert resource.name == "nvidia.com/gpu"
    assert len(resource.devices) == 24
    first = resource.devices[:3]
    assert [d.id for d in first] == [f"{SEED.gpus[0].uuid}::{i}" for i in range(3)]
    assert {d.gpu for d in first} == {0}
    assert resource.sharing is SharingKind.TIME_SLICING


def test_rename_by_default_adds_dot_shared() -> None:
    [resource] = build_inventory(SEED, _shared(2, rename=True)).resources
    assert resource.name == "nvidia.com/gpu.shared"


def test_per_gpu_replicas_and_exclusive_gpus() -> None:
    config = _shared(4, rename=True, per_gpu=(("0", 8), (str(SEED.gpus[1].uuid), 2)), exclusive=("6", "7"))
    inventory = build_inventory(SEED, config)
    exclusive = inventory.resource("nvidia.com/gpu")
    shared = inventory.resource("nvidia.com/gpu.shared")
    assert exclusive is not None and [d.gpu for d in exclusive.devices] == [6, 7]
    assert shared is not None
    assert shared.replicas_per_gpu == {0: 8, 1: 2, 2: 4, 3: 4, 4: 4, 5: 4}


def test_unknown_gpu_references_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"kubegpu.sharing.exclusive\[0\]: no GPU 9"):
        build_inventory(SEED, _shared(2, rename=True, exclusive=("9",)))
    with pytest.raises(ConfigError, match="no GPU with UUID 'GPU-nope'"):
        build_inventory(SEED, _shared(2, per_gpu=(("GPU-nope", 2),)))


def test_kubegpu_rename_names_the_shared_resource_and_exclusive_gpus_keep_the_original() -> None:
    config = _shared(2, rename_to="nvidia.com/gpu-ts", exclusive=("7",))
    inventory = build_inventory(SEED, config)
    shared = inventory.resource("nvidia.com/gpu-ts")
    whole = inventory.resource("nvidia.com/gpu")
    assert shared is not None and set(shared.replicas_per_gpu) == set(range(7))
    assert whole is not None and [d.gpu for d in whole.devices] == [7]


def test_exclusive_gpus_under_the_shared_name_are_refused_naming_both_ways_out() -> None:
    with pytest.raises(ConfigError, match=r"renameByDefault: true or kubegpu\.sharing\.rename"):
        build_inventory(SEED, _shared(2, exclusive=("7",)))


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/mig-1g.10gb", True),
        ("nvidia.com/gpu.shared", True),
        ("gpu", False),
        ("Example.com/gpu", False),
        ("foo.kubernetes.io/gpu", False),
        ("requests.nvidia.com/gpu", False),
        ("nvidia.com/" + "x" * 64, False),
    ],
)
def test_extended_resource_name_rule(name: str, ok: bool) -> None:
    assert is_extended_resource_name(name) is ok


@pytest.mark.parametrize("uuid", ["GPU-../../etc", "GPU-a,b", "GPU-a\nb", "", "GPU-" + "x" * 100])
def test_unsafe_uuids_from_any_source_are_refused_before_they_become_device_ids(uuid: str) -> None:
    from dataclasses import replace

    from kubegpu.errors import SourceError

    node = Node(name="n", gpus=(_gpu(0), replace(_gpu(1), uuid=GpuUuid(uuid))), topology=None)
    with pytest.raises(SourceError, match="GPU 1: UUID") as info:
        build_inventory(node, AgentConfig())
    assert len(str(info.value)) < 300
    mig = replace(
        _gpu(0, mig=("1g.5gb",)),
        mig_instances=(MigInstance(profile="1g.5gb", start_slot=0, uuid=GpuUuid(uuid), gi_index=0),),
    )
    with pytest.raises(SourceError, match="GPU 0: MIG instance UUID"):
        build_inventory(Node(name="n", gpus=(mig,), topology=None), AgentConfig())


def test_old_drivers_mig_uuids_are_accepted() -> None:
    from dataclasses import replace

    legacy = GpuUuid("MIG-GPU-b8ea3855-276c-c9cb-b366-c6fa655957c5/1/0")
    gpu = replace(
        _gpu(0, mig=("1g.5gb",)),
        mig_instances=(MigInstance(profile="1g.5gb", start_slot=0, uuid=legacy, gi_index=0),),
    )
    inventory = build_inventory(
        Node(name="n", gpus=(gpu,), topology=None), AgentConfig(mig_strategy=MigStrategy.MIXED)
    )
    assert [d.id for r in inventory.resources for d in r.devices] == [legacy]


# --- the three steps of build_inventory: resolve sharing -> split resources -> check names ----------


def _sharing(config: AgentConfig) -> Sharing:
    assert config.sharing is not None
    return config.sharing


def test_resolve_sharing_without_sharing_is_none() -> None:
    assert resolve_sharing(SEED, None) is None


def test_resolve_sharing_turns_gpu_indices_and_gpu_or_mig_uuids_into_gpu_indices() -> None:
    mig_uuid = MIG.gpus[0].mig_instances[0].uuid
    sharing = _sharing(_shared(4, rename=True, per_gpu=(("0", 8), (mig_uuid, 3)), exclusive=("1",)))
    plan = resolve_sharing(MIG, sharing)
    assert plan is not None
    assert dict(plan.per_gpu_replicas) == {0: 3}  # GPU 0 named twice: the later entry wins, as before
    assert plan.exclusive == frozenset({1})
    seed = resolve_sharing(SEED, _sharing(_shared(2, rename=True, per_gpu=((str(SEED.gpus[5].uuid), 3),))))
    assert seed is not None and dict(seed.per_gpu_replicas) == {5: 3}


def test_resolve_sharing_refuses_gpus_the_node_lacks_naming_the_key() -> None:
    with pytest.raises(
        ConfigError, match=r"kubegpu\.sharing\.replicas\.8: no GPU 8 on this node \(GPUs 0\.\.7\)"
    ):
        resolve_sharing(SEED, _sharing(_shared(2, per_gpu=(("8", 2),))))
    with pytest.raises(ConfigError, match=r"kubegpu\.sharing\.exclusive\[0\]: no GPU with UUID 'GPU-x'"):
        resolve_sharing(SEED, _sharing(_shared(2, rename=True, exclusive=("GPU-x",))))


@pytest.mark.parametrize(
    ("config", "name", "key"),
    [
        (_shared(2), "nvidia.com/gpu", "sharing.timeSlicing.resources[0].name"),
        (_shared(2, rename=True), "nvidia.com/gpu.shared", "sharing.timeSlicing.resources[0].name"),
        (
            _shared(2, rename=True, rename_to="nvidia.com/ts"),
            "nvidia.com/ts",
            "kubegpu.sharing.rename.nvidia.com/gpu",
        ),
    ],
)
def test_resolve_sharing_names_replicas_by_rename_then_rename_by_default_then_the_name(
    config: AgentConfig, name: str, key: str
) -> None:
    plan = resolve_sharing(SEED, _sharing(config))
    assert plan is not None
    shared = plan.resources[ResourceName("nvidia.com/gpu")]
    assert (shared.name, shared.name_key, shared.replicas) == (name, key, 2)


def test_split_without_sharing_gives_the_mig_strategys_resources_whole() -> None:
    candidates, warnings = split_resources(MIG, MigStrategy.MIXED, None)
    assert {c.resource.name: len(c.resource.devices) for c in candidates} == {
        "nvidia.com/mig-3g.40gb": 1,
        "nvidia.com/mig-2g.20gb": 1,
        "nvidia.com/mig-1g.10gb": 2,
        "nvidia.com/gpu": 1,
    }
    assert all(c.name_key is None and c.resource.sharing is None for c in candidates)
    assert warnings == []


def test_split_replicates_shared_devices_and_keeps_exclusive_gpus_under_the_original_name() -> None:
    config = _shared(4, rename=True, per_gpu=(("0", 8),), exclusive=("6", "7"))
    candidates, _ = split_resources(SEED, MigStrategy.NONE, resolve_sharing(SEED, _sharing(config)))
    by_name = {c.resource.name: c for c in candidates}
    assert [d.gpu for d in by_name["nvidia.com/gpu"].resource.devices] == [6, 7]
    shared = by_name["nvidia.com/gpu.shared"]
    assert shared.resource.replicas_per_gpu == {0: 8, 1: 4, 2: 4, 3: 4, 4: 4, 5: 4}
    assert shared.resource.sharing is SharingKind.TIME_SLICING
    assert shared.name_key == "sharing.timeSlicing.resources[0].name"


def test_split_keeps_an_all_exclusive_shared_resource_empty_so_its_name_is_still_checked() -> None:
    config = _shared(2, rename=True, exclusive=tuple(str(i) for i in range(8)))
    candidates, _ = split_resources(SEED, MigStrategy.NONE, resolve_sharing(SEED, _sharing(config)))
    assert [(c.resource.name, len(c.resource.devices)) for c in candidates] == [
        ("nvidia.com/gpu", 8),
        ("nvidia.com/gpu.shared", 0),
    ]


def test_split_warns_about_a_shared_resource_the_node_does_not_advertise() -> None:
    sharing = Sharing(
        kind=SharingKind.TIME_SLICING,
        rename_by_default=False,
        fail_requests_greater_than_one=False,
        resources=(SharedResource(name="nvidia.com/mig-1g.10gb", replicas=2),),
    )
    candidates, warnings = split_resources(SEED, MigStrategy.NONE, resolve_sharing(SEED, sharing))
    assert [c.resource.name for c in candidates] == ["nvidia.com/gpu"]
    assert warnings == [
        "sharing.timeSlicing.resources[0]: nvidia.com/mig-1g.10gb is not advertised on this node; ignored"
    ]


def test_split_refuses_mps_with_mig_devices() -> None:
    sharing = Sharing(
        kind=SharingKind.MPS,
        rename_by_default=False,
        fail_requests_greater_than_one=True,
        resources=(SharedResource(name="nvidia.com/gpu", replicas=2),),
    )
    with pytest.raises(ConfigError, match=r"sharing\.mps: MPS sharing is not supported with MIG devices"):
        split_resources(MIG, MigStrategy.MIXED, resolve_sharing(MIG, sharing))


def test_split_refuses_exclusive_and_shared_gpus_under_one_name() -> None:
    plan = resolve_sharing(SEED, _sharing(_shared(2, exclusive=("7",))))
    with pytest.raises(ConfigError, match=r"sharing\.timeSlicing\.resources\[0\]: some GPUs stay unshared"):
        split_resources(SEED, MigStrategy.NONE, plan)


def _candidate(name: str, devices: int = 1, key: str | None = None) -> Candidate:
    whole = build_inventory(SEED, AgentConfig()).resources[0].devices
    resource = Resource(name=ResourceName(name), kind=ResourceKind.GPU, devices=whole[:devices])
    return Candidate(resource=resource, name_key=key)


def test_check_names_refuses_an_invalid_name_from_the_config_naming_its_key() -> None:
    with pytest.raises(ConfigError, match=r"kubegpu\.sharing\.rename\.nvidia\.com/gpu: 'nvidia\.com/Bad_'"):
        check_names(
            [
                _candidate("nvidia.com/gpu"),
                _candidate("nvidia.com/Bad_", 0, "kubegpu.sharing.rename.nvidia.com/gpu"),
            ]
        )


def test_check_names_refuses_two_resources_with_one_name() -> None:
    with pytest.raises(ConfigError, match=r"two resources would both be called nvidia\.com/gpu-ts"):
        check_names(
            [_candidate("nvidia.com/gpu-ts"), _candidate("nvidia.com/gpu-ts", 2, "kubegpu.sharing.rename.x")]
        )


def test_check_names_accepts_distinct_names_and_an_empty_resource_is_no_collision() -> None:
    check_names([_candidate("nvidia.com/gpu"), _candidate("nvidia.com/gpu.shared", 2, "k")])
    check_names([_candidate("nvidia.com/gpu", 8), _candidate("nvidia.com/gpu", 0, "k")])
