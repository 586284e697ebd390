"""Where the agent finds nvidia-cuda-mps-control: the configured path, PATH, then the driver root."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.deviceplugin.config import AgentConfig
from kubegpu.deviceplugin.mps_daemon import find_control
from kubegpu.errors import ConfigError


def _tool(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_configured_path_wins_and_must_be_executable(tmp_path: Path) -> None:
    given = _tool(tmp_path / "x" / "mps-control")
    on_path = _tool(tmp_path / "bin" / "nvidia-cuda-mps-control")
    assert find_control(AgentConfig(mps_control=str(given)), str(on_path.parent)) == str(given)
    given.chmod(0o644)
    with pytest.raises(ConfigError, match=r"kubegpu\.mps\.control: .* is not an executable file"):
        find_control(AgentConfig(mps_control=str(given)), str(on_path.parent))


def test_path_then_the_driver_root_as_the_agent_sees_it(tmp_path: Path) -> None:
    on_path = _tool(tmp_path / "bin" / "nvidia-cuda-mps-control")
    root = tmp_path / "driver"
    in_root = _tool(root / "usr" / "bin" / "nvidia-cuda-mps-control")
    config = AgentConfig(nvidia_driver_root=str(root))
    assert find_control(config, str(on_path.parent)) == str(on_path)
    assert find_control(config, str(tmp_path / "empty")) == str(in_root)
    seen = AgentConfig(nvidia_driver_root="/", container_driver_root=str(root))
    assert find_control(seen, str(tmp_path / "empty")) == str(in_root)


def test_missing_everywhere_says_how_to_give_it_or_turn_it_off(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        find_control(AgentConfig(nvidia_driver_root=str(tmp_path)), str(tmp_path / "empty"))
    assert "kubegpu.mps.control" in str(err.value) and "kubegpu.mps.daemon: false" in str(err.value)
