"""One reading of one GPU's telemetry: what the metrics exporter turns into dcgm-exporter's series.

Both backends produce it: NVML (``sources/nvml.py``) for real GPUs and the load model
(``metrics/simulated.py``) for simulated ones. A field is ``None`` when the GPU or driver cannot say
(NVML "not supported", a failed read): its series is left out, as dcgm-exporter leaves out blank
fields. Units are dcgm-exporter's: percent, degrees C, watts, MiB, MHz, error counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["GpuSample", "MemoryUse"]


@dataclass(frozen=True, kw_only=True)
class MemoryUse:
    """Framebuffer use in MiB."""

    used_mib: int
    free_mib: int


@dataclass(frozen=True, kw_only=True)
class GpuSample:
    """One GPU's readings; ``mig_memory`` holds each MIG instance's framebuffer by MIG UUID."""

    gpu_util: float | None = None
    mem_copy_util: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    memory: MemoryUse | None = None
    sm_clock_mhz: float | None = None
    ecc_sbe_volatile: int | None = None
    ecc_dbe_volatile: int | None = None
    ecc_sbe_aggregate: int | None = None
    ecc_dbe_aggregate: int | None = None
    mig_memory: Mapping[str, MemoryUse] = field(default_factory=dict)
    problems: tuple[str, ...] = ()  # why fields are missing (one line each), for one log line
