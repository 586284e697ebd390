"""SIGHUP and SIGTERM against the real agent: reloads are all-or-nothing, shutdown is bounded and wins.

A reload starts the servers whose resource changed, switches to them, and only then stops the old
ones; a server whose resource did not change keeps its socket and its ListAndWatch stream, so kubelet
never sees those devices go unhealthy. A reload that cannot start a server changes nothing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubegpu.deviceplugin.api import v1beta1_pb2 as pb
from kubegpu.sources.spec import load_node
from tests.integration.conftest import AgentProcess
from tests.integration.helpers import allocate, log_records, messages, plugin_stub, time_sliced
from tests.integration.kubelet_double import KubeletDouble

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
RELOAD_FAILED = "config reload failed; keeping the running config and servers"
UUIDS = [g.uuid for g in load_node("builtin:seed-8gpu").gpus]


def _sockets(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir() if stat.S_ISSOCK(p.lstat().st_mode)}


def _shared_with_exclusive(replicas: int, id_strategy: str = "uuid") -> str:
    """GPUs 0-5 time-sliced as ``nvidia.com/gpu.shared``; GPUs 6 and 7 stay ``nvidia.com/gpu``."""
    return (
        f"version: v1\nflags:\n  plugin:\n    deviceIDStrategy: {id_strategy}\n"
        "sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
        f"    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
        "kubegpu:\n  sharing:\n    exclusive: [6, 7]\n"
    )


def _wait_for_log(agent: AgentProcess, text: str, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in agent.log:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def config_file(plugin_dir: Path) -> Iterator[Path]:
    path = plugin_dir.parent / f"{plugin_dir.name}-reload.yaml"
    yield path
    path.unlink(missing_ok=True)


def test_reload_keeps_unchanged_servers_socket_and_stream_and_restarts_only_the_changed_one(
    kubelet: KubeletDouble, config_file: Path, start_agent
) -> None:
    config_file.write_text(_shared_with_exclusive(4))
    agent = start_agent("--node-spec", "builtin:seed-8gpu", "--config", str(config_file))
    assert kubelet.wait_for(lambda: kubelet.allocatable(SHARED) == 24 and kubelet.allocatable(GPU) == 2, 20)
    gpu_endpoint = kubelet.endpoints[GPU]
    shared_endpoint = kubelet.endpoints[SHARED]
    assert gpu_endpoint.socket is not None
    before = os.stat(gpu_endpoint.socket)

    # replicas change nvidia.com/gpu.shared; the ID strategy changes no resource, only Allocate answers
    config_file.write_text(_shared_with_exclusive(3, id_strategy="index"))
    os.kill(agent.proc.pid, signal.SIGHUP)
    assert kubelet.wait_for(lambda: kubelet.allocatable(SHARED) == 18, 20), agent.log
    assert _wait_for_log(agent, "config reloaded"), agent.log

    after = os.stat(gpu_endpoint.socket)
    assert (after.st_ino, after.st_ctime_ns) == (before.st_ino, before.st_ctime_ns)
    assert kubelet.endpoints[GPU] is gpu_endpoint
    assert gpu_endpoint.stopped_at is None  # its ListAndWatch stream never ended
    assert [c for c in kubelet.calls_named("ListAndWatch.end") if c.resource == GPU] == []
    assert len([c for c in kubelet.calls_named("Register") if c.resource == GPU]) == 1
    assert kubelet.allocatable(GPU) == 2
    # the changed resource is on a fresh socket and its old one is gone
    assert kubelet.endpoints[SHARED] is not shared_endpoint
    assert shared_endpoint.socket is not None and not shared_endpoint.socket.exists()
    # the kept server answers with the new config
    channel, stub = plugin_stub(gpu_endpoint.socket)
    with channel:
        assert allocate(stub, [UUIDS[6]]).envs["NVIDIA_VISIBLE_DEVICES"] == "6"
    assert agent.terminate() == 0


def _start_in(directory: Path, *args: str) -> AgentProcess:
    env = {k: v for k, v in os.environ.items() if k != "CONFIG_FILE"}
    return AgentProcess(
        ["--device-plugin-dir", str(directory), *args], directory.parent / f"{directory.name}.log", env
    )


def test_reload_whose_new_server_cannot_listen_keeps_the_old_servers_and_sigterm_exits_0(
    plugin_dir: Path, config_file: Path
) -> None:
    # The changed resource's next socket path (kubegpu-gpu-<hash>-<pid>-1.sock: the agent's second
    # server start) is taken by a directory, so binding its server fails while the running one is fine.
    directory = plugin_dir / "plugins"
    kubelet = KubeletDouble(directory)
    kubelet.start()
    config_file.write_text(time_sliced(2))
    agent = _start_in(directory, "--node-spec", "builtin:seed-8gpu", "--config", str(config_file))
    try:
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 16, 20), agent.log
        endpoint = kubelet.endpoints[GPU]
        assert endpoint.socket is not None
        running = endpoint.socket.name
        assert running.endswith(f"-{agent.proc.pid}-0.sock"), running
        blocker = directory / running.replace(f"-{agent.proc.pid}-0.sock", f"-{agent.proc.pid}-1.sock")
        (blocker / "in-the-way").mkdir(parents=True)
        config_file.write_text(time_sliced(3))
        os.kill(agent.proc.pid, signal.SIGHUP)
        assert _wait_for_log(agent, "config reload failed"), agent.log
        time.sleep(0.5)
        assert agent.proc.poll() is None, agent.log
        failures = [m for m in messages(agent.log) if m.startswith("config reload failed")]
        assert failures == [RELOAD_FAILED], agent.log
        assert kubelet.endpoints[GPU] is endpoint and endpoint.stopped_at is None
        assert kubelet.allocatable(GPU) == 16
        channel, stub = plugin_stub(endpoint.socket)
        with channel:
            assert stub.GetDevicePluginOptions(pb.Empty(), timeout=5).get_preferred_allocation_available
        shutil.rmtree(blocker)
        started = time.monotonic()
        assert agent.terminate() == 0, agent.log
        assert time.monotonic() - started < 5
        assert _sockets(directory) == {"kubelet.sock"}
        assert "Traceback" not in agent.log
    finally:
        agent.kill()
        kubelet.stop()


@contextlib.contextmanager
def _unwritable(directory: Path) -> Iterator[None]:
    """No new entries and no unlinks in ``directory``: chmod for users, the immutable flag for root."""
    if os.geteuid() != 0:
        directory.chmod(0o500)
        try:
            yield
        finally:
            directory.chmod(0o750)
        return
    made = subprocess.run(["chattr", "+i", str(directory)], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"root cannot make {directory} unwritable here (chattr +i: {made.stderr!r})")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(directory)], check=True)


def test_reload_in_an_unwritable_plugin_dir_keeps_serving_and_sigterm_exits_0(
    kubelet: KubeletDouble, plugin_dir: Path, config_file: Path, start_agent
) -> None:
    config_file.write_text(time_sliced(2))
    agent = start_agent("--node-spec", "builtin:seed-8gpu", "--config", str(config_file))
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 16, 20), agent.log
    endpoint = kubelet.endpoints[GPU]
    assert endpoint.socket is not None
    config_file.write_text(time_sliced(3))
    with _unwritable(plugin_dir):
        os.kill(agent.proc.pid, signal.SIGHUP)
        assert _wait_for_log(agent, "config reload failed"), agent.log
        time.sleep(0.5)
        assert agent.proc.poll() is None, agent.log
        assert [m for m in messages(agent.log) if m.startswith("config reload failed")] == [RELOAD_FAILED]
        assert kubelet.allocatable(GPU) == 16 and endpoint.stopped_at is None
        channel, stub = plugin_stub(endpoint.socket)
        with channel:
            assert stub.GetDevicePluginOptions(pb.Empty(), timeout=5).get_preferred_allocation_available
        started = time.monotonic()
        assert agent.terminate() == 0, agent.log
        assert time.monotonic() - started < 5
        assert "Traceback" not in agent.log
        assert any(r.get("msg") == "could not remove the socket" for r in log_records(agent.log)), (
            agent.log
        )  # it says which socket it had to leave behind


def test_sigterm_while_register_hangs_after_a_sighup_exits_0_within_5_seconds_and_starts_nothing(
    kubelet: KubeletDouble, plugin_dir: Path, config_file: Path, start_agent
) -> None:
    kubelet.register_gate.clear()  # every Register hangs
    config_file.write_text(time_sliced(2))
    agent = start_agent("--node-spec", "builtin:seed-8gpu", "--config", str(config_file))
    assert kubelet.wait_for(lambda: len(kubelet.calls_named("Register")) >= 1, 20), agent.log
    config_file.write_text(time_sliced(3))
    os.kill(agent.proc.pid, signal.SIGHUP)
    # a kubelet that hangs holds up neither the reload ...
    assert _wait_for_log(agent, "config reloaded", timeout=3), agent.log
    assert len(kubelet.calls_named("Register")) == 1
    # ... nor SIGTERM, which abandons the Register in flight
    started = time.monotonic()
    agent.proc.send_signal(signal.SIGTERM)
    try:
        code = agent.proc.wait(10)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the agent did not exit 10 s after SIGTERM\n{agent.log}")
    assert code == 0, agent.log
    assert time.monotonic() - started < 5, agent.log
    msgs = messages(agent.log)
    after_signal = msgs[msgs.index("signal received") :]
    assert "serving" not in after_signal, agent.log  # nothing was started after SIGTERM
    assert "registered" not in after_signal, agent.log
    assert _sockets(plugin_dir) == {"kubelet.sock"}
    kubelet.register_gate.set()
