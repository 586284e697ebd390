"""``kubegpu.migManager`` in the agent's config file: defaults, values, and one clear error per mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.deviceplugin.config import load_config
from kubegpu.errors import ConfigError
from kubegpu.model.migplan import MigManagerSettings


def load(tmp_path: Path, section: str) -> MigManagerSettings:
    path = tmp_path / "config.yaml"
    path.write_text(f"version: v1\nkubegpu:\n  migManager: {section}\n")
    return load_config(path, env={}, cli={}).mig_manager


def test_off_by_default_with_nvidias_named_configs() -> None:
    settings = load_config(None, env={}, cli={}).mig_manager
    assert settings == MigManagerSettings()
    assert (
        not settings.enabled and settings.config_file == "builtin:mig-parted-default" and not settings.drain
    )


def test_every_key_is_read(tmp_path: Path) -> None:
    got = load(
        tmp_path,
        "{enabled: true, configFile: /etc/mig/config.yaml, drain: true, stateFile: /var/lib/k/s.json, "
        "recheckSeconds: 5}",
    )
    assert got == MigManagerSettings(
        enabled=True,
        config_file="/etc/mig/config.yaml",
        drain=True,
        state_file="/var/lib/k/s.json",
        recheck_s=5.0,
    )


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("{enable: true}", r"config.yaml: kubegpu.migManager.enable: unknown key; allowed: configFile"),
        ("{drain: maybe}", r"migManager\.drain"),
        ("{recheckSeconds: 0}", r"migManager\.recheckSeconds: 0 must be 0\.1 to 3600 seconds"),
        ("{configFile: ''}", r"migManager\.configFile: give a mig-parted file"),
    ],
)
def test_a_bad_value_names_file_and_key(tmp_path: Path, section: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, section)
