"""Config loading: NVIDIA's v1 file as is, kubegpu's section, CLI > env > file, errors name the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubegpu.deviceplugin.config import (
    AgentConfig,
    DeviceIdStrategy,
    DeviceListStrategy,
    MigStrategy,
    SharingKind,
    load_config,
)
from kubegpu.errors import ConfigError
from kubegpu.health.policy import EccAction, WatcherFailureAction
from kubegpu.health.xid import XidVerdict


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_defaults_are_nvidias_defaults() -> None:
    config = load_config()
    assert config == AgentConfig()
    assert config.mig_strategy is MigStrategy.NONE
    assert config.device_list_strategies == (DeviceListStrategy.ENVVAR,)
    assert config.device_id_strategy is DeviceIdStrategy.UUID
    assert config.cdi_annotation_prefix == "cdi.k8s.io/"
    assert config.replica_policy == "distributed"
    assert config.fail_on_init_error is True
    assert config.pass_device_specs is False


def test_nvidia_example_file_is_accepted_as_is(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
version: v1
flags:
  migStrategy: mixed
  failOnInitError: true
  nvidiaDriverRoot: /run/nvidia/driver
  plugin:
    passDeviceSpecs: true
    deviceListStrategy: [envvar, cdi-annotations]
    deviceIDStrategy: index
    nvidiaCTKPath: /usr/bin/nvidia-ctk
  gfd:
    oneshot: false
resources:
  gpus:
  - pattern: "*"
    name: gpu
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
""",
    )
    config = load_config(path)
    assert config.mig_strategy is MigStrategy.MIXED
    assert config.nvidia_dev_root == "/run/nvidia/driver"  # defaults to the driver root
    assert config.device_list_strategies == (DeviceListStrategy.ENVVAR, DeviceListStrategy.CDI_ANNOTATIONS)
    assert config.device_id_strategy is DeviceIdStrategy.INDEX
    assert config.sharing is not None and config.sharing.kind is SharingKind.TIME_SLICING
    assert config.sharing.fail_requests_greater_than_one is False
    assert any("flags.gfd" in w for w in config.warnings)
    assert any("resources" in w for w in config.warnings)


def test_json_files_and_comma_strings_are_accepted(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        json.dumps({"version": "v1", "flags": {"plugin": {"deviceListStrategy": "volume-mounts,cdi-cri"}}}),
        "config.json",
    )
    assert load_config(path).device_list_strategies == (
        DeviceListStrategy.VOLUME_MOUNTS,
        DeviceListStrategy.CDI_CRI,
    )


def test_cli_beats_env_beats_file(tmp_path: Path) -> None:
    path = write(
        tmp_path, "version: v1\nflags:\n  migStrategy: single\n  plugin:\n    deviceIDStrategy: index\n"
    )
    assert load_config(path).mig_strategy is MigStrategy.SINGLE
    assert load_config(path, env={"MIG_STRATEGY": "mixed"}).mig_strategy is MigStrategy.MIXED
    config = load_config(
        path, env={"MIG_STRATEGY": "mixed"}, cli={"mig_strategy": "none", "device_id_strategy": None}
    )
    assert config.mig_strategy is MigStrategy.NONE
    assert config.device_id_strategy is DeviceIdStrategy.INDEX  # a flag not given does not override


