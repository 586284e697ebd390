"""Where a GPU's telemetry comes from: NVML for real GPUs, the load model for simulated ones.

``GpuSampler.sample(node, held)`` returns one ``GpuSample`` per GPU index; ``held`` counts the
containers holding each physical device (GPU or MIG UUID, replicas folded), which only the simulated
backend uses (a held GPU is busy). XIDs are not sampled: they come from the agent's health events
(``ledger.py``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kubegpu.errors import InputError
from kubegpu.metrics.ledger import EventLedger
from kubegpu.model.mig import MEMORY_SLICES, profile
from kubegpu.model.node import Gpu, Node
from kubegpu.model.sample import GpuSample, MemoryUse

if TYPE_CHECKING:
    from kubegpu.sources.nvml import NvmlSource

__all__ = [
    "PERIOD_S",
    "SIMULATED_DRIVER_VERSION",
    "GpuSampler",
    "NvmlSampler",
    "PowerProfile",
    "SimulatedSampler",
    "simulate",
]

log = logging.getLogger(__name__)

SIMULATED_DRIVER_VERSION = "simulated"
PERIOD_S = 60.0  # the load model's utilisation wave


class GpuSampler(Protocol):
    def driver_version(self) -> str: ...

    def sample(self, node: Node, held: Mapping[str, int]) -> dict[int, GpuSample]: ...


# -- real GPUs ------------------------------------------------------------------------------------


class NvmlSampler:
    """Reads NVML through the agent's ``NvmlSource`` (``source()`` is ``None`` until NVML is open).

    A GPU whose reads fail keeps the fields it could read; each new set of failures of a GPU is
    logged once, not on every scrape."""

    def __init__(self, source: Callable[[], NvmlSource | None]) -> None:
        self._source = source
        self._lock = threading.Lock()
        self._logged: dict[int, tuple[str, ...]] = {}

    def driver_version(self) -> str:
        source = self._source()
        return source.driver_version() if source is not None else ""

    def sample(self, node: Node, held: Mapping[str, int]) -> dict[int, GpuSample]:
        del held
        source = self._source()
        if source is None:
            return {}
        out: dict[int, GpuSample] = {}
        for gpu in node.gpus:
            sample = source.read_sample(gpu.index)
            with self._lock:
                if sample.problems and self._logged.get(gpu.index) != sample.problems:
                    log.warning(
                        "GPU telemetry partly unreadable; those series are left out",
                        extra={"gpu": gpu.index, "problems": list(sample.problems)},
                    )
                self._logged[gpu.index] = sample.problems
            out[gpu.index] = sample
        return out


# -- simulated GPUs: the load model (docs/metrics.md) --------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PowerProfile:
    idle_w: float
    max_w: float
    max_sm_clock_mhz: float
    idle_sm_clock_mhz: float = 345.0


POWER_PROFILES: dict[str, PowerProfile] = {
    "A100": PowerProfile(idle_w=55.0, max_w=400.0, max_sm_clock_mhz=1410.0),
    "H100": PowerProfile(idle_w=70.0, max_w=700.0, max_sm_clock_mhz=1980.0),
    "H200": PowerProfile(idle_w=75.0, max_w=700.0, max_sm_clock_mhz=1980.0),
    "L40S": PowerProfile(idle_w=35.0, max_w=350.0, max_sm_clock_mhz=2520.0),
    "T4": PowerProfile(idle_w=10.0, max_w=70.0, max_sm_clock_mhz=1590.0),
    "V100": PowerProfile(idle_w=40.0, max_w=300.0, max_sm_clock_mhz=1530.0),
}
DEFAULT_POWER = PowerProfile(idle_w=50.0, max_w=300.0, max_sm_clock_mhz=1500.0)


def _power_profile(model: str) -> PowerProfile:
    family = model.split("-", 1)[0]
    return POWER_PROFILES.get(family, DEFAULT_POWER)


def _busy_memory(total_mib: int, holders: int) -> MemoryUse:
    used = 0 if holders == 0 else round(total_mib * min(0.9, 0.25 + 0.15 * holders))
    return MemoryUse(used_mib=used, free_mib=total_mib - used)


def _mig_total_mib(gpu: Gpu, profile_name: str) -> int:
    try:
        slices = profile(gpu.model, profile_name).memory_slices
    except InputError:
        slices = MEMORY_SLICES
    return gpu.memory_mib * slices // MEMORY_SLICES


def simulate(gpu: Gpu, held: Mapping[str, int], now: float, ledger: EventLedger | None = None) -> GpuSample:
    """The load model: a pure function of the GPU, who holds it, and the wall-clock time ``now``.

    ``h`` = containers holding the GPU or any of its MIG instances. Idle (``h`` = 0): 0 % busy, no
    framebuffer used, idle power and clock, 30 C. Held: utilisation ``75 + 15·sin(2π·now/60 s +
    0.7·index) + 5·(h-1)`` (clamped to 0..100), memory-copy utilisation 45 % of that, framebuffer
    ``min(90 %, 25 % + 15 %·h)`` of the memory, SM clock at the model's maximum; temperature
    ``30 + 0.5·util`` C and power ``idle + (max - idle)·util/100`` W follow the utilisation.
    A MIG instance's framebuffer follows the same rule with its own holders and size.
    """
    mig_held = {str(m.uuid): held.get(str(m.uuid), 0) for m in gpu.mig_instances}
    h = held.get(str(gpu.uuid), 0) + sum(mig_held.values())
    power = _power_profile(gpu.model)
    if h == 0:
        util = 0.0
    else:
        wave = math.sin(2 * math.pi * now / PERIOD_S + 0.7 * gpu.index)
        util = float(min(100, max(0, round(75 + 15 * wave + 5 * (h - 1)))))
    record = ledger.get(gpu.index) if ledger is not None else None
    sbe = record.ecc_single_bit if record is not None else 0
    dbe = record.ecc_double_bit if record is not None else 0
    return GpuSample(
        gpu_util=util,
        mem_copy_util=float(round(util * 0.45)),
        temperature_c=float(round(30 + 0.5 * util)),
        power_w=round(power.idle_w + (power.max_w - power.idle_w) * util / 100, 3),
        memory=_busy_memory(gpu.memory_mib, h),
        sm_clock_mhz=power.max_sm_clock_mhz if h else power.idle_sm_clock_mhz,
        ecc_sbe_volatile=sbe,
        ecc_dbe_volatile=dbe,
        ecc_sbe_aggregate=sbe,
        ecc_dbe_aggregate=dbe,
        mig_memory={
            str(m.uuid): _busy_memory(_mig_total_mib(gpu, m.profile), mig_held[str(m.uuid)])
            for m in gpu.mig_instances
        },
    )


class SimulatedSampler:
    """Deterministic synthetic values for ``--node-spec`` GPUs; ``clock`` is the wall clock."""

    def __init__(self, ledger: EventLedger | None = None, *, clock: Callable[[], float] = time.time) -> None:
        self._ledger = ledger
        self._clock = clock

    def driver_version(self) -> str:
        return SIMULATED_DRIVER_VERSION

    def sample(self, node: Node, held: Mapping[str, int]) -> dict[int, GpuSample]:
        now = self._clock()
        return {g.index: simulate(g, held, now, self._ledger) for g in node.gpus}
