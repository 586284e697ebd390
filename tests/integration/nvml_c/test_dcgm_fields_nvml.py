"""dcgm-exporter's default counters read from NVML through the real pynvml and the C stand-in.

Every family of dcgm-exporter's ``etc/default-counters.csv`` that NVML can give is served with
dcgm-exporter's name, type and HELP text; a family NVML cannot give on a GPU (profiling before
Hopper, HBM fields on GDDR boards, row remapping before Ampere) is left out for that GPU, not faked.
"""

from __future__ import annotations

from typing import Any

import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kubegpu.metrics.dcgm import DcgmCollector
from kubegpu.metrics.ledger import EventLedger
from kubegpu.metrics.sampler import NvmlSampler
from kubegpu.sources.nvml import NvmlSource
from kubegpu.sources.spec import load_node
from tests.nvml_standin.machine import Machine

pytestmark = pytest.mark.integration

# dcgm-exporter 4.x etc/default-counters.csv: name -> (type, HELP), the families NVML can give
DEFAULT_COUNTERS = {
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM clock frequency (in MHz)."),
    "DCGM_FI_DEV_MEM_CLOCK": ("gauge", "Memory clock frequency (in MHz)."),
    "DCGM_FI_DEV_MEMORY_TEMP": ("gauge", "Memory temperature (in C)."),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("counter", "Total energy consumption since boot (in mJ)."),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("counter", "Total number of PCIe retries."),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("gauge", "Memory utilization (in %)."),
    "DCGM_FI_DEV_ENC_UTIL": ("gauge", "Encoder utilization (in %)."),
    "DCGM_FI_DEV_DEC_UTIL": ("gauge", "Decoder utilization (in %)."),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered."),
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB)."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_FB_RESERVED": ("gauge", "Framebuffer memory reserved (in MiB)."),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": (
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("counter", "Number of remapped rows for correctable errors"),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("gauge", "Whether remapping of rows has failed"),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", "Ratio of time the graphics engine is active."),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    "DCGM_FI_PROF_DRAM_ACTIVE": (
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
    "DCGM_FI_PROF_PCIE_TX_BYTES": (
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads "
        "- in bytes per second.",
    ),
    "DCGM_FI_PROF_PCIE_RX_BYTES": (
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads "
        "- in bytes per second.",
    ),
}
PROFILING = {name for name in DEFAULT_COUNTERS if name.startswith("DCGM_FI_PROF_")}
HBM = {
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
}


def _machine() -> Machine:
    """An H100 (Hopper: GPM), an A100 (Ampere: row remapper, no GPM) and a T4 (Turing, GDDR6)."""
    return Machine.from_dict(
        {
            "gpus": [
                {
                    "name": "NVIDIA H100 80GB HBM3",
                    "uuid": "GPU-00000000-0000-0000-0000-0000000000a0",
                    "bus_id": "00000000:18:00.0",
                    "memory_mib": 81559,
                    "memory_used_mib": 1000,
                    "sample": {
                        "mem_clock_mhz": 2619,
                        "memory_temp_c": 47,
                        "energy_mj": 987654321,
                        "pcie_replays": 3,
                        "enc_util": 0,
                        "dec_util": 7,
                        "reserved_mib": 512,
                        "remapped_rows": [2, 1, 0, 1],
                        "gpm": {
                            "graphics": 55.5,
                            "tensor": 31.25,
                            "dram": 40.0,
                            "pcie_tx": 100.0,
                            "pcie_rx": 2.5,
                        },
                    },
                },
                {
                    "name": "NVIDIA A100-SXM4-40GB",
                    "uuid": "GPU-00000000-0000-0000-0000-0000000000a1",
                    "bus_id": "00000000:28:00.0",
                    "memory_mib": 40960,
                },
                {
                    "name": "Tesla T4",
                    "uuid": "GPU-00000000-0000-0000-0000-0000000000a2",
                    "bus_id": "00000000:38:00.0",
                    "memory_mib": 15360,
                },
            ]
        }
    )


def _scrape(source: NvmlSource, node: Any) -> dict[str, Any]:
    text = DcgmCollector(
        node=lambda: node,
        sampler=NvmlSampler(lambda: source),
        holders=None,
        ledger=EventLedger(),
        hostname="h",
    ).render()
    return {"text": text, "families": {f.name: f for f in text_string_to_metric_families(text)}}


def test_a_hopper_gpu_gives_every_default_counter_nvml_has_in_dcgm_exporters_units(in_process) -> None:  # type: ignore[no-untyped-def]
    in_process(_machine())
    source = NvmlSource.open()
    try:
        source.read_node("n")
        first = source.read_sample(0)
        assert first.profiling is None  # GPM measures between two samples: the first read has none
        s = source.read_sample(0)
        assert (s.mem_clock_mhz, s.memory_temperature_c, s.energy_mj, s.pcie_replays) == (
            2619,
            47,
            987654321,
            3,
        )
        assert (s.enc_util, s.dec_util) == (0, 7)
        assert s.memory is not None
        # v2 memory info: the reserved part apart from used, as DCGM reports FB_USED and FB_RESERVED
        assert (s.memory.used_mib, s.memory.reserved_mib, s.memory.free_mib) == (1000, 512, 81559 - 1512)
        assert s.remapped_rows is not None
        assert (s.remapped_rows.correctable, s.remapped_rows.uncorrectable, s.remapped_rows.failed) == (
            2,
            1,
            True,
        )
        p = s.profiling
        assert p is not None
        assert (p.gr_engine_active, p.tensor_active, p.dram_active) == pytest.approx((0.555, 0.3125, 0.40))
        assert (p.pcie_tx_bytes, p.pcie_rx_bytes) == (100 * 2**20, 2.5 * 2**20)  # MiB/s -> bytes/s
        assert s.problems == ()
    finally:
        source.close()