V1 = "version: v1\n"
SLICE = "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {n}\n"
BAD = [
    (V1 + "flags:\n  plugin:\n    deviceListStrategy: [envvar, pigeon]\n", {}, {},
     ["flags.plugin.deviceListStrategy[1]", "'pigeon'", "cdi-annotations"]),
    ("version: v2\n", {}, {}, ["version", "v1"]),
    (V1 + "flags:\n  migStrategy: sometimes\n", {}, {}, ["flags.migStrategy", "none, single, mixed"]),
    (V1, {"DEVICE_ID_STRATEGY": "serial"}, {}, ["env DEVICE_ID_STRATEGY", "uuid, index"]),
    (V1, {}, {"pass_device_specs": "maybe"}, ["--pass-device-specs", "true, false"]),
    (V1 + "kubegpu:\n  allocationPolicy: random\n", {}, {}, ["kubegpu.allocationPolicy", "simple, topology"]),
    (V1 + "kubegpu:\n  colour: blue\n", {}, {}, ["kubegpu.colour", "unknown key", "allocationPolicy"]),
    (V1 + "kubegpu:\n  health:\n    fatalXids: [79, x]\n", {}, {}, ["kubegpu.health.fatalXids[1]"]),
    (V1 + SLICE.format(n=1), {}, {}, ["sharing.timeSlicing.resources[0].replicas", "at least 2"]),
    (V1 + "flags:\n  plugin:\n    sharedDevicesAllocationPolicy: packed\n"
     "kubegpu:\n  replicaPolicy: distributed\n",
     {}, {}, ["kubegpu.replicaPolicy", "contradicts"]),
    (V1 + SLICE.format(n=2).replace("timeSlicing", "mps"), {}, {}, ["sharing.mps", "mpsRoot"]),
    (V1 + SLICE.format(n=2) + "kubegpu:\n  sharing:\n    exclusive: [1]\n", {}, {},
     ["renameByDefault", "kubegpu.sharing.rename"]),
    (V1 + SLICE.format(n=2) + "kubegpu:\n  sharing:\n    rename: {nvidia.com/other: other-ts}\n", {}, {},
     ["kubegpu.sharing.rename.nvidia.com/other", "not shared", "nvidia.com/gpu"]),
    (V1 + SLICE.format(n=2) + "kubegpu:\n  sharing:\n    rename: {gpu: Bad_Name}\n", {}, {},
     ["kubegpu.sharing.rename.gpu", "nvidia.com/Bad_Name"]),
    (V1 + SLICE.format(n=2) + "kubegpu:\n  sharing:\n    rename: [gpu-ts]\n", {}, {},
     ["kubegpu.sharing.rename", "mapping"]),
]  # fmt: skip


@pytest.mark.parametrize(("text", "env", "cli", "names"), BAD)
def test_invalid_values_name_the_key_path_and_the_allowed_values(
    tmp_path: Path, text: str, env: dict[str, str], cli: dict[str, object], names: list[str]
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path, env=env, cli=cli)
    for name in names:
        assert name in str(err.value)


def test_yaml_syntax_errors_name_the_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "version: v1\nflags:\n  migStrategy: [none\n")
    with pytest.raises(ConfigError, match=r"config\.yaml:\d+: not valid YAML"):
        load_config(path)


def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path: Path) -> None:
    # YAML's loader would keep the second migStrategy silently: the agent would run another strategy
    path = write(tmp_path, "version: v1\nflags:\n  migStrategy: single\n  migStrategy: mixed\n")
    with pytest.raises(ConfigError, match=r"config\.yaml:4: flags\.migStrategy: .*twice.*first on line 3"):
        load_config(path)


def test_a_json_key_given_twice_is_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path, '{"version": "v1", "flags": {"migStrategy": "none", "migStrategy": "mixed"}}', "c.json"
    )
    with pytest.raises(ConfigError, match=r"c\.json: key 'migStrategy' appears twice"):
        load_config(path)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")


