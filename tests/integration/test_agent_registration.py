"""The real agent process against the kubelet double: registration, restarts, signals, bad config."""

from __future__ import annotations

import os
import signal
import stat
import time
from pathlib import Path

import pytest

from tests.integration.helpers import time_sliced
from tests.integration.kubelet_double import KubeletDouble

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"


def _sockets(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir() if stat.S_ISSOCK(p.lstat().st_mode)}


def test_agent_serves_before_registering_and_advertises_every_gpu_healthy_with_numa(
    kubelet: KubeletDouble, start_agent
) -> None:
    agent = start_agent("--node-spec", "builtin:seed-8gpu")
    # kubelet starts ListAndWatch before Register returns (as the double does): the devices can be
    # in before the reply is, so wait for both
    assert kubelet.wait_for(
        lambda: kubelet.allocatable(GPU) == 8 and bool(kubelet.calls_named("Register.reply")), 20
    ), agent.log
    register = kubelet.calls_named("Register")[0].request
    assert register.version == "v1beta1"
    assert register.resource_name == GPU
    assert "/" not in register.endpoint and register.endpoint.endswith(".sock")
    assert register.options.get_preferred_allocation_available
    names = [c.name for c in kubelet.calls if c.resource == GPU]
    # kubelet dialled the plugin and got options while Register was still in flight
    assert names.index("GetDevicePluginOptions") < names.index("Register.reply")
    devices = kubelet.endpoints[GPU].devices
    assert all(d.health == "Healthy" for d in devices.values())
    assert all(len(d.topology.nodes) == 1 for d in devices.values())


def test_agent_retries_until_kubelet_appears(plugin_dir: Path, start_agent) -> None:
    agent = start_agent("--node-spec", "builtin:seed-8gpu")
    # kubelet absent: the agent keeps serving and retrying, and says what it waits for (a wrong
    # --device-plugin-dir used to look like a healthy agent that only said "serving")
    deadline = time.monotonic() + 20
    while "waiting for kubelet's registration socket" not in agent.log and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "waiting for kubelet's registration socket" in agent.log, agent.log
    assert str(plugin_dir / "kubelet.sock") in agent.log
    assert agent.proc.poll() is None, agent.log
    double = KubeletDouble(plugin_dir)
    double.start()
    try:
        assert double.wait_for(lambda: double.allocatable(GPU) == 8, 20), agent.log
        assert "kubelet's registration socket appeared" in agent.log
    finally:
        double.stop()


def test_kubelet_restart_is_detected_and_resources_come_back_on_a_fresh_socket(
    kubelet: KubeletDouble, start_agent
) -> None:
    agent = start_agent("--node-spec", "builtin:seed-8gpu")
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
    first = kubelet.calls_named("Register")[0].request.endpoint
    kubelet.restart()
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
    again = kubelet.calls_named("Register")[-1].request.endpoint
    assert again != first
    assert agent.proc.poll() is None


def test_agent_exit_ends_the_stream_cleanly_and_kubelet_sees_devices_unhealthy(
    kubelet: KubeletDouble, start_agent
) -> None:
    agent = start_agent("--node-spec", "builtin:seed-8gpu")
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
    assert agent.terminate() == 0
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 0, 10)
    assert kubelet.capacity(GPU) == 8  # capacity stays until the grace period ends


def test_sigterm_removes_the_agents_sockets_and_exits_within_5_seconds(
    kubelet: KubeletDouble, plugin_dir: Path, start_agent
) -> None:
    agent = start_agent("--node-spec", "builtin:h100-mig-mixed", "--mig-strategy", "mixed")
    assert kubelet.wait_for(lambda: len(kubelet.endpoints) >= 3, 20), agent.log
    assert len(_sockets(plugin_dir)) >= 4  # kubelet.sock + one per resource
    started = time.monotonic()
    agent.proc.send_signal(signal.SIGTERM)
    assert agent.proc.wait(10) == 0
    assert time.monotonic() - started < 5
    assert _sockets(plugin_dir) == {"kubelet.sock"}


def test_invalid_config_refuses_to_start_and_names_the_key_path(plugin_dir: Path, start_agent) -> None:
    config = plugin_dir.parent / f"{plugin_dir.name}-bad.yaml"
    config.write_text("version: v1\nflags:\n  plugin:\n    deviceListStrategy: [envvar, carrier-pigeon]\n")
    try:
        agent = start_agent("--node-spec", "builtin:seed-8gpu", "--config", str(config))
        assert agent.proc.wait(20) == 2
        log = agent.log
        assert "flags.plugin.deviceListStrategy[1]" in log
        assert "cdi-annotations" in log  # the allowed values are listed
        assert "Traceback" not in log
        assert _sockets(plugin_dir) == set()
    finally:
        config.unlink()


def test_env_var_is_validated_and_named(plugin_dir: Path, start_agent) -> None:
    agent = start_agent("--node-spec", "builtin:seed-8gpu", env={"MIG_STRATEGY": "sometimes"})
    assert agent.proc.wait(20) == 2
    assert "env MIG_STRATEGY" in agent.log
    assert "none, single, mixed" in agent.log


def test_invalid_reload_keeps_the_running_config(
    kubelet: KubeletDouble, plugin_dir: Path, start_agent
) -> None:
    config = plugin_dir.parent / f"{plugin_dir.name}-cfg.yaml"
    config.write_text(time_sliced(2))
    try:
        agent = start_agent("--node-spec", "builtin:seed-8gpu", "--config", str(config))
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 16, 20), agent.log
        config.write_text("version: v1\nflags:\n  migStrategy: sideways\n")
        os.kill(agent.proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "config reload rejected" not in agent.log and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "flags.migStrategy" in agent.log
        assert agent.proc.poll() is None
        assert kubelet.allocatable(GPU) == 16
        # a valid reload is applied without restarting the process
        config.write_text(time_sliced(3))
        os.kill(agent.proc.pid, signal.SIGHUP)
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 24, 20), agent.log
    finally:
        config.unlink()
