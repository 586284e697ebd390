"""What the agent does as a DaemonSet: probes, a ConfigMap that changes under it, GPUs that appear
late (failOnInitError=false), and the simulated nvidia-smi that Allocate mounts (simulated mode only).

Real agent processes against the kubelet double, over real sockets and HTTP.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from kubegpu.sources.spec import load_node
from tests.integration.conftest import AgentProcess
from tests.integration.helpers import allocate, plugin_stub, time_sliced
from tests.integration.kubelet_double import KubeletDouble

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
UUIDS = [str(g.uuid) for g in load_node("builtin:seed-8gpu").gpus]
FAKE_NVML = Path(__file__).parent / "fake_nvml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _probe(port: int, path: str) -> tuple[int, dict[str, object]] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except OSError:
        return None


def _wait(predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_readyz_is_503_until_every_resource_is_registered_then_200_and_healthz_is_200(
    plugin_dir: Path, start_agent: Callable[..., AgentProcess]
) -> None:
    port = _free_port()
    agent = start_agent("--node-spec", "builtin:seed-8gpu", "--health-address", f"127.0.0.1:{port}")
    assert _wait(lambda: _probe(port, "/healthz") is not None), agent.log
    assert _probe(port, "/healthz") == (200, {"ok": True, "status": "alive"})
    status, body = _probe(port, "/readyz") or (0, {})
    assert status == 503 and "not registered: nvidia.com/gpu" in str(body["reason"])  # no kubelet yet
    kubelet = KubeletDouble(plugin_dir)
    kubelet.start()
    try:
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
        assert _wait(lambda: (_probe(port, "/readyz") or (0,))[0] == 200), agent.log
        _, body = _probe(port, "/readyz") or (0, {})
        assert body["resources"] == {GPU: {"registered": True, "serving": True}}
    finally:
        kubelet.stop()
    assert agent.terminate() == 0


def _configmap_dir(root: Path, text: str, generation: int) -> None:
    """Write ``config.yaml`` the way kubelet's atomic writer updates a mounted ConfigMap."""
    data = root / f"..2026_12_01_{generation:06d}"
    data.mkdir()
    (data / "config.yaml").write_text(text)
    link = root / "..data_tmp"
    link.symlink_to(data.name)
    os.replace(link, root / "..data")  # the atomic swap
    if not (root / "config.yaml").is_symlink():
        (root / "config.yaml").symlink_to("..data/config.yaml")


def test_a_configmap_update_by_symlink_swap_is_applied_without_restart_or_sighup(
    kubelet: KubeletDouble, plugin_dir: Path, start_agent: Callable[..., AgentProcess]
) -> None:
    cm = plugin_dir.parent / f"{plugin_dir.name}-cm"
    cm.mkdir()
    _configmap_dir(cm, time_sliced(4), 1)
    agent = start_agent("--node-spec", "builtin:seed-8gpu", "--config", str(cm / "config.yaml"))
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 32, 20), agent.log
    _configmap_dir(cm, time_sliced(2), 2)
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 16, 20), agent.log
    assert "config file changed; reloading" in agent.log
    # an invalid update is rejected once and the running config kept
    _configmap_dir(cm, "version: v9\n", 3)
    assert _wait(lambda: "config reload rejected" in agent.log), agent.log
    time.sleep(0.5)
    assert agent.log.count("config reload rejected") == 1
    assert kubelet.allocatable(GPU) == 16
    assert agent.proc.poll() is None
    assert agent.terminate() == 0