def test_families_nvml_cannot_give_on_a_gpu_are_left_out_for_that_gpu_not_faked(in_process) -> None:  # type: ignore[no-untyped-def]
    in_process(_machine())
    source = NvmlSource.open()
    try:
        node = source.read_node("n")
        _scrape(source, node)
        scrape = _scrape(source, node)
        families = scrape["families"]
        assert set(families) >= set(DEFAULT_COUNTERS)
        # docs/compat.md D1, D2: the two default families kubegpu does not read from NVML
        assert "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" not in families
        assert "DCGM_FI_DEV_VGPU_LICENSE_STATUS" not in families
        for name, (kind, help_text) in DEFAULT_COUNTERS.items():
            assert f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n" in scrape["text"]
        gpus = {name: {s.labels["gpu"] for s in families[name].samples} for name in DEFAULT_COUNTERS}
        for name in PROFILING:
            assert gpus[name] == {"0"}  # Hopper only: the A100 and the T4 have no GPM
        for name in HBM:
            assert gpus[name] == {"0", "1"}  # HBM boards (A100 and H100), not the T4's GDDR6
        assert gpus["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == {"0", "1", "2"}
        assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE{" in scrape["text"]
        line = next(x for x in scrape["text"].splitlines() if x.startswith("DCGM_FI_PROF_GR_ENGINE_ACTIVE{"))
        assert line.endswith(" 0.555000")  # a double field, written %f as dcgm-exporter does
        row_failure = next(
            s for s in families["DCGM_FI_DEV_ROW_REMAP_FAILURE"].samples if s.labels["gpu"] == "0"
        )
        assert row_failure.value == 1
    finally:
        source.close()


def test_mig_series_report_gpu_util_0_and_each_instances_own_profiling(in_process) -> None:  # type: ignore[no-untyped-def]
    machine = Machine.from_node(load_node("builtin:h100-mig-mixed"))
    machine.gpus[0].mig_instances[0].busy = True  # the other instances are idle
    in_process(machine)
    source = NvmlSource.open()
    try:
        node = source.read_node("n")
        _scrape(source, node)
        families = _scrape(source, node)["families"]
        mig = [s for s in families["DCGM_FI_DEV_GPU_UTIL"].samples if "GPU_I_ID" in s.labels]
        assert len(mig) == 4 and all(s.value == 0 for s in mig)  # dcgm-exporter: not measurable per instance
        busy_gi = str(machine.gpus[0].mig_instances[0].gi_id)
        engine = {
            s.labels["GPU_I_ID"]: s.value
            for s in families["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].samples
            if "GPU_I_ID" in s.labels
        }
        assert len(engine) == 4
        assert engine.pop(busy_gi) == pytest.approx(0.55)  # the busy instance's own activity
        assert set(engine.values()) == {0.0}  # the idle ones', not the parent's
        for name in ("DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_PROF_PCIE_TX_BYTES"):
            assert all("GPU_I_ID" not in s.labels for s in families[name].samples)
    finally:
        source.close()


def test_the_stand_in_answers_the_new_calls_with_nvml_h_codes(in_process) -> None:  # type: ignore[no-untyped-def]
    in_process(_machine())
    pynvml.nvmlInit()
    try:
        h100, a100, t4 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3))

        def code(call: Any, *args: Any) -> int:
            with pytest.raises(pynvml.NVMLError) as err:
                call(*args)
            return int(err.value.value)

        assert code(pynvml.nvmlDeviceGetRemappedRows, t4) == pynvml.NVML_ERROR_NOT_SUPPORTED
        assert pynvml.nvmlDeviceGetRemappedRows(a100) == (1, 0, 0, 0)
        assert pynvml.nvmlGpmQueryDeviceSupport(a100).isSupportedDevice == 0
        assert pynvml.nvmlGpmQueryDeviceSupport(h100).isSupportedDevice == 1
        sample = pynvml.nvmlGpmSampleAlloc()
        assert code(pynvml.nvmlGpmSampleGet, a100, sample) == pynvml.NVML_ERROR_NOT_SUPPORTED
        pynvml.nvmlGpmSampleFree(sample)
        (temp,) = pynvml.nvmlDeviceGetFieldValues(t4, [pynvml.NVML_FI_DEV_MEMORY_TEMP])
        assert temp.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
        (temp,) = pynvml.nvmlDeviceGetFieldValues(h100, [pynvml.NVML_FI_DEV_MEMORY_TEMP])
        assert (temp.nvmlReturn, temp.value.uiVal) == (pynvml.NVML_SUCCESS, 47)
        assert (
            code(pynvml.nvmlDeviceGetMemoryInfo, h100, 0x01000028)
            == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        )
        v1 = pynvml.nvmlDeviceGetMemoryInfo(h100)
        assert v1.used == (1000 + 512) * 2**20  # v1 counts the reserved part as used
        assert pynvml.nvmlDeviceGetClockInfo(h100, pynvml.NVML_CLOCK_MEM) == 2619
        assert pynvml.nvmlDeviceGetDecoderUtilization(h100)[0] == 7
        assert pynvml.nvmlDeviceGetTotalEnergyConsumption(t4) == 1_000_002_000
    finally:
        pynvml.nvmlShutdown()
