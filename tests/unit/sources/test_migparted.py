"""The mig-parted loader: as strict as mig-parted (unknown keys, wrong types, empty lists refused with
file:line: key), NVIDIA's format accepted as written, the builtin defaults valid on the models they
target, and what `kubegpu plan --emit` writes read back unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.errors import ConfigError, MigLayoutError
from kubegpu.model.gpu import gpu_model
from kubegpu.model.mig import mig_models
from kubegpu.model.migparted import PCI_SKUS, CheckStatus, check_config, desired_mig_layout, entry_models
from kubegpu.model.node import Gpu, GpuUuid, Node
from kubegpu.plan.emit import emit_serve, write_files
from kubegpu.plan.serve import ServeRequest, plan_serve
from kubegpu.sources.migparted import BUILTIN_DEFAULT, builtin_mig_configs, load_mig_parted, parse_mig_parted

NVIDIA_STYLE = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false

  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}

  all-balanced:
    - device-filter: ["0x233010DE", "0x233110DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
    - device-filter: "0x20B010DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1

  custom-config:
    - devices: [0, 1, 2, 3]
      mig-enabled: false
    - devices: [4]
      mig-enabled: true
      mig-devices:
        "1g.10gb+me": 1
        "1c.3g.40gb": 1
"""


def test_nvidias_format_is_read_with_filters_devices_and_profile_counts_in_file_order() -> None:
    parsed = parse_mig_parted(NVIDIA_STYLE, origin="config.yaml")
    assert parsed.names() == ("all-disabled", "all-enabled", "all-balanced", "custom-config")
    balanced = parsed.config("all-balanced")
    assert balanced.entries[0].device_filter == (0x233010DE, 0x233110DE)
    assert balanced.entries[1].device_filter == (0x20B010DE,)  # a single string is a one-item filter
    assert balanced.entries[0].mig_devices == (("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1))
    custom = parsed.config("custom-config")
    assert custom.entries[0].devices == (0, 1, 2, 3) and not custom.entries[0].mig_enabled
    assert custom.entries[1].mig_devices == (("1g.10gb+me", 1), ("1c.3g.40gb", 1))
    assert parsed.config("all-enabled").entries[0].devices is None
    assert balanced.entries[1].where == "config.yaml:20"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\n",
            "f.yaml:1: version: expected v1",
        ),
        ("version: v1\nmig-configs: {}\n", "f.yaml:2: mig-configs: expected a non-empty mapping"),
        ("version: v1\nmig-config: {}\n", "f.yaml:2: mig-config: unknown key"),
        ("version: v1\nmig-configs:\n  a: []\n", "f.yaml:3: mig-configs.a: expected a non-empty list"),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n"
            "      mig-devices: {1g.10gb: 7}\n      mig-device: {}\n",
            "f.yaml:7: mig-configs.a[0].mig-device: unknown key 'mig-device'",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n",
            "f.yaml:4: mig-configs.a[0]: every entry needs mig-enabled",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: yes please\n",
            "f.yaml:5: mig-configs.a[0].mig-enabled: expected true or false",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n",
            "f.yaml:4: mig-configs.a[0]: mig-enabled: true needs mig-devices",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n"
            "      mig-devices: {1g.10gb: 1}\n",
            "f.yaml:6: mig-configs.a[0].mig-devices: must be empty when mig-enabled is false",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: []\n      mig-enabled: false\n",
            "f.yaml:4: mig-configs.a[0].devices: an empty list",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: some\n      mig-enabled: false\n",
            "f.yaml:4: mig-configs.a[0].devices: expected 'all' or a list of GPU indices",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: [0, -1]\n      mig-enabled: false\n",
            "mig-configs.a[0].devices[1]: expected a GPU index",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: [1, 1]\n      mig-enabled: false\n",
            "mig-configs.a[0].devices[1]: GPU 1 is listed twice",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - device-filter: []\n      devices: all\n"
            "      mig-enabled: false\n",
            "f.yaml:4: mig-configs.a[0].device-filter: an empty list",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - device-filter: [0x233010DE]\n      devices: all\n"
            "      mig-enabled: false\n",
            "mig-configs.a[0].device-filter[0]: expected a PCI device ID such as 0x233010DE, got int",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n"
            "      mig-devices:\n        3g.40: 1\n",
            "f.yaml:7: mig-configs.a[0].mig-devices.3g.40: '3g.40' is not a MIG profile name",
        ),
        (
            "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n"
            "      mig-devices:\n        3g.40gb: two\n",
            "f.yaml:7: mig-configs.a[0].mig-devices.3g.40gb: expected a count",
        ),
        ("version: v1\nmig-configs: [\n", "f.yaml:"),
    ],
)
def test_malformed_files_are_refused_with_file_line_and_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_mig_parted(text, origin="f.yaml")
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_a_missing_file_and_an_unknown_builtin_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no such file"):
        load_mig_parted(str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match=r"builtins: builtin:mig-parted-default"):
        load_mig_parted("builtin:nope")


def test_an_unknown_config_name_lists_the_names_the_file_has() -> None:
    parsed = parse_mig_parted(NVIDIA_STYLE, origin="config.yaml")
    with pytest.raises(Exception, match=r"has no config 'all-7g.80gb'; it has: all-disabled, all-enabled"):
        parsed.config("all-7g.80gb")


