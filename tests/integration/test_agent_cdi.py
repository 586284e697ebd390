"""The agent's CDI spec against the real agent: under ``cdi-cri`` every name Allocate gives is a device of
the spec the agent wrote (valid CDI, with the devices' nodes and the driver's files), the spec follows a
reload and goes with a clean stop; ``passDeviceSpecs`` gives MIG devices their nvidia-caps nodes."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from kubegpu.sources.spec import load_node
from tests.cdi_shape import check_cdi_spec
from tests.integration.helpers import allocate, plugin_stub
from tests.integration.kubelet_double import KubeletDouble

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
KIND = "k8s.device-plugin.kubegpu.io/gpu"
SPEC_NAME = "k8s.device-plugin.kubegpu.io-gpu_kubegpu-agent.json"
SEED = load_node("builtin:seed-8gpu")
MIG = load_node("builtin:h100-mig-mixed")
UUIDS = [g.uuid for g in SEED.gpus]
LIB = "/usr/lib/x86_64-linux-gnu"
VERSION = "550.54.15"


def _driver_root(base: Path, gpus: int) -> Path:
    """Device nodes and a few driver files under a root of their own (stand-ins: plain files)."""
    root = base / "driver"
    for path in (
        *(f"/dev/nvidia{i}" for i in range(gpus)),
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        f"{LIB}/libcuda.so.{VERSION}",
        f"{LIB}/libnvidia-ml.so.{VERSION}",
        "/usr/bin/nvidia-smi",
    ):
        (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / path.lstrip("/")).write_text("")
    os.symlink(f"libcuda.so.{VERSION}", root / LIB.lstrip("/") / "libcuda.so.1")
    return root


def _wait(predicate, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _spec(path: Path) -> dict:
    spec = json.loads(path.read_text())
    check_cdi_spec(spec)
    return spec


def test_cdi_cri_names_devices_of_the_spec_the_agent_wrote_and_a_stop_removes_it(
    kubelet: KubeletDouble, plugin_dir: Path, start_agent
) -> None:
    root = _driver_root(plugin_dir.parent, 8)
    cdi = plugin_dir.parent / "cdi-dir"
    cdi.mkdir()
    (cdi / "nvidia.com-gpu.yaml").write_text("not ours\n")
    config = plugin_dir.parent / "agent.json"
    config.write_text(json.dumps({"version": "v1", "flags": {"plugin": {"deviceListStrategy": "cdi-cri"}}}))
    agent = start_agent(
        "--node-spec", "builtin:seed-8gpu", "--config", str(config),
        "--nvidia-driver-root", str(root), "--cdi-spec-dir", str(cdi),
    )  # fmt: skip
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
    spec = _spec(cdi / SPEC_NAME)
    assert spec["kind"] == KIND
    declared = {f"{KIND}={d['name']}": d["containerEdits"] for d in spec["devices"]}
    assert set(declared) == {f"{KIND}={u}" for u in UUIDS}

    channel, stub = plugin_stub(kubelet.endpoints[GPU].socket)
    with channel:
        response = allocate(stub, [UUIDS[3], UUIDS[6]])
    names = [d.name for d in response.cdi_devices]
    assert names == [f"{KIND}={UUIDS[3]}", f"{KIND}={UUIDS[6]}"]
    assert declared[names[0]]["deviceNodes"] == [{"path": "/dev/nvidia3", "hostPath": f"{root}/dev/nvidia3"}]
    common = spec["containerEdits"]
    assert [n["path"] for n in common["deviceNodes"]] == ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    mounts = {m["containerPath"]: m["hostPath"] for m in common["mounts"]}
    assert mounts[f"{LIB}/libcuda.so.1"] == f"{root}{LIB}/libcuda.so.{VERSION}"
    assert mounts["/usr/bin/nvidia-smi"] == f"{root}/usr/bin/nvidia-smi"

    # a reload to the index strategy renames the spec's devices as Allocate now names them
    config.write_text(
        json.dumps(
            {
                "version": "v1",
                "flags": {"plugin": {"deviceListStrategy": "cdi-cri", "deviceIDStrategy": "index"}},
            }
        )
    )
    os.kill(agent.proc.pid, signal.SIGHUP)
    assert _wait(lambda: {d["name"] for d in _spec(cdi / SPEC_NAME)["devices"]} == {str(i) for i in range(8)})
    assert _wait(lambda: "config reloaded" in agent.log), agent.log
    channel, stub = plugin_stub(kubelet.endpoints[GPU].socket)
    with channel:
        assert [d.name for d in allocate(stub, [UUIDS[5]]).cdi_devices] == [f"{KIND}=5"]

    assert agent.terminate() == 0
    assert sorted(p.name for p in cdi.iterdir()) == ["nvidia.com-gpu.yaml"]  # its own file only is gone
    assert (cdi / "nvidia.com-gpu.yaml").read_text() == "not ours\n"


def test_a_cdi_directory_that_cannot_be_written_stops_the_start_with_the_setting_named(
    kubelet: KubeletDouble, plugin_dir: Path, start_agent
) -> None:
    blocker = plugin_dir.parent / "a-file"
    blocker.write_text("")
    agent = start_agent(
        "--node-spec", "builtin:seed-8gpu", "--device-list-strategy", "cdi-annotations",
        "--cdi-spec-dir", str(blocker / "cdi"),
    )  # fmt: skip
    assert agent.proc.wait(20) == 2
    assert f"kubegpu.cdiSpecDir {blocker}/cdi: cannot write the CDI spec" in agent.log
    assert kubelet.calls_named("Register") == []


def test_pass_device_specs_and_the_spec_give_mig_devices_their_caps_nodes(
    kubelet: KubeletDouble, plugin_dir: Path, start_agent
) -> None:
    root = _driver_root(plugin_dir.parent, 2)
    caps = root / "dev/nvidia-caps"
    caps.mkdir()
    for n in (21, 22):
        (caps / f"nvidia-cap{n}").write_text("")
    proc = plugin_dir.parent / "proc"
    (proc / "driver/nvidia-caps").mkdir(parents=True)
    (proc / "driver/nvidia-caps/mig-minors").write_text(
        "config 1\nmonitor 2\ngpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\ngpu0/gi3/access 30\n"
    )
    cdi = plugin_dir.parent / "cdi-mig"
    agent = start_agent(
        "--node-spec", "builtin:h100-mig-mixed", "--mig-strategy", "mixed", "--pass-device-specs",
        "--device-list-strategy", "envvar,cdi-cri", "--nvidia-driver-root", str(root),
        "--cdi-spec-dir", str(cdi),
        env={"KUBEGPU_PROC_ROOT": str(proc)},
    )  # fmt: skip
    resource = "nvidia.com/mig-1g.10gb"
    assert kubelet.wait_for(lambda: kubelet.allocatable(resource) == 2, 20), agent.log
    third = MIG.gpus[0].mig_instances[2]  # GPU instance 2
    assert third.gi_index == 2
    channel, stub = plugin_stub(kubelet.endpoints[resource].socket)
    with channel:
        response = allocate(stub, [third.uuid])
    assert [d.container_path for d in response.devices] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia0",
        "/dev/nvidia-caps/nvidia-cap21",
        "/dev/nvidia-caps/nvidia-cap22",
    ]
    assert response.devices[-1].host_path == f"{root}/dev/nvidia-caps/nvidia-cap22"
    [name] = [d.name for d in response.cdi_devices]
    spec = _spec(cdi / SPEC_NAME)
    [device] = [d for d in spec["devices"] if f"{KIND}={d['name']}" == name]
    assert [n["path"] for n in device["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia0",
        "/dev/nvidia-caps/nvidia-cap21",
        "/dev/nvidia-caps/nvidia-cap22",
    ]
