"""Real GPUs as NVIDIA's tools see them (issue 56): NVML is the source of truth, not the catalogue.

The C stand-in plays cloud GPUs with NVML's own figures (name, memory, compute capability, MIG
profile info): an L4, an A10G, an A100 80GB PCIe with MIG off, an H100 NVL with MIG on, and a GPU no
catalogue knows. Through the real pynvml, ``kubegpu labels nvml`` must write what GFD writes for them,
the agent must advertise NVIDIA's MIG resource names and dcgm-exporter's ``modelName``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kubegpu.metrics.dcgm import model_name
from kubegpu.model.node import Node, sysfs_bus_id
from kubegpu.node.labels import LabelInputs, node_labels
from kubegpu.sources.nvml import NvmlSource
from tests.integration.conftest import AgentProcess
from tests.integration.helpers import free_port, scrape_until
from tests.integration.kubelet_double import KubeletDouble
from tests.nvml_standin.machine import Machine

pytestmark = pytest.mark.integration

MIXED = "version: v1\nflags: {migStrategy: mixed}\n"
SINGLE = "version: v1\nflags: {migStrategy: single}\n"


def _gpu(index: int, name: str, memory_mib: int, capability: list[int], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "uuid": f"GPU-5e1f0c2a-7b3d-4c8e-9a6f-{index:012d}",
        "bus_id": f"00000000:{0x18 + 0x10 * index:02X}:00.0",
        "memory_mib": memory_mib,
        "compute_capability": capability,
        **extra,
    }


def _machine(*gpus: dict[str, Any]) -> Machine:
    return Machine.from_dict({"driver": "570.86.15", "cuda": 12080, "gpus": list(gpus)})


# H100 NVL's GPU-instance profiles as NVML describes them (nvmlDeviceGetGpuInstanceProfileInfo):
# constant, id, slices, memory in MiB, SMs and engines per instance. The memory figures are NVML's
# kind (not round GiB): 11008 MiB is 10.75 GiB, which NVIDIA names 1g.12gb (1/8 of 94 GB, rounded).
H100_NVL_PROFILES = [
    {"constant": 0x0, "id": 19, "compute_slices": 1, "memory_slices": 1, "max_count": 7, "memory_mib": 11008,
     "starts": [0, 1, 2, 3, 4, 5, 6], "sms": 16, "copy": 1, "decoders": 1, "jpegs": 1},
    {"constant": 0x7, "id": 20, "compute_slices": 1, "memory_slices": 1, "max_count": 1, "memory_mib": 11008,
     "starts": [0, 1, 2, 3, 4, 5, 6], "sms": 16, "copy": 1, "decoders": 7, "jpegs": 7, "ofas": 1},
    {"constant": 0x9, "id": 15, "compute_slices": 1, "memory_slices": 2, "max_count": 4, "memory_mib": 22144,
     "starts": [0, 2, 4, 6], "sms": 26, "copy": 1, "decoders": 1, "jpegs": 1},
    {"constant": 0x1, "id": 14, "compute_slices": 2, "memory_slices": 2, "max_count": 3, "memory_mib": 22144,
     "starts": [0, 2, 4], "sms": 32, "copy": 2, "decoders": 2, "jpegs": 2},
    {"constant": 0x2, "id": 9, "compute_slices": 3, "memory_slices": 4, "max_count": 2, "memory_mib": 44544,
     "starts": [0, 4], "sms": 60, "copy": 3, "decoders": 3, "jpegs": 3},
    {"constant": 0x3, "id": 5, "compute_slices": 4, "memory_slices": 4, "max_count": 1, "memory_mib": 44544,
     "starts": [0], "sms": 64, "copy": 4, "decoders": 4, "jpegs": 4},
    {"constant": 0x4, "id": 0, "compute_slices": 7, "memory_slices": 8, "max_count": 1, "memory_mib": 89856,
     "starts": [0], "sms": 132, "copy": 7, "decoders": 7, "jpegs": 7, "ofas": 1},
]  # fmt: skip


def _h100_nvl(index: int, instances: list[tuple[int, int]]) -> dict[str, Any]:
    """An H100 NVL with MIG on and GPU instances (profile id, start slot), each with one full CI."""
    return _gpu(
        index,
        "NVIDIA H100 NVL",
        95830,
        [9, 0],
        pci_device_id=0x232110DE,
        sm_count=132,
        mig={"capable": True, "enabled": True},
        mig_profiles=H100_NVL_PROFILES,
        mig_instances=[
            {
                "profile_id": pid,
                "start": start,
                "gi_id": k + 1,
                "uuid": f"MIG-9c0d{index:04d}-1a2b-5c3d-8e4f-{k:012d}",
            }
            for k, (pid, start) in enumerate(instances)
        ],
    )


BALANCED = [(14, 0), (19, 2), (19, 3), (9, 4)]  # 2g.24gb, 2 x 1g.12gb, 3g.47gb


def _labels(nvml_host, machine: Machine, tmp_path: Path, config: str | None = None) -> dict[str, str]:
    argv = ["labels", "nvml", "--json"]
    if config is not None:
        path = tmp_path / "config.yaml"
        path.write_text(config)
        argv += ["--config", str(path)]
    got = nvml_host(machine).kubegpu(*argv)
    assert got.returncode == 0, got.stderr
    labels: dict[str, str] = json.loads(got.stdout)
    return labels


@dataclass(frozen=True)
class Case:
    name: str  # nvmlDeviceGetName
    memory: int  # nvmlDeviceGetMemoryInfo, MiB
    capability: tuple[int, int]  # nvmlDeviceGetCudaComputeCapability
    mig: bool  # nvmlDeviceGetMigMode answers (MIG off)
    product: str  # GFD's gpu.product
    family: str  # GFD's gpu.family


CASES = {
    "l4": Case("NVIDIA L4", 23034, (8, 9), False, "NVIDIA-L4", "ada-lovelace"),
    "a10g": Case("NVIDIA A10G", 23028, (8, 6), False, "NVIDIA-A10G", "ampere"),
    "a100-pcie-mig-off": Case(
        "NVIDIA A100 80GB PCIe", 81920, (8, 0), True, "NVIDIA-A100-80GB-PCIe", "ampere"
    ),
    "unknown-to-the-catalogue": Case(
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        97887,
        (12, 0),
        False,
        "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
        "blackwell",
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_cloud_gpu_gets_gfds_labels_from_nvml(nvml_host, tmp_path: Path, case: Case) -> None:
    name, memory, capability, mig, product, family = (
        case.name, case.memory, list(case.capability), case.mig, case.product, case.family
    )  # fmt: skip
    extra = {"mig": {"capable": True, "enabled": False}} if mig else {}
    labels = _labels(
        nvml_host, _machine(*(_gpu(i, name, memory, capability, **extra) for i in range(2))), tmp_path
    )
    assert labels["nvidia.com/gpu.product"] == product  # NVML's name sanitised, "NVIDIA" kept
    assert labels["nvidia.com/gpu.family"] == family  # from NVML's compute capability
    assert labels["nvidia.com/gpu.compute.major"] == str(capability[0])
    assert labels["nvidia.com/gpu.compute.minor"] == str(capability[1])
    assert labels["nvidia.com/gpu.memory"] == str(memory)
    assert labels["nvidia.com/gpu.count"] == "2"
    # NVIDIA's MIG manager is deployed only where this is true: NVML's MIG mode query decides it
    assert labels["nvidia.com/mig.capable"] == ("true" if mig else "false")
    assert labels["nvidia.com/cuda.driver-version.full"] == "570.86.15"


def test_h100_nvl_mig_profiles_are_named_and_labelled_as_nvidia_does_under_mixed(
    nvml_host, tmp_path: Path
) -> None:
    labels = _labels(nvml_host, _machine(_h100_nvl(0, BALANCED), _h100_nvl(1, BALANCED)), tmp_path, MIXED)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-NVL"
    assert labels["nvidia.com/gpu.family"] == "hopper"
    assert labels["nvidia.com/mig.capable"] == "true"
    assert labels["nvidia.com/gpu.replicas"] == "0"  # every GPU is MIG-enabled
    resources = {
        k.removesuffix(".count") for k in labels if k.startswith("nvidia.com/mig-") and k.endswith(".count")
    }
    # NVIDIA's names, not 1g.11gb, 2g.22gb, 3g.44gb (a memory table rounded to GiB)
    assert resources == {"nvidia.com/mig-1g.12gb", "nvidia.com/mig-2g.24gb", "nvidia.com/mig-3g.47gb"}
    one = {k.removeprefix("nvidia.com/mig-1g.12gb."): v for k, v in labels.items() if "mig-1g.12gb." in k}
    assert one == {
        "count": "4",
        "product": "NVIDIA-H100-NVL-MIG-1g.12gb",
        "replicas": "1",
        "sharing-strategy": "none",
        "memory": "11008",  # NVML's memorySizeMB of the MIG device, not a GiB table
        "multiprocessors": "16",
        "slices.gi": "1",
        "slices.ci": "1",
        "engines.copy": "1",
        "engines.decoder": "1",
        "engines.encoder": "0",
        "engines.jpeg": "1",
        "engines.ofa": "0",
    }
    assert labels["nvidia.com/mig-3g.47gb.memory"] == "44544"
    assert labels["nvidia.com/mig-3g.47gb.multiprocessors"] == "60"
    assert labels["nvidia.com/mig-2g.24gb.count"] == "2"


def test_under_single_the_mig_device_replaces_the_gpu_in_gpu_labels(nvml_host, tmp_path: Path) -> None:
    seven = [(19, slot) for slot in range(7)]
    labels = _labels(nvml_host, _machine(_h100_nvl(0, seven)), tmp_path, SINGLE)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-NVL-MIG-1g.12gb"
    assert labels["nvidia.com/gpu.count"] == "7"
    assert labels["nvidia.com/gpu.memory"] == "11008"  # the MIG device's, not the whole GPU's 95830
    assert labels["nvidia.com/gpu.multiprocessors"] == "16"
    assert labels["nvidia.com/gpu.slices.gi"] == "1" and labels["nvidia.com/gpu.slices.ci"] == "1"
    assert labels["nvidia.com/gpu.engines.decoder"] == "1"
    assert labels["nvidia.com/gpu.family"] == "hopper"


def test_the_plus_me_profile_keeps_its_attribute_from_nvmls_profile_constant(
    nvml_host, tmp_path: Path
) -> None:
    labels = _labels(nvml_host, _machine(_h100_nvl(0, [(20, 0), (15, 2)])), tmp_path, MIXED)
    assert labels["nvidia.com/mig-1g.12gb.me.count"] == "1"  # 1g.12gb+me, '+' as '.' in the name
    assert labels["nvidia.com/mig-1g.12gb.me.engines.ofa"] == "1"
    assert labels["nvidia.com/mig-1g.24gb.count"] == "1"  # one slice, double memory: named by memory


def test_machine_type_and_gpu_mode_come_from_sysfs_as_gfd_reads_them(in_process, tmp_path: Path) -> None:
    machine = _machine(_gpu(0, "NVIDIA L4", 23034, [8, 9]), _gpu(1, "NVIDIA L4", 23034, [8, 9]))
    in_process(machine)
    sysfs = tmp_path / "sys"
    (sysfs / "class/dmi/id").mkdir(parents=True)
    (sysfs / "class/dmi/id/product_name").write_text("g6.12xlarge\n")
    for gpu, cls in zip(machine.gpus, ("0x030200", "0x030200"), strict=True):
        device = sysfs / "bus/pci/devices" / sysfs_bus_id(gpu.bus_id)
        device.mkdir(parents=True)
        (device / "class").write_text(cls + "\n")
    node = _read(sysfs)
    labels = node_labels(node, LabelInputs())
    assert labels["nvidia.com/gpu.machine"] == "g6.12xlarge"
    assert labels["nvidia.com/gpu.mode"] == "compute"  # PCI class 3D controller
    assert labels["nvidia.com/vgpu.present"] == "false"
    (sysfs / "bus/pci/devices" / sysfs_bus_id(machine.gpus[1].bus_id) / "class").write_text("0x030000\n")
    assert node_labels(_read(sysfs), LabelInputs())["nvidia.com/gpu.mode"] == "unknown"  # mixed classes
    (sysfs / "class/dmi/id/product_name").unlink()
    assert node_labels(_read(sysfs), LabelInputs())["nvidia.com/gpu.machine"] == "unknown"


def _read(sysfs: Path | None = None) -> Node:
    source = NvmlSource.open(sysfs=sysfs) if sysfs is not None else NvmlSource.open()
    try:
        return source.read_node("n")
    finally:
        source.close()


def test_dcgm_model_name_is_nvmls_name_as_is(in_process) -> None:
    in_process(_machine(_gpu(0, "NVIDIA L4", 23034, [8, 9]), _h100_nvl(1, BALANCED)))
    node = _read()
    assert [model_name(g) for g in node.gpus] == ["NVIDIA L4", "NVIDIA H100 NVL"]


def test_the_agent_advertises_nvidias_mig_resource_names_on_h100_nvl(
    kubelet: KubeletDouble, nvml_host, start_agent: Callable[..., AgentProcess], tmp_path: Path
) -> None:
    host = nvml_host(_machine(_h100_nvl(0, BALANCED)))
    config = tmp_path / "mixed.yaml"
    config.write_text(MIXED)
    port = free_port()
    agent = start_agent(
        "--nvml", "--config", str(config), "--metrics-address", f"127.0.0.1:{port}", env=host.env()
    )
    want = {"nvidia.com/mig-1g.12gb": 2, "nvidia.com/mig-2g.24gb": 1, "nvidia.com/mig-3g.47gb": 1}

    def advertised() -> dict[str, int]:
        return {r: len(kubelet.device_health(r)) for r in want}

    assert kubelet.wait_for(lambda: advertised() == want, 20), (advertised(), agent.log)
    text = scrape_until(port, lambda: agent.log, lambda t: "DCGM_FI_DEV_GPU_TEMP{" in t)
    assert 'modelName="NVIDIA H100 NVL"' in text
    assert "Traceback" not in agent.log and agent.proc.poll() is None


def test_a_fabric_attached_gb200_is_labelled_from_nvml_without_a_clique(nvml_host, tmp_path: Path) -> None:
    fabric = {"cluster_uuid": "00112233445566778899aabbccddeeff", "clique": 3}
    gpus = [_gpu(i, "NVIDIA GB200", 189471, [10, 0], fabric=fabric, mig={"capable": True}) for i in range(4)]
    labels = _labels(nvml_host, _machine(*gpus), tmp_path)
    assert (labels["nvidia.com/gpu.product"], labels["nvidia.com/gpu.family"]) == (
        "NVIDIA-GB200",
        "blackwell",
    )
    assert labels["nvidia.com/mig.capable"] == "true"  # NVML says so, though no GB200 profile is simulated
    assert "nvidia.com/gpu.clique" not in labels  # a deliberate difference (docs/compat.md)
