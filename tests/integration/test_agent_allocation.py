"""Admission through the kubelet double against the real agent: choices, Allocate responses, bad IDs."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import grpc
import pytest

from kubegpu.deviceplugin.api import v1beta1_pb2 as pb
from kubegpu.sources.spec import load_node
from tests.integration.helpers import allocate, plugin_stub, preferred
from tests.integration.kubelet_double import AdmissionError, Container, KubeletDouble, Pod

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
SEED = load_node("builtin:seed-8gpu")
UUIDS = [g.uuid for g in SEED.gpus]


def _pod(uid: str, count: int, resource: str = GPU) -> Pod:
    return Pod(uid=uid, containers=[Container(name="main", requests={resource: count})])


def _checkpoint_with_pod_holding(plugin_dir: Path, resource: str, ids: list[str]) -> None:
    entry = {
        "PodUID": "old-pod",
        "ContainerName": "main",
        "ResourceName": resource,
        "DeviceIDs": {"-1": ids},
        "AllocResp": base64.b64encode(pb.ContainerAllocateResponse().SerializeToString()).decode(),
    }
    data = {"Data": {"PodDeviceEntries": [entry], "RegisteredDevices": {resource: []}}, "Checksum": 0}
    (plugin_dir / "kubelet_internal_checkpoint").write_text(json.dumps(data))


def test_seed_case_four_gpus_from_free_2_to_7_are_gpus_4_to_7(plugin_dir: Path, start_agent) -> None:
    # GPUs 0 and 1 are held by a running pod (restored from kubelet's checkpoint), so 2..7 are free.
    _checkpoint_with_pod_holding(plugin_dir, GPU, UUIDS[:2])
    kubelet = KubeletDouble(plugin_dir)
    kubelet.start()
    try:
        agent = start_agent("--node-spec", "builtin:seed-8gpu")
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
        config = kubelet.admit_pod(_pod("training", 4))["main"]
        asked = kubelet.calls_named("GetPreferredAllocation")[0].request.container_requests[0]
        assert sorted(asked.available_deviceIDs) == sorted(UUIDS[2:])
        assert asked.allocation_size == 4
        assert config.envs["NVIDIA_VISIBLE_DEVICES"].split(",") == UUIDS[4:8]
    finally:
        kubelet.stop()


def test_preferred_allocation_honours_must_include_and_returns_only_available_ids(
    kubelet: KubeletDouble, start_agent
) -> None:
    agent = start_agent("--node-spec", "builtin:seed-8gpu")
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
    channel, stub = plugin_stub(kubelet.endpoints[GPU].socket)
    with channel:
        got = preferred(stub, UUIDS[2:], 2, must=[UUIDS[2]])  # unknown IDs: test_agent_bounds.py
        assert got[0] == UUIDS[2]
        assert got == [UUIDS[2], UUIDS[3]]  # GPU 2's NVLink peer
        assert set(preferred(stub, UUIDS[5:], 4)) <= set(UUIDS[5:])  # never more than offered


def test_allocate_response_per_device_list_and_id_strategy(kubelet: KubeletDouble, start_agent) -> None:
    agent = start_agent(
        "--node-spec",
        "builtin:seed-8gpu",
        "--device-list-strategy",
        "envvar,volume-mounts,cdi-annotations,cdi-cri",
        "--device-id-strategy",
        "index",
        "--cdi-annotation-prefix",
        "cdi.example.com/",
    )
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
    channel, stub = plugin_stub(kubelet.endpoints[GPU].socket)
    with channel:
        response = allocate(stub, [UUIDS[5], UUIDS[4]])
    # volume-mounts overrides envvar's value, as NVIDIA's plugin does
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == "/var/run/nvidia-container-devices"
    mounts = {m.container_path: m.host_path for m in response.mounts}
    assert mounts == {
        "/var/run/nvidia-container-devices/5": "/dev/null",
        "/var/run/nvidia-container-devices/4": "/dev/null",
    }
    [(key, value)] = response.annotations.items()
    assert key.startswith("cdi.example.com/nvidia-device-plugin_")
    kind = "k8s.device-plugin.kubegpu.io/gpu"  # kubegpu's own kind, declared by the spec it writes
    assert value == f"{kind}=5,{kind}=4"
    assert [d.name for d in response.cdi_devices] == [f"{kind}=5", f"{kind}=4"]
    assert list(response.devices) == []  # passDeviceSpecs is off by default


def test_cdi_only_and_pass_device_specs_from_config_file(
    kubelet: KubeletDouble, plugin_dir: Path, start_agent
) -> None:
    config = plugin_dir.parent / f"{plugin_dir.name}-cfg.json"
    config.write_text(
        json.dumps(
            {
                "version": "v1",
                "flags": {"plugin": {"deviceListStrategy": "cdi-cri", "passDeviceSpecs": True}},
                "kubegpu": {"cdiKind": "k8s.device-plugin.nvidia.com/gpu"},
            }
        )
    )
    try:
        agent = start_agent("--node-spec", "builtin:seed-8gpu", "--config", str(config))
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
        channel, stub = plugin_stub(kubelet.endpoints[GPU].socket)
        with channel:
            response = allocate(stub, [UUIDS[1]])
        assert [d.name for d in response.cdi_devices] == [f"k8s.device-plugin.nvidia.com/gpu={UUIDS[1]}"]
        assert dict(response.envs) == {}  # only CDI: nothing else is injected
        assert list(response.devices) == []
        # passDeviceSpecs applies as soon as a non-CDI strategy is used (CLI beats the file)
        agent.terminate()
        agent = start_agent(
            "--node-spec", "builtin:seed-8gpu", "--config", str(config), "--device-list-strategy", "envvar"
        )
        assert kubelet.wait_for(lambda: kubelet.calls_named("Register.reply").__len__() == 2, 20), agent.log
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
        channel, stub = plugin_stub(kubelet.endpoints[GPU].socket)
        with channel:
            response = allocate(stub, [UUIDS[1]])
        assert response.envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]
        assert [(d.container_path, d.host_path, d.permissions) for d in response.devices][-1] == (
            "/dev/nvidia1",
            "/dev/nvidia1",
            "rw",
        )
    finally:
        config.unlink()


def test_unknown_and_unhealthy_ids_fail_allocate_and_nothing_is_allocated(
    kubelet: KubeletDouble, plugin_dir: Path, start_agent
) -> None:
    faults = plugin_dir.parent / f"{plugin_dir.name}-faults.jsonl"
    faults.write_text("")
    try:
        agent = start_agent("--node-spec", "builtin:seed-8gpu", "--fault-file", str(faults))
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
        channel, stub = plugin_stub(kubelet.endpoints[GPU].socket)
        with channel:
            with pytest.raises(grpc.RpcError) as unknown:
                allocate(stub, [UUIDS[0], "GPU-bogus"])
            assert unknown.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "GPU-bogus" in unknown.value.details()
            with faults.open("a") as f:
                f.write('{"gpu": 0, "xid": 79}\n')
            assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 7, 10)
            with pytest.raises(grpc.RpcError) as unhealthy:
                allocate(stub, [UUIDS[0]])
            assert unhealthy.value.code() is grpc.StatusCode.FAILED_PRECONDITION
            assert "XID 79" in unhealthy.value.details()
        # through admission: the kubelet rolls back and nothing stays allocated
        with pytest.raises(AdmissionError, match="requested number of devices unavailable"):
            kubelet.admit_pod(_pod("too-big", 8))
        assert kubelet.allocations == {}
    finally:
        faults.unlink()


def test_pre_start_check_refuses_a_container_whose_gpu_failed_after_admission(
    kubelet: KubeletDouble, plugin_dir: Path, start_agent
) -> None:
    config = plugin_dir.parent / f"{plugin_dir.name}-cfg.yaml"
    config.write_text("version: v1\nkubegpu:\n  preStartCheck: true\n")
    faults = plugin_dir.parent / f"{plugin_dir.name}-faults.jsonl"
    faults.write_text("")
    try:
        agent = start_agent(
            "--node-spec", "builtin:seed-8gpu", "--config", str(config), "--fault-file", str(faults)
        )
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
        pod = _pod("p", 1)
        kubelet.admit_pod(pod)
        [gpu] = kubelet.allocations[("p", "main", GPU)][0]
        with faults.open("a") as f:
            f.write(json.dumps({"gpu": gpu, "ecc": "dbe"}) + "\n")
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 7, 10)
        with pytest.raises(AdmissionError, match="double-bit"):
            kubelet.start_container(pod, pod.containers[0])
    finally:
        config.unlink()
        faults.unlink()
