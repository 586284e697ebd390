"""dcgm-exporter's default counters on the /metrics text: XID texts, MIG series, families left out."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

from kubegpu.health.xid import XID_MEANINGS
from kubegpu.metrics.dcgm import DcgmCollector
from kubegpu.metrics.holders import CachedHolders
from kubegpu.metrics.ledger import EventLedger
from kubegpu.metrics.sampler import SimulatedSampler
from kubegpu.metrics.xid_text import XID_TEXTS
from kubegpu.model.event import GpuEvent, GpuEventKind
from kubegpu.model.holder import DeviceHolder
from kubegpu.model.node import Gpu, GpuUuid, MigInstance, Node
from kubegpu.model.sample import GpuSample, MemoryUse, Profiling

MIGS = (
    MigInstance(profile="3g.40gb", start_slot=0, uuid=GpuUuid("MIG-a"), gi_index=2),
    MigInstance(profile="3g.40gb", start_slot=4, uuid=GpuUuid("MIG-b"), gi_index=1),
)
NODE = Node(
    name="n",
    gpus=tuple(
        Gpu(
            index=i,
            uuid=GpuUuid(f"GPU-{i}"),
            model="H100-80GB",
            memory_mib=81559,
            numa_node=0,
            pci_bus_id=f"00000000:{0x18 + i:02X}:00.0",
            mig_enabled=i == 1,
            mig_instances=MIGS if i == 1 else (),
        )
        for i in range(2)
    ),
    topology=None,
)


class Holders:
    def __init__(self, holders: list[DeviceHolder]) -> None:
        self.value = holders

    def holders(self) -> list[DeviceHolder]:
        return self.value


class Fixed:
    """A sampler that gives the same readings every time."""

    def __init__(self, samples: dict[int, GpuSample]) -> None:
        self.samples = samples

    def driver_version(self) -> str:
        return "550.54.15"

    def sample(self, node: Node, held: Mapping[str, int]) -> dict[int, GpuSample]:
        return self.samples


def _families(collector: DcgmCollector) -> tuple[str, dict[str, list[tuple[dict[str, str], float]]]]:
    text = collector.render()
    return text, {
        f.name: [(s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)
    }


def test_xid_err_msg_is_dcgm_exporters_text_for_every_code_it_lists() -> None:
    ledger = EventLedger()
    codes = {0: 48, 1: 154}
    for gpu, xid in codes.items():
        ledger.record(gpu, GpuEvent(gpu=gpu, kind=GpuEventKind.XID, xid=xid))
    _, families = _families(
        DcgmCollector(
            node=lambda: NODE, sampler=SimulatedSampler(ledger), holders=None, ledger=ledger, hostname="h"
        )
    )
    msgs = {
        labels["GPU_I_ID"] if "GPU_I_ID" in labels else labels["gpu"]: labels["err_msg"]
        for labels, _ in families["DCGM_FI_DEV_XID_ERRORS"]
    }
    assert msgs["0"] == "Double Bit ECC Error"
    assert msgs["1"] == msgs["2"] == "GPU Recovery Action Changed"  # outside the health catalogue's 18
    # dcgm-exporter's wording, letter for letter, where kubegpu's health catalogue words it its own way
    assert XID_TEXTS[79] == "GPU has fallen off the bus"
    assert XID_TEXTS[63] == "ECC page retirement or row remapping recording event"
    assert XID_TEXTS[94] == "Contained ECC error"
    assert XID_TEXTS[13] == "Graphics Engine Exception"
    assert XID_TEXTS[109] == "Context Switch Timeout Error"
    assert XID_TEXTS[119] == "GSP RPC Timeout"
    assert (
        XID_TEXTS[45]
        == "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda"
    )
    assert sorted(XID_TEXTS) == list(range(173))
    assert XID_MEANINGS[94] == "contained ECC error"  # the health policy keeps its own meanings


def test_codes_outside_dcgm_exporters_table_read_unknown_error() -> None:
    ledger = EventLedger()
    ledger.record(0, GpuEvent(gpu=0, kind=GpuEventKind.XID, xid=999))
    _, families = _families(
        DcgmCollector(
            node=lambda: NODE, sampler=SimulatedSampler(ledger), holders=None, ledger=ledger, hostname="h"
        )
    )
    labels, value = families["DCGM_FI_DEV_XID_ERRORS"][0]
    assert (labels["err_code"], labels["err_msg"], value) == ("999", "Unknown Error", 999)


def test_a_mig_series_reports_gpu_util_0_not_the_parents() -> None:
    ledger = EventLedger()
    holders = Holders(
        [
            DeviceHolder(
                namespace="ml",
                pod="p",
                container="c",
                resource="nvidia.com/mig-3g.40gb",
                device_ids=("MIG-a",),
            )
        ]
    )
    _, families = _families(
        DcgmCollector(
            node=lambda: NODE,
            sampler=SimulatedSampler(ledger, clock=lambda: 0.0),
            holders=CachedHolders(holders),
            ledger=ledger,
            hostname="h",
        )
    )
    util = {
        labels.get("GPU_I_ID", "-"): value
        for labels, value in families["DCGM_FI_DEV_GPU_UTIL"]
        if labels["gpu"] == "1"
    }
    assert util == {"2": 0, "1": 0}  # the parent is busy (held through MIG-a), the instances say 0
    assert all("GPU_I_ID" not in labels for labels, _ in families["DCGM_FI_DEV_MEM_COPY_UTIL"])


def test_profiling_on_a_mig_series_is_the_instances_own_and_absent_families_are_not_written() -> None:
    whole = Profiling(
        gr_engine_active=0.9, tensor_active=0.5, dram_active=0.25, pcie_tx_bytes=1e6, pcie_rx_bytes=2e6
    )
    samples = {
        0: GpuSample(gpu_util=50, memory=MemoryUse(used_mib=1, free_mib=2, reserved_mib=3), profiling=whole),
        1: GpuSample(
            profiling=whole,
            mig_memory={"MIG-a": MemoryUse(used_mib=4, free_mib=5)},
            mig_profiling={"MIG-a": Profiling(gr_engine_active=0.125)},
        ),
    }
    text, families = _families(
        DcgmCollector(
            node=lambda: NODE, sampler=Fixed(samples), holders=None, ledger=EventLedger(), hostname="h"
        )
    )
    engine = {
        labels.get("GPU_I_ID", labels["gpu"]): value
        for labels, value in families["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    }
    assert engine == {"0": 0.9, "2": 0.125}  # MIG-b has no reading of its own: left out, not the parent's
    assert {labels["gpu"] for labels, _ in families["DCGM_FI_PROF_PCIE_TX_BYTES"]} == {"0"}
    assert [v for labels, v in families["DCGM_FI_DEV_FB_RESERVED"]] == [
        3
    ]  # MIG-a's memory has no reserved figure
    assert "DCGM_FI_DEV_MEM_CLOCK" not in text  # no GPU reports it: no empty family
    assert "DCGM_FI_DEV_ROW_REMAP_FAILURE" not in text
