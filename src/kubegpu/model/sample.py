"""One reading of one GPU's telemetry: what the metrics exporter turns into dcgm-exporter's series.

Both backends produce it: NVML (``sources/nvml.py``) for real GPUs and the load model
(``metrics/simulated.py``) for simulated ones. A field is ``None`` when the GPU or driver cannot say
(NVML "not supported", a failed read): its series is left out, as dcgm-exporter leaves out blank
fields. Units are dcgm-exporter's: percent, degrees C, watts, MiB, MHz, millijoules, error counts,
ratios (0..1) for the profiling fields and bytes per second for their PCIe rates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["GpuSample", "MemoryUse", "Profiling", "RemappedRows"]


@dataclass(frozen=True, kw_only=True)
class MemoryUse:
    """Framebuffer use in MiB."""

    used_mib: int
    free_mib: int
    reserved_mib: int | None = None  # NVML's v2 memory info only; ``used`` then excludes it


@dataclass(frozen=True, kw_only=True)
class RemappedRows:
    """NVML's row remapper (Ampere and later): rows remapped for correctable and uncorrectable
    errors, and whether a remapping has failed."""

    correctable: int
    uncorrectable: int
    failed: bool


@dataclass(frozen=True, kw_only=True)
class Profiling:
    """dcgm-exporter's profiling (DCP) fields over the last sampling interval, from NVML's GPU
    performance monitoring (Hopper and later): activity ratios 0..1, PCIe rates in bytes/s."""

    gr_engine_active: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    pcie_tx_bytes: float | None = None
    pcie_rx_bytes: float | None = None


@dataclass(frozen=True, kw_only=True)
class GpuSample:
    """One GPU's readings; ``mig_memory`` and ``mig_profiling`` hold each MIG instance's own
    framebuffer and profiling fields by MIG UUID."""

    gpu_util: float | None = None
    mem_copy_util: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    memory: MemoryUse | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    memory_temperature_c: float | None = None
    energy_mj: int | None = None  # total energy since the driver loaded
    pcie_replays: int | None = None
    enc_util: float | None = None
    dec_util: float | None = None
    remapped_rows: RemappedRows | None = None
    profiling: Profiling | None = None
    ecc_sbe_volatile: int | None = None
    ecc_dbe_volatile: int | None = None
    ecc_sbe_aggregate: int | None = None
    ecc_dbe_aggregate: int | None = None
    mig_memory: Mapping[str, MemoryUse] = field(default_factory=dict)
    mig_profiling: Mapping[str, Profiling] = field(default_factory=dict)
    problems: tuple[str, ...] = ()  # why fields are missing (one line each), for one log line