def test_fail_on_init_error_false_keeps_running_serving_nothing_then_serves_the_gpus_when_readable(
    kubelet: KubeletDouble, plugin_dir: Path, start_agent: Callable[..., AgentProcess]
) -> None:
    script = plugin_dir.parent / f"{plugin_dir.name}-nvml.json"
    script.write_text(json.dumps({"fail": {"nvmlDeviceGetUUID": 9}}))  # 9: driver not loaded
    port = _free_port()
    env = {"KUBEGPU_FAKE_NVML": str(script), "PYTHONPATH": str(FAKE_NVML)}
    try:
        agent = start_agent(
            "--nvml",
            "--fail-on-init-error=false",
            "--init-retry-interval",
            "0.5",
            "--health-address",
            f"127.0.0.1:{port}",
            env=env,
        )
        assert _wait(lambda: agent.log.count("no GPUs readable") >= 2), agent.log  # retrying
        assert agent.proc.poll() is None
        assert kubelet.allocatable(GPU) == 0
        status, body = _probe(port, "/readyz") or (0, {})
        assert status == 503 and "GPUs not readable" in str(body["reason"])
        assert (_probe(port, "/healthz") or (0,))[0] == 200
        script.write_text(json.dumps({"fail": {}}))
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 2, 20), agent.log
        assert "GPUs readable now; serving them" in agent.log
        assert _wait(lambda: (_probe(port, "/readyz") or (0,))[0] == 200), agent.log
        # real mode: no simulated nvidia-smi is written or mounted
        assert not (plugin_dir / "kubegpu-sim").exists()
        channel, stub = plugin_stub(kubelet.endpoints[GPU].socket)
        with channel:
            assert list(allocate(stub, ["GPU-fake-0"]).mounts) == []
        assert agent.terminate() == 0
    finally:
        script.unlink(missing_ok=True)


def test_fail_on_init_error_true_exits_with_the_reason(
    plugin_dir: Path, start_agent: Callable[..., AgentProcess]
) -> None:
    script = plugin_dir.parent / f"{plugin_dir.name}-nvml.json"
    script.write_text(json.dumps({"fail": {"nvmlDeviceGetUUID": 9}}))
    try:
        agent = start_agent("--nvml", env={"KUBEGPU_FAKE_NVML": str(script), "PYTHONPATH": str(FAKE_NVML)})
        assert agent.proc.wait(30) != 0
        assert "NVML" in agent.log
    finally:
        script.unlink(missing_ok=True)


def test_without_the_flag_simulated_allocate_mounts_nothing(
    kubelet: KubeletDouble, plugin_dir: Path, start_agent: Callable[..., AgentProcess]
) -> None:
    agent = start_agent("--node-spec", "builtin:seed-8gpu")
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
    channel, stub = plugin_stub(kubelet.endpoints[GPU].socket)
    with channel:
        assert list(allocate(stub, [UUIDS[0]]).mounts) == []
    assert not (plugin_dir / "kubegpu-sim").exists()
    assert agent.terminate() == 0


def test_simulated_allocate_mounts_an_nvidia_smi_that_lists_exactly_the_granted_gpu(
    kubelet: KubeletDouble, plugin_dir: Path, start_agent: Callable[..., AgentProcess]
) -> None:
    agent = start_agent("--node-spec", "builtin:seed-8gpu", "--simulated-nvidia-smi")
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
    channel, stub = plugin_stub(kubelet.endpoints[GPU].socket)
    with channel:
        answer = allocate(stub, [UUIDS[6]])
    mounts = {m.container_path: m for m in answer.mounts}
    assert set(mounts) == {"/usr/bin/nvidia-smi", "/bin/nvidia-smi"}
    host = Path(mounts["/usr/bin/nvidia-smi"].host_path)
    assert mounts["/usr/bin/nvidia-smi"].read_only
    assert host == plugin_dir / "kubegpu-sim" / "nvidia-smi"
    env = {"PATH": os.environ["PATH"], **answer.envs}
    out = subprocess.run(["/bin/sh", str(host), "-L"], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.splitlines() == [f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {UUIDS[6]})"]
    # kubelet wiping the plugin dir (restart) loses the script; the agent writes it again
    host.unlink()
    assert _wait(host.exists), agent.log
    assert agent.terminate() == 0
