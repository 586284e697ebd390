"""`kubegpu doctor node`'s NVML check (host.nvml-library) with the real pynvml on the C stand-in.

The host's files are a fixture root whose PCI bus lists the machine's GPUs; the GPUs themselves are
read through the agent's own NVML funnel, so what the doctor says is what the device plugin would see.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.doctor import Status, node_report
from kubegpu.sources.nvml import read_host
from kubegpu.sources.spec import load_node
from tests.nvml_standin.machine import Machine
from tests.unit.doctor.fakehost import FakeHost

pytestmark = pytest.mark.integration


def _host_for(machine: Machine, root: Path) -> FakeHost:
    host = FakeHost.healthy(root)
    for gpu in machine.gpus:
        host.pci(gpu.bus_id[4:].lower())
    return host


def test_the_doctor_lists_what_the_plugins_nvml_reads(in_process, tmp_path: Path) -> None:
    machine = in_process("builtin:h100-mig-mixed")
    host = _host_for(machine, tmp_path / "root")
    finding = node_report(host.root, nvml=lambda: read_host("n")).by_id("host.nvml-library")
    # the fixture's healthy host has two GPUs of its own on the bus, besides the machine's two
    assert finding.status is Status.WARN and "sees 2 GPU(s), the PCI bus 4" in finding.summary
    assert "driver 550.54.15, CUDA 12.4" in finding.summary
    assert any("MIG on, 4 instance(s)" in line for line in finding.evidence)
    uuids = {str(g.uuid) for g in load_node("builtin:h100-mig-mixed").gpus}
    assert {line.split()[-1] for line in finding.evidence if "MIG" not in line} <= uuids


@pytest.mark.parametrize(
    ("code", "says"),
    [(9, "NVIDIA kernel driver is not loaded"), (4, "no permission"), (18, "version mismatch")],
)
def test_the_doctor_names_an_nvml_that_does_not_start(
    in_process, tmp_path: Path, code: int, says: str
) -> None:
    machine = in_process("builtin:seed-8gpu", faults=[("nvmlInitWithFlags", code, -1)])
    host = _host_for(machine, tmp_path / "root")
    finding = node_report(host.root, nvml=lambda: read_host("n")).by_id("host.nvml-library")
    assert finding.status is Status.FAIL and says in finding.summary, finding
    assert finding.fix
