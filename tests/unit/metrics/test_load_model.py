"""The simulated GPUs' load model: deterministic, busier when held, temperature and power follow."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kubegpu.metrics.ledger import EventLedger
from kubegpu.metrics.sampler import SimulatedSampler, simulate
from kubegpu.model.event import GpuEvent, GpuEventKind
from kubegpu.model.node import Gpu, GpuUuid, MigInstance, Node

H100 = Gpu(
    index=3,
    uuid=GpuUuid("GPU-h"),
    model="H100-80GB",
    memory_mib=81920,
    numa_node=0,
    pci_bus_id="00000000:48:00.0",
)


def test_an_idle_gpu_is_idle_and_cool() -> None:
    s = simulate(H100, {}, now=1234.5)
    assert (s.gpu_util, s.mem_copy_util, s.temperature_c, s.power_w, s.sm_clock_mhz) == (0, 0, 30, 70, 345)
    assert s.memory is not None and (s.memory.used_mib, s.memory.free_mib) == (0, 81920)


@given(now=st.floats(min_value=0, max_value=1e9), holders=st.integers(min_value=1, max_value=40))
def test_a_held_gpu_is_busy_and_its_temperature_and_power_follow_its_utilisation(
    now: float, holders: int
) -> None:
    s = simulate(H100, {"GPU-h": holders}, now=now)
    assert s.gpu_util is not None and 55 <= s.gpu_util <= 100
    assert s.temperature_c == round(30 + 0.5 * s.gpu_util)
    assert s.power_w == round(70 + 630 * s.gpu_util / 100, 3)
    assert s.sm_clock_mhz == 1980
    assert s.memory is not None and s.memory.used_mib + s.memory.free_mib == 81920
    assert 0 < s.memory.used_mib <= 0.9 * 81920 + 1
    assert s == simulate(H100, {"GPU-h": holders}, now=now)  # deterministic


def test_more_holders_use_more_memory_and_the_wave_moves_with_time() -> None:
    one, three = simulate(H100, {"GPU-h": 1}, now=0), simulate(H100, {"GPU-h": 3}, now=0)
    assert one.memory is not None and three.memory is not None
    assert three.memory.used_mib > one.memory.used_mib
    assert {simulate(H100, {"GPU-h": 1}, now=t).gpu_util for t in range(0, 60, 5)} != {one.gpu_util}


def test_a_mig_instance_has_its_own_framebuffer_and_makes_its_gpu_busy() -> None:
    a100 = Gpu(
        index=0,
        uuid=GpuUuid("GPU-a"),
        model="A100-40GB",
        memory_mib=40960,
        numa_node=0,
        pci_bus_id="00000000:18:00.0",
        mig_enabled=True,
        mig_instances=(
            MigInstance(profile="3g.20gb", start_slot=0, uuid=GpuUuid("MIG-1"), gi_index=1),
            MigInstance(profile="1g.5gb", start_slot=4, uuid=GpuUuid("MIG-2"), gi_index=9),
        ),
    )
    s = simulate(a100, {"MIG-1": 1}, now=0)
    assert s.gpu_util is not None and s.gpu_util > 0
    held, idle = s.mig_memory["MIG-1"], s.mig_memory["MIG-2"]
    assert held.used_mib + held.free_mib == 20480 and held.used_mib > 0
    assert (idle.used_mib, idle.free_mib) == (0, 5120)


def test_ecc_counters_of_simulated_gpus_count_the_health_events_seen() -> None:
    ledger = EventLedger()
    node = Node(name="n", gpus=(H100,), topology=None)
    for kind in (GpuEventKind.ECC_SINGLE_BIT, GpuEventKind.ECC_SINGLE_BIT, GpuEventKind.ECC_DOUBLE_BIT):
        ledger.record(3, GpuEvent(gpu=3, kind=kind))
    ledger.record(3, GpuEvent(gpu=3, kind=GpuEventKind.XID, xid=79))
    s = SimulatedSampler(ledger, clock=lambda: 0.0).sample(node, {})[3]
    assert (s.ecc_sbe_volatile, s.ecc_dbe_volatile, s.ecc_sbe_aggregate, s.ecc_dbe_aggregate) == (2, 1, 2, 1)
    assert ledger.get(3).last_xid == 79
