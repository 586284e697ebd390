"""The agent refuses what kubelet cannot read (issue 57, item 4): a resource whose ListAndWatch answer
is over kubelet's 4 MiB receive limit stops the start (exit 2, one line) and a reload to it keeps the
running config, as every other invalid reload does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kubegpu.agent import Agent, AgentOptions
from kubegpu.errors import ConfigError

pytestmark = pytest.mark.integration


def time_sliced(replicas: int) -> str:
    return (
        "version: v1\nkubegpu:\n  node: {labels: false}\nsharing:\n  timeSlicing:\n    resources:\n"
        f"    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
    )


def nvl72(plugin_dir: Path, config: Path) -> AgentOptions:
    return AgentOptions(node_spec="builtin:nvl72-hier", device_plugin_dir=plugin_dir, config_file=config)


def test_an_over_size_device_list_stops_the_agent_at_start_with_one_line_and_exit_2(plugin_dir: Path) -> None:
    config = plugin_dir.parent / "over.yaml"
    config.write_text(time_sliced(1000))  # 72 GPUs x 1000 replicas: 72,000 devices, 4.46 MiB
    argv = [
        "--node-spec",
        "builtin:nvl72-hier",
        "--config",
        str(config),
        "--device-plugin-dir",
        str(plugin_dir),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "kubegpu", "agent", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "nvidia.com/gpu: 72,000 devices" in lines[0] and "at most" in lines[0]
    assert not any(p.is_socket() for p in plugin_dir.iterdir())  # nothing was registered


def test_a_reload_to_an_over_size_device_list_keeps_the_running_config(plugin_dir: Path) -> None:
    config = plugin_dir.parent / "reload.yaml"
    config.write_text(time_sliced(100))
    agent = Agent(
        AgentOptions(node_spec="builtin:nvl72-hier", device_plugin_dir=plugin_dir, config_file=config)
    )
    agent.start()
    try:
        assert agent.inventory is not None
        assert len(agent.inventory.resources[0].devices) == 7_200
        config.write_text(time_sliced(1000))
        assert agent.reload() is False
        assert len(agent.inventory.resources[0].devices) == 7_200  # the running config stays
        config.write_text(time_sliced(200))
        assert agent.reload() is True
        assert len(agent.inventory.resources[0].devices) == 14_400
    finally:
        agent.stop()


def test_start_raises_a_config_error_in_process(plugin_dir: Path) -> None:
    config = plugin_dir.parent / "over.yaml"
    config.write_text("version: v1\nkubegpu:\n  node: {labels: false}\n  fractional: true\n")
    agent = Agent(
        AgentOptions(node_spec="builtin:nvl72-hier", device_plugin_dir=plugin_dir, config_file=config)
    )
    with pytest.raises(ConfigError, match=r"kubegpu\.io/gpu-milli: 72,000 devices"):
        agent.start()
    agent.stop()
