"""What a named mig-parted config asks of a node: which GPUs get which placed instances, which keep
their layout, and refusals that name the GPU, the profile and the rule."""

from __future__ import annotations

import pytest

from kubegpu.errors import MigLayoutError
from kubegpu.model.mig import mig_models
from kubegpu.model.migparted import (
    PCI_SKUS,
    CheckStatus,
    MigConfig,
    MigConfigEntry,
    check_config,
    desired_mig_layout,
    entry_models,
    format_device_id,
    gi_profile_name,
)
from kubegpu.model.node import Gpu, GpuUuid, Node

H100_SXM = 0x233010DE
H100_PCIE = 0x233110DE
A100_40 = 0x20B010DE
A30 = 0x20B710DE


def node(*models: str) -> Node:
    gpus = tuple(
        Gpu(
            index=i,
            uuid=GpuUuid(f"GPU-{i:08d}-0000-0000-0000-000000000000"),
            model=m,
            memory_mib=81920,
            numa_node=0,
            pci_bus_id=f"00000000:{0x18 + i:02X}:00.0",
        )
        for i, m in enumerate(models)
    )
    return Node(name="n", gpus=gpus, topology=None)


def entry(
    profiles: dict[str, int] | None = None,
    *,
    devices: tuple[int, ...] | None = None,
    device_filter: tuple[int, ...] = (),
    enabled: bool = True,
) -> MigConfigEntry:
    return MigConfigEntry(
        device_filter=device_filter,
        devices=devices,
        mig_enabled=enabled,
        mig_devices=tuple((profiles or {}).items()),
    )


def test_all_1g_10gb_puts_seven_instances_on_every_h100_at_slots_0_to_6() -> None:
    config = MigConfig(name="all-1g.10gb", entries=(entry({"1g.10gb": 7}),))
    layout = desired_mig_layout(node("H100-80GB", "H100-80GB"), config)
    assert [t.index for t in layout.targets] == [0, 1] and layout.unchanged == ()
    for target in layout.targets:
        assert target.placement is not None
        assert sorted(i.start_slot for i in target.placement.instances) == [0, 1, 2, 3, 4, 5, 6]


def test_gpus_no_entry_matches_keep_their_layout() -> None:
    config = MigConfig(name="half", entries=(entry({"3g.40gb": 2}, devices=(0, 2)),))
    layout = desired_mig_layout(node("H100-80GB", "H100-80GB", "H100-80GB"), config)
    assert [t.index for t in layout.targets] == [0, 2]
    assert layout.unchanged == (1,)


def test_an_index_the_node_lacks_matches_nothing() -> None:
    config = MigConfig(name="x", entries=(entry({"7g.80gb": 1}, devices=(5,)),))
    layout = desired_mig_layout(node("H100-80GB"), config)
    assert layout.targets == () and layout.unchanged == (0,)


def test_device_filter_matches_by_model_without_ids_and_by_exact_id_with_them() -> None:
    config = MigConfig(name="sxm-only", entries=(entry({"7g.80gb": 1}, device_filter=(H100_SXM,)),))
    two = node("H100-80GB", "H100-80GB")
    # Without PCI IDs both H100s are H100-80GB, the model 0x233010DE maps to.
    assert [t.index for t in desired_mig_layout(two, config).targets] == [0, 1]
    # With IDs from NVML, only the SXM board matches; the PCIe one keeps its layout.
    layout = desired_mig_layout(two, config, device_ids={0: H100_PCIE, 1: H100_SXM})
    assert [t.index for t in layout.targets] == [1] and layout.unchanged == (0,)


