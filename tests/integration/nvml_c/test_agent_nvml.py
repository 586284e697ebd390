"""`kubegpu agent --nvml` on the C stand-in through the real pynvml: the kubelet double's view.

The agent advertises the machine's GPUs by UUID, turns an NVML XID event into an Unhealthy device
(and an application XID into nothing), exports DCGM-style metrics from NVML's readings, keeps
serving when a GPU cannot deliver health events, and says so when NVML loses a GPU mid-run.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kubegpu.sources.spec import load_node
from tests.integration.conftest import AgentProcess
from tests.integration.helpers import free_port, scrape_until
from tests.integration.kubelet_double import KubeletDouble
from tests.nvml_standin.machine import Machine

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"


def _unhealthy(kubelet: KubeletDouble) -> set[str]:
    return {i for i, h in kubelet.device_health(GPU).items() if h != "Healthy"}


def _value(text: str, name: str, gpu: int) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and f'gpu="{gpu}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} for GPU {gpu} in the scrape")


def test_the_agent_serves_nvml_gpus_marks_a_fatal_xid_and_exports_nvml_readings(
    kubelet: KubeletDouble, nvml_host, start_agent: Callable[..., AgentProcess]
) -> None:
    host = nvml_host("builtin:dgx-h100")
    uuids = [str(g.uuid) for g in load_node("builtin:dgx-h100").gpus]
    port = free_port()
    agent = start_agent("--nvml", "--metrics-address", f"127.0.0.1:{port}", env=host.env())
    assert kubelet.wait_for(lambda: set(kubelet.device_health(GPU)) == set(uuids), 20), agent.log
    assert not _unhealthy(kubelet)
    host.event(2, "xid", 13)  # "Graphics engine exception": the application's problem, not the GPU's
    host.event(5, "xid", 79)  # "GPU has fallen off the bus": the GPU is gone
    assert kubelet.wait_for(lambda: _unhealthy(kubelet) == {uuids[5]}, 15), agent.log
    text = scrape_until(port, lambda: agent.log, lambda t: "DCGM_FI_DEV_GPU_UTIL{" in t)
    assert _value(text, "DCGM_FI_DEV_GPU_UTIL", 3) == 40  # 37 + index, as the machine says
    assert _value(text, "DCGM_FI_DEV_GPU_TEMP", 3) == 44
    assert _value(text, "DCGM_FI_DEV_POWER_USAGE", 3) == pytest.approx(126.456)
    assert _value(text, "DCGM_FI_DEV_SM_CLOCK", 3) == 1755
    assert 'DCGM_FI_DRIVER_VERSION="550.54.15"' in text
    assert "Traceback" not in agent.log and agent.proc.poll() is None


def test_a_gpu_without_health_events_is_served_and_named(
    kubelet: KubeletDouble, nvml_host, start_agent: Callable[..., AgentProcess]
) -> None:
    machine = Machine.from_node(load_node("builtin:seed-8gpu"))
    machine.gpus[4].health_events = False  # nvmlDeviceGetSupportedEventTypes: "Not Supported"
    agent = start_agent("--nvml", env=nvml_host(machine).env())
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
    assert kubelet.wait_for(lambda: "health events not supported" in agent.log, 10), agent.log
    assert not _unhealthy(kubelet) and "Traceback" not in agent.log


def test_a_gpu_lost_mid_run_makes_the_watcher_fail_loudly_and_recover(
    kubelet: KubeletDouble, nvml_host, start_agent: Callable[..., AgentProcess]
) -> None:
    host = nvml_host("builtin:seed-8gpu")
    uuids = {str(g.uuid) for g in load_node("builtin:seed-8gpu").gpus}
    agent = start_agent("--nvml", env=host.env())
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
    host.fail(("nvmlEventSetWait_v2", 15, -1))  # NVML_ERROR_GPU_IS_LOST from the wait
    assert kubelet.wait_for(lambda: _unhealthy(kubelet) == uuids, 15), agent.log
    assert "fallen off the bus" in agent.log
    host.fail()
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
    assert "NVML health watcher recovered" in agent.log and "Traceback" not in agent.log


def test_without_a_driver_the_agent_exits_with_the_reason(nvml_host, start_agent) -> None:
    machine = Machine.from_node(load_node("builtin:seed-8gpu"))
    machine.faults = [("nvmlInitWithFlags", 9, -1)]
    agent = start_agent("--nvml", env=nvml_host(machine).env())
    assert agent.proc.wait(30) != 0
    assert "the NVIDIA kernel driver is not loaded" in agent.log and "Traceback" not in agent.log
