"""MPS through the real agent and the kubelet double, with the stand-in nvidia-cuda-mps-control
(tests/mps_standin): the control daemon runs with its limits before its resource is advertised,
a daemon that dies makes its devices Unhealthy until it runs again, a stop or a reload that drops MPS
quits it, and Allocate hands containers the pipe and, for kubegpu.io/gpu-milli shares, their limits."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kubegpu.agent import Agent, AgentOptions
from kubegpu.sources.spec import load_node
from tests.integration.conftest import AgentProcess
from tests.integration.kubelet_double import Container, KubeletDouble, Pod
from tests.integration.test_agent_shares import FakeApi, bound, share
from tests.mps_standin import Record, install

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
MILLI = "kubegpu.io/gpu-milli"
SEED = load_node("builtin:seed-8gpu")
UUIDS = [g.uuid for g in SEED.gpus]
MEMORY = SEED.gpus[0].memory_mib
PID_FILE = "nvidia-cuda-mps-control.pid"


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, a killed daemon nobody reaped yet, does not)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except FileNotFoundError:
        return False
    return bool(fields) and fields[0] not in ("Z", "X")


@pytest.fixture
def mps(plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The stand-in control command, the MPS root, the record and the hold file of one test (named in
    the environment every agent and daemon of the test inherits); any stand-in daemon still running
    at the end is stopped by the PID it recorded."""
    base = plugin_dir.parent
    setup: dict[str, Any] = {
        "control": install(base / "bin"),
        "root": base / "mps",
        "record": Record(base / "mps-record.jsonl"),
        "hold": base / "mps-hold",
    }
    monkeypatch.setenv("KUBEGPU_MPS_STANDIN_RECORD", str(setup["record"].path))
    monkeypatch.setenv("KUBEGPU_MPS_STANDIN_HOLD", str(setup["hold"]))
    yield setup
    record: Record = setup["record"]
    exited = {e["pid"] for e in record.events("exit")}
    for start in record.events("start"):
        pid = start["pid"]
        if pid not in exited and process_alive(pid):
            os.kill(pid, signal.SIGTERM)


def _mps_config(mps: dict[str, Any]) -> str:
    return (
        "version: v1\n"
        f"flags: {{mpsRoot: {mps['root']}}}\n"
        "sharing:\n  mps:\n    resources:\n      - {name: nvidia.com/gpu, replicas: 4}\n"
        f'kubegpu:\n  sharing:\n    replicas: {{"0": 2}}\n  mps:\n    control: {mps["control"]}\n'
    )


def _pipe(mps: dict[str, Any], resource: str) -> str:
    return f"{mps['root']}/{resource}/pipe"


def _start(start_agent: Callable[..., AgentProcess], mps: dict[str, Any], config: Path) -> AgentProcess:
    del mps  # the fixture put the stand-in's record and hold file into the environment
    return start_agent("--node-spec", "builtin:seed-8gpu", "--config", str(config))


REPLICAS = 2 + 7 * 4  # GPU 0 has 2 replicas, the other seven 4


def test_the_daemon_runs_with_nvidias_limits_before_its_resource_is_advertised(
    kubelet: KubeletDouble, start_agent: Callable[..., AgentProcess], mps: dict[str, Any], tmp_path: Path
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(_mps_config(mps))
    agent = _start(start_agent, mps, config)
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == REPLICAS, 30), agent.log
    record: Record = mps["record"]
    pipe = _pipe(mps, GPU)
    [started] = record.events("start")
    assert started["env"] == {
        "CUDA_VISIBLE_DEVICES": ",".join(UUIDS),
        "CUDA_MPS_PIPE_DIRECTORY": pipe,
        "CUDA_MPS_LOG_DIRECTORY": f"{mps['root']}/{GPU}/log",
    }
    # one thread percentage per daemon: the GPU with the most replicas (4) decides; memory per GPU
    assert record.commands(pipe) == [
        "set_default_active_thread_percentage 25",
        f"set_default_device_pinned_mem_limit 0 {MEMORY // 2}M",
        *(f"set_default_device_pinned_mem_limit {d} {MEMORY // 4}M" for d in range(1, 8)),
    ]
    limits_set_at = max(e["at"] for e in record.events("command"))
    registered_at = min(c.at for c in kubelet.calls_named("Register") if c.resource == GPU)
    assert limits_set_at < registered_at, "the resource was advertised before its daemon had its limits"
    assert (Path(pipe) / PID_FILE).read_text().strip() == str(started["pid"])

    runtime = kubelet.admit_pod(Pod(uid="p", containers=[Container(name="main", requests={GPU: 1})]))
    main = runtime["main"]
    assert main.envs["CUDA_MPS_PIPE_DIRECTORY"] == f"/mps/{GPU}/pipe"
    assert main.mounts[f"/mps/{GPU}/pipe"].host_path == pipe
    assert main.mounts["/mps/shm"].host_path == f"{mps['root']}/shm"
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in main.envs, "replicas are held by the daemon's defaults"

    assert agent.terminate() == 0
    assert record.commands(pipe)[-1] == "quit"
    [exited] = record.events("exit")
    assert exited["pid"] == started["pid"] and not process_alive(started["pid"])
    log = agent.log
    assert "MPS control daemon started" in log and "MPS control daemon stopped" in log
    assert "Starting control daemon using socket" in log, "the daemon's control.log reaches the agent's log"