def test_health_policy_from_file_and_nvidias_env_vars(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        V1 + "kubegpu:\n  health:\n    ignoredXids: [13]\n    ecc: {doubleBit: ignore, singleBit: fatal}\n",
    )
    config = load_config(path)
    assert config.health.xid.classify(31) is XidVerdict.FATAL  # the list was replaced
    assert config.health.ecc_double_bit is EccAction.IGNORE
    assert config.health.ecc_single_bit is EccAction.FATAL
    extra = load_config(path, env={"DP_DISABLE_HEALTHCHECKS": "79,48"})
    assert extra.health.xid.classify(79) is XidVerdict.IGNORED
    assert load_config(env={"DP_DISABLE_HEALTHCHECKS": "all"}).health.xid.classify(79) is XidVerdict.IGNORED
    forced = load_config(env={"DP_DISABLE_HEALTHCHECKS": "all", "DP_ENABLE_HEALTHCHECKS": "13"})
    assert forced.health.xid.classify(13) is XidVerdict.FATAL
    with pytest.raises(ConfigError, match="env DP_ENABLE_HEALTHCHECKS"):
        load_config(env={"DP_ENABLE_HEALTHCHECKS": "seventy-nine"})


def test_mps_wins_over_time_slicing_and_fails_larger_requests_by_default(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
version: v1
flags: {mpsRoot: /run/nvidia/mps}
sharing:
  timeSlicing:
    resources: [{name: nvidia.com/gpu, replicas: 4}]
  mps:
    resources: [{name: nvidia.com/gpu, replicas: 2}]
""",
    )
    sharing = load_config(path).sharing
    assert sharing is not None
    assert sharing.kind is SharingKind.MPS
    assert sharing.fail_requests_greater_than_one is True
    assert sharing.resources[0].replicas == 2


def test_per_gpu_replicas_and_exclusive_gpus_are_parsed(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    resources: [{name: nvidia.com/gpu, replicas: 4}]
kubegpu:
  sharing:
    replicas: {"0": 8, GPU-abc: 2}
    exclusive: [7]
""",
    )
    sharing = load_config(path).sharing
    assert sharing is not None
    assert dict(sharing.per_gpu_replicas) == {"0": 8, "GPU-abc": 2}
    assert sharing.exclusive == ("7",)


def test_kubegpu_rename_gives_the_shared_resource_its_name(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        V1 + SLICE.format(n=2) + "kubegpu:\n  sharing:\n    rename: {gpu: gpu-ts}\n    exclusive: [7]\n",
    )
    sharing = load_config(path).sharing
    assert sharing is not None
    [resource] = sharing.resources
    assert (resource.name, resource.rename) == ("nvidia.com/gpu", "nvidia.com/gpu-ts")
    assert not any("rename" in w for w in load_config(path).warnings)


def test_watcher_failure_policy_defaults_to_unhealthy_and_is_validated(tmp_path: Path) -> None:
    assert load_config().health.watcher_failure is WatcherFailureAction.UNHEALTHY
    keep = write(tmp_path, "version: v1\nkubegpu:\n  health:\n    watcherFailure: keep\n")
    assert load_config(keep).health.watcher_failure is WatcherFailureAction.KEEP
    bad = write(tmp_path, "version: v1\nkubegpu:\n  health:\n    watcherFailure: shrug\n", "bad.yaml")
    with pytest.raises(ConfigError, match=r"kubegpu\.health\.watcherFailure: 'shrug'.*unhealthy, keep"):
        load_config(bad)


def test_a_file_with_no_config_key_at_all_is_refused_as_the_wrong_file(tmp_path: Path) -> None:
    # a node spec given as --config would otherwise run the agent on defaults without a word
    path = write(tmp_path, "nodes:\n  - name: gpu-1\n    gpus: 8\n")
    with pytest.raises(
        ConfigError, match=r"config\.yaml: none of its top-level keys \(nodes\) is a config key"
    ):
        load_config(path)
    many = write(tmp_path, "".join(f"k{i}: 1\n" for i in range(9)), "many.yaml")
    with pytest.raises(ConfigError, match=r"\(k0, k1, k2, k3, k4 and 4 more\)"):
        load_config(many)


def test_an_empty_file_and_one_unknown_key_beside_known_ones_still_load(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "")).warnings == ()
    config = load_config(write(tmp_path, V1 + "flagz: {}\n", "typo.yaml"))
    assert any("flagz: unknown key, ignored" in w for w in config.warnings)
