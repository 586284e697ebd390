"""`kubegpu topo|labels|dra devices|mig current nvml`: this host's GPUs read through the real pynvml,
its ctypes layer and the C stand-in, must be the node the machine was made from, and NVML's failures
must reach the user as one explained line (exit 1, no traceback)."""

from __future__ import annotations

import ctypes.util
import json
from pathlib import Path

import pytest

from kubegpu.sources.spec import load_node
from tests.nvml_standin.machine import Machine

pytestmark = pytest.mark.integration

MACHINES = ("seed-8gpu", "dgx-h100", "dgx1-v100", "h100-mig-mixed", "dgx-a100", "pcie-8gpu")


def _topo(result_stdout: str) -> dict[str, object]:
    doc = json.loads(result_stdout)
    for gpu in doc["gpus"]:
        gpu.pop("numa_node")  # NVML leaves NUMA to sysfs, where these bus IDs do not exist
    return doc


@pytest.mark.parametrize("name", MACHINES)
def test_the_node_read_through_nvml_is_the_node_spec_it_was_made_from(nvml_host, name: str) -> None:
    host = nvml_host(f"builtin:{name}")
    got = host.kubegpu("topo", "nvml", "--json")
    assert got.returncode == 0, got.stderr
    want = host.kubegpu("topo", f"builtin:{name}", "--json")
    a, b = _topo(got.stdout), _topo(want.stdout)
    assert a["links"] == b["links"]  # NVLink lanes (direct or through NVSwitch ports) and PCIe levels
    assert a["gpus"] == b["gpus"]  # UUIDs, models from NVML product names, memory, bus IDs, MIG layout
    assert a["nvlink_groups"] == b["nvlink_groups"]


def test_labels_from_nvml_carry_the_driver_and_cuda_versions_nvml_reports(nvml_host) -> None:
    machine = Machine.from_node(load_node("builtin:dgx-h100"), driver="560.35.03", cuda=12060)
    host = nvml_host(machine)
    got = host.kubegpu("labels", "nvml", "--json")
    assert got.returncode == 0, got.stderr
    labels = json.loads(got.stdout)
    assert labels["nvidia.com/cuda.driver-version.full"] == "560.35.03"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.6"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    # NVML's total, as GFD publishes it for this GPU (the catalogue holds NVML's figure since issue 56)
    assert labels["nvidia.com/gpu.count"] == "8" and labels["nvidia.com/gpu.memory"] == "81559"
    spec = json.loads(host.kubegpu("labels", "builtin:dgx-h100", "--json").stdout)
    # This host's sysfs has neither the machine's PCI functions nor (maybe) DMI: GFD then says unknown
    assert labels.pop("nvidia.com/gpu.mode") == "unknown" and spec.pop("nvidia.com/gpu.mode") == "compute"
    assert labels.pop("nvidia.com/gpu.machine")  # this host's DMI product name, or unknown
    assert {k: v for k, v in labels.items() if "cuda." not in k} == spec  # the rest as for the spec


def _pci_functions(n: int) -> list[str]:
    """``n`` PCI functions this host really has (sysfs), as NVML writes bus IDs."""
    found = sorted(Path("/sys/bus/pci/devices").iterdir()) if Path("/sys/bus/pci/devices").is_dir() else []
    if len(found) < n:
        pytest.fail(f"this host's sysfs lists {len(found)} PCI functions; the test needs {n}")
    return [f"0000{p.name.upper()}" for p in found[:n]]


def test_dra_devices_from_nvml_have_the_pcie_root_and_driver_version_of_this_host(nvml_host) -> None:
    machine = Machine.from_node(load_node("builtin:h100-mig-mixed"))
    buses = _pci_functions(2)
    for gpu, bus in zip(machine.gpus, buses, strict=True):
        gpu.bus_id = bus
    got = nvml_host(machine).kubegpu("dra", "devices", "nvml", "--json")
    assert got.returncode == 0, got.stderr
    devices = {d["name"]: d["attributes"] for d in json.loads(got.stdout)}
    whole = devices["gpu-1"]
    root = Path("/sys/bus/pci/devices", buses[1][4:].lower()).resolve()
    want_root = next(p for p in root.parts if p.startswith("pci") and ":" in p)
    assert whole["resource.kubernetes.io/pcieRoot"] == {"string": want_root}
    assert whole["resource.kubernetes.io/pciBusID"] == {"string": buses[1].lower()}
    assert whole["driverVersion"] == {"version": "550.54.15"}
    migs = [a for name, a in devices.items() if name.startswith("gpu-0-mig-")]
    assert sorted(a["profile"]["string"] for a in migs) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]


def test_mig_current_lists_what_nvml_reports_and_changes_nothing(nvml_host) -> None:
    host = nvml_host("builtin:h100-mig-mixed")
    first = host.kubegpu("mig", "current", "nvml", "--json")
    assert first.returncode == 0, first.stderr
    gpus = json.loads(first.stdout)["gpus"]
    assert [g["mig_enabled"] for g in gpus] == [True, False]
    spec = load_node("builtin:h100-mig-mixed").gpus[0]
    want = sorted((m.profile, m.start_slot, m.gi_index, str(m.uuid)) for m in spec.mig_instances)
    got = sorted((m["profile"], m["start_slot"], m["gpu_instance"], m["uuid"]) for m in gpus[0]["instances"])
    assert got == want
    assert host.kubegpu("mig", "current", "nvml", "--json").stdout == first.stdout


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        (("nvmlInitWithFlags", 9, -1), "the NVIDIA kernel driver is not loaded"),
        (("nvmlInitWithFlags", 4, -1), "no permission to talk to the NVIDIA driver"),
        (("nvmlInitWithFlags", 18, -1), "driver/library version mismatch"),
        (("nvmlDeviceGetUUID", 15, 3), "fallen off the bus"),
        (("nvmlDeviceGetPciInfo_v3", 999, 0), "Unknown Error"),
    ],
    ids=["driver-not-loaded", "insufficient-permissions", "version-mismatch", "gpu-lost", "unknown"],
)
def test_nvml_failures_are_one_explained_line(nvml_host, fault: tuple[str, int, int], says: str) -> None:
    machine = Machine.from_node(load_node("builtin:seed-8gpu"))
    machine.faults = [fault]
    for argv in (
        ("topo", "nvml"),
        ("labels", "nvml"),
        ("dra", "devices", "nvml"),
        ("mig", "current", "nvml"),
    ):
        got = nvml_host(machine).kubegpu(*argv)
        assert got.returncode == 1, (argv, got.stdout, got.stderr)
        assert says in got.stderr and "Traceback" not in got.stderr, (argv, got.stderr)
        assert len(got.stderr.strip().splitlines()) == 1, got.stderr


def test_without_the_library_nvml_is_named_missing(nvml_host) -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this host has a real libnvidia-ml: the library cannot be missing here")
    host = nvml_host("builtin:seed-8gpu")
    got = host.kubegpu("topo", "nvml", LD_LIBRARY_PATH="/nonexistent")
    assert got.returncode == 1 and "libnvidia-ml.so.1" in got.stderr and "Traceback" not in got.stderr