def test_the_builtin_defaults_hold_nvidias_named_configs() -> None:
    assert "mig-parted-default" in builtin_mig_configs()
    names = set(load_mig_parted(BUILTIN_DEFAULT).names())
    assert {
        "all-disabled",
        "all-enabled",
        "all-1g.10gb",
        "all-balanced",
        "all-1g.5gb",
        "all-7g.141gb",
    } <= names


# Which models each builtin config is meant for (its profile names exist there).
TARGETS = {
    "A100-40GB": ["all-1g.5gb", "all-1g.5gb.me", "all-2g.10gb", "all-3g.20gb", "all-4g.20gb", "all-7g.40gb"],
    "A100-80GB": [
        "all-1g.10gb.me",
        "all-1g.20gb",
        "all-2g.20gb",
        "all-3g.40gb",
        "all-4g.40gb",
        "all-7g.80gb",
    ],
    "H200-141GB": [
        "all-1g.18gb",
        "all-1g.18gb.me",
        "all-1g.35gb",
        "all-2g.35gb",
        "all-3g.71gb",
        "all-4g.71gb",
    ],
}
TARGETS["H100-80GB"] = TARGETS["A100-80GB"]


@pytest.mark.parametrize("model", sorted(TARGETS))
def test_every_builtin_config_is_valid_on_the_models_it_targets_and_never_invalid(model: str) -> None:
    parsed = load_mig_parted(BUILTIN_DEFAULT)
    for name in [*TARGETS[model], "all-disabled", "all-enabled", "all-balanced", "all-1g.10gb"]:
        if name == "all-1g.10gb" and model == "H200-141GB":
            continue
        assert check_config(parsed.config(name), model).status is CheckStatus.VALID, (name, model)
    for config in parsed.configs:
        assert check_config(config, model).status is not CheckStatus.INVALID, config.name


def test_builtin_all_balanced_fills_every_slice_on_each_model() -> None:
    balanced = load_mig_parted(BUILTIN_DEFAULT).config("all-balanced")
    # every MIG model the builtin file's device filters name (the catalogue has more since issue 56)
    targeted = {s.model for s in PCI_SKUS.values() if s.model is not None}
    assert targeted <= set(mig_models())
    for model in sorted(targeted):
        check = check_config(balanced, model)
        (entry,) = check.entries  # exactly one entry's device filter names each model
        assert entry.placement is not None
        assert (entry.placement.memory_slices, entry.placement.compute_slices) == (8, 7), model


def test_builtin_all_1g_10gb_gives_7_on_80gb_boards_and_4_on_a100_40gb() -> None:
    config = load_mig_parted(BUILTIN_DEFAULT).config("all-1g.10gb")
    counts = {}
    for model in ("A100-40GB", "A100-80GB", "H100-80GB"):
        (entry,) = check_config(config, model).entries
        assert entry.placement is not None
        counts[model] = len(entry.placement.instances)
    assert counts == {"A100-40GB": 4, "A100-80GB": 7, "H100-80GB": 7}
    assert [entry_models(e) for e in config.entries] == [("A100-80GB", "H100-80GB"), ("A100-40GB",)]


@pytest.mark.parametrize("gpu", ["A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB"])
def test_what_plan_emit_writes_reads_back_as_one_valid_config(tmp_path: Path, gpu: str) -> None:
    plan = plan_serve(ServeRequest(model_gb=4, instances=2, gpu=gpu_model(gpu), multi_tenant=False))
    mig_options = [o for o in plan.options if o.mode.value == "mig" and o.fits and o.profile]
    assert mig_options, "the plan offers MIG options"
    for n, option in enumerate(mig_options):
        assert option.profile is not None
        write_files(tmp_path / str(n), emit_serve(plan, ["inference"], option))
        parsed = load_mig_parted(str(tmp_path / str(n) / "mig-parted.yaml"))
        (config,) = parsed.configs
        assert config.name == f"all-{option.profile}"
        (entry,) = config.entries
        assert entry.mig_devices == ((option.profile, option.instances_per_gpu),)
        assert check_config(config, gpu).status is CheckStatus.VALID, option.profile


def _node_of(model: str, n: int = 2) -> Node:
    gpus = tuple(
        Gpu(
            index=i,
            uuid=GpuUuid(f"GPU-{i:08d}-0000-0000-0000-000000000000"),
            model=model,
            memory_mib=gpu_model(model).memory_mib,
            numa_node=0,
            pci_bus_id=f"00000000:{0x18 + i:02X}:00.0",
        )
        for i in range(n)
    )
    return Node(name="n", gpus=gpus, topology=None)


@pytest.mark.parametrize("model", mig_models())
def test_what_validate_calls_valid_the_manager_applies_and_what_is_not_applicable_it_refuses(
    model: str,
) -> None:
    """`kubegpu mig validate FILE` and `desired_mig_layout` agree on every builtin config and model."""
    node = _node_of(model)
    for config in load_mig_parted(BUILTIN_DEFAULT).configs:
        check = check_config(config, model)
        if check.status is CheckStatus.VALID:
            layout = desired_mig_layout(node, config)
            assert [t.index for t in layout.targets] == [0, 1], config.name
            (entry,) = check.entries
            assert all(t.placement == entry.placement for t in layout.targets), config.name
        elif check.entries:  # not applicable: the profiles do not exist on this model
            with pytest.raises(MigLayoutError, match="has no MIG profile"):
                desired_mig_layout(node, config)
        else:  # no entry's device filter names this model: the node keeps its layout
            assert desired_mig_layout(node, config).unchanged == (0, 1)