def test_a_daemon_that_dies_makes_its_devices_unhealthy_until_it_runs_again(
    kubelet: KubeletDouble, start_agent: Callable[..., AgentProcess], mps: dict[str, Any], tmp_path: Path
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(_mps_config(mps))
    agent = _start(start_agent, mps, config)
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == REPLICAS, 30), agent.log
    record: Record = mps["record"]
    [first] = record.events("start")
    mps["hold"].touch()  # the stand-in refuses to start again until the test has looked
    os.kill(first["pid"], signal.SIGKILL)
    assert kubelet.wait_for(
        lambda: kubelet.capacity(GPU) == REPLICAS and kubelet.allocatable(GPU) == 0, 30
    ), agent.log
    mps["hold"].unlink()
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == REPLICAS, 30), agent.log
    again = record.events("start")[-1]
    assert again["pid"] != first["pid"]
    commands = record.commands(_pipe(mps, GPU))
    assert commands[:9] == commands[9:18], "the restarted daemon gets the same limits"
    assert "MPS control daemon exited" in agent.log
    assert agent.terminate() == 0
    assert [e["pid"] for e in record.events("exit")] == [again["pid"]]


def test_a_daemon_that_cannot_start_leaves_its_devices_advertised_unhealthy(
    kubelet: KubeletDouble, start_agent: Callable[..., AgentProcess], mps: dict[str, Any], tmp_path: Path
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(_mps_config(mps))
    mps["hold"].touch()
    agent = _start(start_agent, mps, config)
    assert kubelet.wait_for(lambda: kubelet.capacity(GPU) == REPLICAS, 30), agent.log
    assert kubelet.allocatable(GPU) == 0
    mps["hold"].unlink()
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == REPLICAS, 30), agent.log
    assert agent.terminate() == 0


def test_a_reload_that_drops_mps_quits_the_daemon(
    kubelet: KubeletDouble, start_agent: Callable[..., AgentProcess], mps: dict[str, Any], tmp_path: Path
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(_mps_config(mps))
    agent = _start(start_agent, mps, config)
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == REPLICAS, 30), agent.log
    config.write_text(f"version: v1\nflags: {{mpsRoot: {mps['root']}}}\n")
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 30), agent.log
    record: Record = mps["record"]
    assert kubelet.wait_for(lambda: len(record.events("exit")) == 1, 30), agent.log
    assert record.commands()[-1] == "quit"
    assert agent.terminate() == 0
    assert len(record.events("exit")) == 1


def test_a_reload_that_brings_mps_starts_and_then_supervises_its_daemon(
    kubelet: KubeletDouble, start_agent: Callable[..., AgentProcess], mps: dict[str, Any], tmp_path: Path
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(f"version: v1\nflags: {{mpsRoot: {mps['root']}}}\n")
    agent = _start(start_agent, mps, config)
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 30), agent.log
    config.write_text(_mps_config(mps))
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == REPLICAS, 30), agent.log
    record: Record = mps["record"]
    [first] = record.events("start")
    mps["hold"].touch()
    os.kill(first["pid"], signal.SIGKILL)
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 0, 30), agent.log
    mps["hold"].unlink()
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == REPLICAS, 30), agent.log
    assert agent.terminate() == 0
    assert [e["pid"] for e in record.events("exit")] == [record.events("start")[-1]["pid"]]


