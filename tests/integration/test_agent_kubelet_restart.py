"""kubelet restarts the agent must notice, and retry loops that must not flood the log."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.conftest import AgentProcess
from tests.integration.kubelet_double import KubeletDouble

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"


@pytest.mark.parametrize("round_", range(3))
def test_a_kubelet_restart_that_recreates_only_kubelet_sock_with_the_same_inode_is_noticed(
    kubelet: KubeletDouble, start_agent: Callable[..., AgentProcess], round_: int
) -> None:
    agent = start_agent("--node-spec", "builtin:seed-8gpu")
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
    registrations = len(kubelet.calls_named("Register"))
    before = os.stat(kubelet.socket).st_ino
    kubelet.restart(keep_plugin_sockets=True)  # the plugin's socket survives; only kubelet.sock is new
    reused = os.stat(kubelet.socket).st_ino == before  # ext4 usually hands out the same inode
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), (reused, agent.log)
    assert len(kubelet.calls_named("Register")) > registrations


def test_a_plugin_dir_that_cannot_be_served_is_retried_with_backoff_one_line_per_failure(
    kubelet: KubeletDouble, plugin_dir: Path, start_agent: Callable[..., AgentProcess]
) -> None:
    agent = start_agent("--node-spec", "builtin:seed-8gpu")
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
    kubelet.stop()
    shutil.rmtree(plugin_dir)  # the agent's socket is gone and it cannot listen again
    time.sleep(3.0)  # a window in which to count retries, not a synchronisation
    log = agent.log
    assert "Traceback" not in log
    failures = log.count("cannot listen on")
    assert 2 <= failures <= 8, log  # 0.1 s doubling: about 5 tries in 3 s, not 30
    plugin_dir.mkdir()
    kubelet.start()
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
    assert agent.proc.poll() is None