def test_per_sku_entries_give_each_model_its_own_layout() -> None:
    config = MigConfig(
        name="all-balanced",
        entries=(
            entry({"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}, device_filter=(A100_40,)),
            entry({"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}, device_filter=(H100_SXM, H100_PCIE)),
        ),
    )
    layout = desired_mig_layout(node("A100-40GB", "H100-80GB", "L40S"), config)
    by_gpu = {t.index: t for t in layout.targets}
    assert by_gpu[0].entry == 0 and by_gpu[1].entry == 1
    assert layout.unchanged == (2,)  # the L40S matches neither filter
    p = by_gpu[1].placement
    assert p is not None
    assert [str(i) for i in p.instances] == ["1g.10gb@2", "1g.10gb@3", "2g.20gb@0", "3g.40gb@4"]


def test_a_profile_the_model_lacks_is_refused_naming_gpu_and_profile() -> None:
    config = MigConfig(name="all-1g.10gb", entries=(entry({"1g.10gb": 7}),))
    with pytest.raises(MigLayoutError) as exc:
        desired_mig_layout(node("H100-80GB", "H200-141GB"), config)
    message = str(exc.value)
    assert "all-1g.10gb entry 0: GPU 1 (H200-141GB)" in message and "no MIG profile '1g.10gb'" in message


def test_a_count_over_the_max_is_refused_naming_the_rule() -> None:
    # 1g.10gb is the double-memory 1g on an A100-40GB: at most 4 fit.
    config = MigConfig(name="all-1g.10gb", entries=(entry({"1g.10gb": 7}),))
    with pytest.raises(MigLayoutError, match=r"GPU 0 \(A100-40GB\): 1g.10gb appears 7 times, but at most 4"):
        desired_mig_layout(node("A100-40GB"), config)


def test_a_layout_over_the_memory_slices_is_refused() -> None:
    config = MigConfig(name="x", entries=(entry({"3g.40gb": 2, "1g.10gb": 1}),))
    with pytest.raises(MigLayoutError, match=r"GPU 0 .*needs 9 memory slices, but a H100-80GB has 8"):
        desired_mig_layout(node("H100-80GB"), config)


def test_mig_on_a_gpu_without_mig_is_refused_but_disabling_it_is_fine() -> None:
    on = MigConfig(name="all-enabled", entries=(entry({}),))
    with pytest.raises(MigLayoutError, match=r"GPU 1 is a L40S, which does not support MIG"):
        desired_mig_layout(node("H100-80GB", "L40S"), on)
    off = MigConfig(name="all-disabled", entries=(entry(enabled=False),))
    layout = desired_mig_layout(node("H100-80GB", "L40S"), off)
    assert [(t.index, t.mig_enabled, t.placement) for t in layout.targets] == [
        (0, False, None),
        (1, False, None),
    ]


def test_a_gpu_matched_by_two_entries_is_refused() -> None:
    config = MigConfig(name="x", entries=(entry({"7g.80gb": 1}), entry({"3g.40gb": 2}, devices=(0,))))
    with pytest.raises(MigLayoutError, match=r"GPU 0 .* matched by entries 0 and 1"):
        desired_mig_layout(node("H100-80GB"), config)


def test_a_compute_instance_prefix_places_its_gpu_instance_and_may_not_exceed_it() -> None:
    assert gi_profile_name("1c.3g.40gb") == ("3g.40gb", 1)
    ok = MigConfig(name="ci", entries=(entry({"1c.3g.40gb": 1, "2c.3g.40gb": 1}),))
    (target,) = desired_mig_layout(node("H100-80GB"), ok).targets
    assert target.placement is not None
    assert sorted(i.start_slot for i in target.placement.instances) == [0, 4]
    bad = MigConfig(name="ci", entries=(entry({"4c.3g.40gb": 1}),))
    with pytest.raises(MigLayoutError, match=r"4-slice compute instance does not fit in 3g.40gb"):
        desired_mig_layout(node("H100-80GB"), bad)


def test_entry_models_follow_the_pci_table_and_skip_ids_without_a_model() -> None:
    assert entry_models(entry({}, device_filter=(A100_40, H100_PCIE))) == ("A100-40GB", "H100-80GB")
    assert entry_models(entry({}, device_filter=(A30,))) == ()
    # a filter-free entry is for every MIG model of the catalogue (grown with issue 56)
    assert entry_models(entry({})) == mig_models()
    assert entry_models(entry({}))[:4] == ("A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB")


def test_every_pci_table_id_is_nvidias_vendor_and_maps_to_a_mig_model_or_none() -> None:
    for device_id, sku in PCI_SKUS.items():
        assert device_id & 0xFFFF == 0x10DE, format_device_id(device_id)
        assert sku.model in (None, "A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB")
    assert format_device_id(H100_SXM) == "0x233010DE"


def test_check_config_separates_invalid_from_not_applicable() -> None:
    config = MigConfig(name="all-2g.20gb", entries=(entry({"2g.20gb": 4}),))
    assert check_config(config, "H100-80GB").status is CheckStatus.INVALID
    na = check_config(config, "A100-40GB")
    assert na.status is CheckStatus.NOT_APPLICABLE
    assert na.entries[0].reason == "A100-40GB has no MIG profile 2g.20gb"
    filtered = MigConfig(name="a30", entries=(entry({"1g.6gb": 4}, device_filter=(A30,)),))
    assert check_config(filtered, "H100-80GB").entries == ()