def test_without_the_control_command_the_agent_refuses_to_start(
    start_agent: Callable[..., AgentProcess], mps: dict[str, Any], tmp_path: Path
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(_mps_config(mps).replace(str(mps["control"]), str(tmp_path / "nope")))
    agent = _start(start_agent, mps, config)
    assert agent.proc.wait(30) == 2
    assert "kubegpu.mps.control" in agent.log and "is not an executable file" in agent.log


def test_simulated_gpus_without_a_named_control_command_serve_mps_replicas_with_no_daemon(
    start_agent: Callable[..., AgentProcess], kubelet: KubeletDouble, mps: dict[str, Any], tmp_path: Path
) -> None:
    """Simulated GPUs have no MPS to run: with no kubegpu.mps.control the agent serves the replicas
    and starts no daemon (on real GPUs the control command is required, as the test above shows)."""
    config = tmp_path / "agent.yaml"
    text = _mps_config(mps).replace(f"  mps:\n    control: {mps['control']}\n", "")
    assert "control:" not in text
    config.write_text(text)
    agent = _start(start_agent, mps, config)
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == REPLICAS, 20), agent.log
    assert agent.proc.poll() is None
    assert "no MPS control daemon runs" in agent.log
    assert not mps["record"].events("start")


# -- kubegpu.io/gpu-milli shares with MPS limits (in-process agent, the API faked as in test_agent_shares)


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[FakeApi]]:
    FakeApi.pods, FakeApi.applied, FakeApi.lists = [], [], 0
    monkeypatch.setattr("kubegpu.kubeapi.KubeApi", FakeApi)
    yield FakeApi


def test_unequal_shares_of_one_gpu_get_their_own_mps_limits(
    kubelet: KubeletDouble,
    plugin_dir: Path,
    tmp_path: Path,
    api: type[FakeApi],
    mps: dict[str, Any],
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(
        "version: v1\n"
        f"flags: {{mpsRoot: {mps['root']}}}\n"
        "kubegpu:\n  fractional: true\n  quarantine: {enabled: false}\n"
        f"  mps: {{shares: true, control: {mps['control']}}}\n"
    )
    api.pods = [bound("small", 3, 300, 1), bound("large", 3, 700, 2)]
    agent = Agent(
        AgentOptions(
            node_spec="builtin:seed-8gpu",
            device_plugin_dir=plugin_dir,
            config_file=config,
            node_name="n0",
            mps_check_s=0.1,
        )
    )
    agent.start()
    try:
        assert kubelet.wait_for(lambda: kubelet.allocatable(MILLI) == 8000, 30)
        record: Record = mps["record"]
        pipe = _pipe(mps, MILLI)
        [started] = record.events("start")
        assert started["env"]["CUDA_VISIBLE_DEVICES"] == ",".join(UUIDS)
        assert started["env"]["CUDA_MPS_PIPE_DIRECTORY"] == pipe
        assert record.commands(pipe) == [], "no defaults: each share's client carries its own limits"
        small = kubelet.admit_pod(share("small", 300))["main"]
        large = kubelet.admit_pod(share("large", 700))["main"]
        for runtime, milli in ((small, 300), (large, 700)):
            assert runtime.envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[3]
            assert runtime.envs["KUBEGPU_GPU_MILLI"] == str(milli)
            assert runtime.envs["CUDA_MPS_PIPE_DIRECTORY"] == f"/mps/{MILLI}/pipe"
            assert runtime.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == str(milli // 10)
            assert runtime.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={MEMORY * milli // 1000}M"
            assert runtime.mounts[f"/mps/{MILLI}/pipe"].host_path == pipe
        # whole GPUs are no MPS clients
        whole = kubelet.admit_pod(Pod(uid="w", containers=[Container(name="main", requests={GPU: 1})]))
        assert not any(k.startswith("CUDA_MPS_") for k in whole["main"].envs)
    finally:
        agent.stop()
    assert record.commands(pipe) == ["quit"]
    assert [e["pid"] for e in record.events("exit")] == [started["pid"]]


def test_shares_without_mps_carry_no_limits(
    kubelet: KubeletDouble, plugin_dir: Path, tmp_path: Path, api: type[FakeApi]
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("version: v1\nkubegpu:\n  fractional: true\n  quarantine: {enabled: false}\n")
    api.pods = [bound("a", 2, 300, 1)]
    agent = Agent(
        AgentOptions(
            node_spec="builtin:seed-8gpu", device_plugin_dir=plugin_dir, config_file=config, node_name="n0"
        )
    )
    agent.start()
    try:
        assert kubelet.wait_for(lambda: kubelet.allocatable(MILLI) == 8000, 30)
        envs = kubelet.admit_pod(share("a", 300))["main"].envs
        assert envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[2]
        assert not any(k.startswith("CUDA_MPS_") for k in envs)
    finally:
        agent.stop()
