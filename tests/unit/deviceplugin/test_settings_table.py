"""The settings table is the one description of the agent's settings: ``AgentConfig``'s fields, the file
keys, environment variables and flags ``load_config`` reads, and their precedence all come from it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubegpu.deviceplugin.config import (
    CLI_FLAGS,
    DOCUMENT_FIELDS,
    ENV_VARS,
    SETTINGS,
    AgentConfig,
    DeviceIdStrategy,
    DeviceListStrategy,
    MigStrategy,
    Setting,
    load_config,
)
from kubegpu.errors import ConfigError
from kubegpu.model.dra import DraGpus

DOCS = Path(__file__).resolve().parents[3] / "docs" / "config.md"

# Two distinct raw values per setting (as they would be written in the environment) and what each
# means. A new row without samples here fails test_every_scalar_setting_has_samples.
SAMPLES: dict[str, tuple[str, object, str, object]] = {
    "mig_strategy": ("single", MigStrategy.SINGLE, "mixed", MigStrategy.MIXED),
    "fail_on_init_error": ("false", False, "true", True),
    "nvidia_driver_root": ("/run/a", "/run/a", "/run/b", "/run/b"),
    "nvidia_dev_root": ("/dev/a", "/dev/a", "/dev/b", "/dev/b"),
    "container_driver_root": ("/driver-root", "/driver-root", "/host", "/host"),
    "mps_root": ("/mps/a", "/mps/a", "/mps/b", "/mps/b"),
    "gds_enabled": ("true", True, "no", False),
    "mofed_enabled": ("yes", True, "0", False),
    "gdrcopy_enabled": ("on", True, "off", False),
    "pass_device_specs": ("1", True, "false", False),
    "device_list_strategies": (
        "volume-mounts",
        (DeviceListStrategy.VOLUME_MOUNTS,),
        "cdi-cri,envvar",
        (DeviceListStrategy.CDI_CRI, DeviceListStrategy.ENVVAR),
    ),
    "device_id_strategy": ("index", DeviceIdStrategy.INDEX, "uuid", DeviceIdStrategy.UUID),
    "cdi_annotation_prefix": ("a.example/", "a.example/", "b.example/", "b.example/"),
    "replica_policy": ("packed", "packed", "distributed", "distributed"),
    "allocation_policy": ("simple", "simple", "topology", "topology"),
    "cdi_kind": ("example.com/gpu", "example.com/gpu", "other.example/gpu", "other.example/gpu"),
    "cdi_spec_dir": ("/run/cdi-a", "/run/cdi-a", "/run/cdi-b", "/run/cdi-b"),
    "pre_start_check": ("true", True, "false", False),
    "metrics_address": (":9400", ":9400", "127.0.0.1:9401", "127.0.0.1:9401"),
    "pod_resources_socket": ("/run/a.sock", "/run/a.sock", "/run/b.sock", "/run/b.sock"),
    "node_labels": ("false", False, "true", True),
    "fractional": ("true", True, "false", False),
    "mps_daemon": ("false", False, "true", True),
    "mps_control": ("/opt/a/nvidia-cuda-mps-control", "/opt/a/nvidia-cuda-mps-control", "/b", "/b"),
    "mps_shares": ("true", True, "false", False),
    "dra_gpus": ("all", DraGpus(all=True), "6,7", DraGpus(indexes=frozenset({6, 7}))),
}
# Settings whose value is a whole section; their sources are tested in test_config.py (health) and
# tests/unit/node/test_quarantine_settings.py (quarantine).
SECTIONS = {"health", "quarantine", "mig_manager"}
BY_NAME = {s.name: s for s in SETTINGS}


def _file(tmp_path: Path, values: dict[str, object]) -> Path:
    data: dict[str, Any] = {"version": "v1"}
    for dotted, value in values.items():
        node = data
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _sources(setting: Setting[Any]) -> list[str]:
    return [
        *setting.file_keys,
        *(f"env {e.name}" for e in setting.env),
        *([setting.flag] if setting.flag else []),
    ]


def test_every_setting_is_a_field_of_agent_config_and_every_field_a_setting() -> None:
    names = [s.name for s in SETTINGS]
    assert len(names) == len(set(names)), "a setting is listed twice"
    fields = {f.name for f in dataclasses.fields(AgentConfig)}
    assert set(names) == fields - set(DOCUMENT_FIELDS)
    assert not set(names) & set(DOCUMENT_FIELDS)


def test_agent_config_defaults_are_the_tables_defaults() -> None:
    for f in dataclasses.fields(AgentConfig):
        if f.name in BY_NAME:
            assert f.default == BY_NAME[f.name].default, f.name
    assert load_config() == AgentConfig()


def test_every_scalar_setting_has_samples() -> None:
    assert set(SAMPLES) == set(BY_NAME) - SECTIONS


SOURCES = [(name, source) for name in SAMPLES for source in _sources(BY_NAME[name])]


@pytest.mark.parametrize(("name", "source"), SOURCES, ids=[f"{n}<-{s}" for n, s in SOURCES])
def test_every_file_key_env_var_and_flag_reaches_its_setting(tmp_path: Path, name: str, source: str) -> None:
    raw, expected, _, _ = SAMPLES[name]
    if source.startswith("--"):
        config = load_config(env={}, cli={name: raw})
    elif source.startswith("env "):
        config = load_config(env={source[4:]: raw})
    else:
        config = load_config(_file(tmp_path, {source: raw}))
    assert getattr(config, name) == expected


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_cli_beats_env_beats_file_for_every_setting(tmp_path: Path, name: str) -> None:
    setting = BY_NAME[name]
    a, a_value, b, b_value = SAMPLES[name]
    present = (("file", bool(setting.file_keys)), ("env", bool(setting.env)), ("cli", bool(setting.flag)))
    layers = [layer for layer, there in present if there]
    raws = [(a, a_value), (b, b_value)]  # each layer gives a different value from the one below it
    for top in range(len(layers)):
        given = {layer: raws[i % 2][0] for i, layer in enumerate(layers[: top + 1])}
        path = _file(tmp_path, {setting.file_keys[0]: given["file"]}) if "file" in given else None
        env = {setting.env[0].name: given["env"]} if "env" in given else {}
        cli = {name: given["cli"]} if "cli" in given else {name: None}  # None: the flag was not given
        assert getattr(load_config(path, env=env, cli=cli), name) == raws[top % 2][1], given


def test_an_empty_environment_variable_is_not_given(tmp_path: Path) -> None:
    path = _file(tmp_path, {"flags.migStrategy": "mixed"})
    assert load_config(path, env={"MIG_STRATEGY": ""}).mig_strategy is MigStrategy.MIXED


@pytest.mark.parametrize("name", [s.name for s in SETTINGS if len(s.file_keys) > 1])
def test_file_key_aliases_of_one_setting_must_agree(tmp_path: Path, name: str) -> None:
    setting = BY_NAME[name]
    a, a_value, b, _ = SAMPLES[name]
    agree = load_config(_file(tmp_path, dict.fromkeys(setting.file_keys, a)))
    assert getattr(agree, name) == a_value
    alias = load_config(_file(tmp_path, {setting.file_keys[1]: a}))
    assert getattr(alias, name) == a_value
    with pytest.raises(ConfigError, match=rf"{setting.file_keys[1]}: .* contradicts {setting.file_keys[0]}"):
        load_config(_file(tmp_path, {setting.file_keys[0]: a, setting.file_keys[1]: b}))


def test_a_setting_not_given_anywhere_can_follow_another() -> None:
    followers = [s for s in SETTINGS if s.default_from]
    assert followers, "nvidia_dev_root follows nvidia_driver_root"
    for s in followers:
        leader = BY_NAME[s.default_from or ""]
        raw, value, _, _ = SAMPLES[leader.name]
        assert getattr(load_config(cli={leader.name: raw}), s.name) == value
        own, own_value, _, _ = SAMPLES[s.name]
        assert getattr(load_config(cli={leader.name: raw, s.name: own}), s.name) == own_value


def test_every_file_key_of_the_table_is_a_known_key(tmp_path: Path) -> None:
    values = {key: SAMPLES[s.name][0] for s in SETTINGS if s.name in SAMPLES for key in s.file_keys[:1]}
    config = load_config(_file(tmp_path, values))
    assert not [w for w in config.warnings if "unknown key" in w]
    with pytest.raises(ConfigError, match=r"kubegpu\.nope: unknown key"):
        load_config(_file(tmp_path, {"kubegpu.nope": 1}))


def test_allowed_values_are_exactly_what_the_parser_accepts() -> None:
    for s in SETTINGS:
        for value in s.allowed:
            s.parse("where", value)
        if s.allowed:
            with pytest.raises(ConfigError) as err:
                s.parse("where", "no-such-value")
            for value in s.allowed:
                assert value in str(err.value), (s.name, value)


def test_exported_env_vars_and_flags_are_the_tables() -> None:
    assert sorted({e.name for s in SETTINGS for e in s.env}) == list(ENV_VARS)
    assert {"DP_DISABLE_HEALTHCHECKS", "DP_ENABLE_HEALTHCHECKS"} <= set(ENV_VARS)
    assert dict(CLI_FLAGS) == {s.name: s.flag for s in SETTINGS if s.flag}


def test_unknown_cli_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown CLI setting"):
        load_config(cli={"cdi_kind": "x.example/gpu"})  # a file-only setting has no flag


def test_docs_name_every_settings_file_key_env_var_and_flag() -> None:
    text = DOCS.read_text()
    for s in SETTINGS:
        for key in s.file_keys:
            assert f"`{key}`" in text, key
        for e in s.env:
            assert f"`{e.name}`" in text, e.name
        if s.flag:
            flag = f"--[no-]{s.flag[2:]}" if isinstance(s.default, bool) else s.flag
            assert f"`{flag}`" in text, flag
