"""Planning a MIG repartition: which GPUs a named config changes, who is in the way, the node after."""

from __future__ import annotations

import pytest

from kubegpu.errors import InputError, MigLayoutError
from kubegpu.model.holder import DeviceHolder
from kubegpu.model.migplan import blocking_pods, gpu_matches, plan_transition, repartitioned
from kubegpu.model.node import GpuUuid
from kubegpu.sources.migparted import load_mig_parted, parse_mig_parted
from kubegpu.sources.spec import load_node

NODE = load_node("builtin:h100-mig-mixed")  # GPU 0: 3g.40gb + 2g.20gb + 2 x 1g.10gb; GPU 1 whole
DEFAULT = load_mig_parted("builtin:mig-parted-default")


def index_of() -> dict[str, int]:
    return {str(g.uuid): g.index for g in NODE.gpus} | {
        str(m.uuid): g.index for g in NODE.gpus for m in g.mig_instances
    }


def test_all_1g_10gb_changes_both_gpus_and_gives_seven_1g_instances_each() -> None:
    t = plan_transition(NODE, DEFAULT.config("all-1g.10gb"))
    assert t.affected == (0, 1)
    new = repartitioned(NODE, t, mig_uuid=lambda g, p: GpuUuid(f"MIG-{g.index}-{p.start_slot}"))
    for gpu in new.gpus:
        assert gpu.mig_enabled
        assert [m.profile for m in gpu.mig_instances] == ["1g.10gb"] * 7
        assert [m.start_slot for m in gpu.mig_instances] == list(range(7))
        assert [m.gi_index for m in gpu.mig_instances] == list(range(7))
    assert new.gpus[1].uuid == NODE.gpus[1].uuid  # the physical GPUs stay


def test_a_gpu_that_already_has_the_profiles_is_not_touched() -> None:
    t = plan_transition(NODE, DEFAULT.config("all-balanced"))
    assert t.affected == (1,)  # GPU 0 already is 3g + 2g + 2 x 1g, whatever the start slots
    new = repartitioned(NODE, t, mig_uuid=lambda g, p: GpuUuid(f"MIG-{g.index}-{p.start_slot}"))
    assert new.gpus[0] == NODE.gpus[0]
    assert sorted(m.profile for m in new.gpus[1].mig_instances) == [
        "1g.10gb",
        "1g.10gb",
        "2g.20gb",
        "3g.40gb",
    ]


def test_all_disabled_turns_mig_off_on_the_mig_gpu_only() -> None:
    t = plan_transition(NODE, DEFAULT.config("all-disabled"))
    assert t.affected == (0,)
    new = repartitioned(NODE, t, mig_uuid=lambda g, p: GpuUuid("MIG-x"))
    assert not new.gpus[0].mig_enabled and new.gpus[0].mig_instances == ()
    assert "GPU 0: MIG off" in t.describe()


def test_the_same_config_twice_changes_nothing() -> None:
    t = plan_transition(NODE, DEFAULT.config("all-1g.10gb"))
    new = repartitioned(NODE, t, mig_uuid=lambda g, p: GpuUuid(f"MIG-{g.index}-{p.start_slot}"))
    again = plan_transition(new, DEFAULT.config("all-1g.10gb"))
    assert again.affected == () and "already" in again.describe()


def test_a_layout_that_breaks_a_placement_rule_is_refused_naming_the_rule() -> None:
    bad = parse_mig_parted(
        "version: v1\nmig-configs:\n  four-2g:\n    - devices: all\n      mig-enabled: true\n"
        '      mig-devices: {"2g.20gb": 4}\n',
        origin="cm.yaml",
    )
    with pytest.raises(MigLayoutError, match=r"four-2g entry 0: GPU 0 .*at most 3"):
        plan_transition(NODE, bad.config("four-2g"))


def test_a_config_the_file_lacks_is_an_input_error_listing_the_names() -> None:
    with pytest.raises(InputError, match=r"has no config .no-such.*all-1g\.10gb"):
        DEFAULT.config("no-such")


def test_pods_holding_a_device_of_a_changed_gpu_block_others_do_not() -> None:
    mig0 = str(NODE.gpus[0].mig_instances[3].uuid)
    gpu1 = str(NODE.gpus[1].uuid)
    holders = [
        DeviceHolder(
            namespace="a", pod="on-mig", container="c", resource="nvidia.com/mig-1g.10gb", device_ids=(mig0,)
        ),
        DeviceHolder(
            namespace="b", pod="on-gpu1", container="c", resource="nvidia.com/gpu", device_ids=(f"{gpu1}::2",)
        ),
        DeviceHolder(
            namespace="c", pod="other", container="c", resource="example.com/x", device_ids=("X-1",)
        ),
    ]
    assert blocking_pods(holders, (0,), index_of()) == (("a", "on-mig"),)
    assert blocking_pods(holders, (1,), index_of()) == (("b", "on-gpu1"),)  # a replica of GPU 1
    assert blocking_pods(holders, (0, 1), index_of()) == (("a", "on-mig"), ("b", "on-gpu1"))
    assert blocking_pods(holders, (), index_of()) == ()


def test_gpu_matches_compares_mode_and_profiles() -> None:
    t = plan_transition(NODE, DEFAULT.config("all-1g.10gb"))
    target0 = t.desired.targets[0]
    assert not gpu_matches(NODE.gpus[0], target0)
    off = plan_transition(NODE, DEFAULT.config("all-disabled")).desired.targets
    assert gpu_matches(NODE.gpus[1], off[1]) and not gpu_matches(NODE.gpus[0], off[0])
