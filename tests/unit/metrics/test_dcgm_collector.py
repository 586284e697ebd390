"""The /metrics text: dcgm-exporter's names, types and labels, pod labels per holder, XIDs from events."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from kubegpu.metrics.dcgm import FIELDS, DcgmCollector
from kubegpu.metrics.holders import CachedHolders
from kubegpu.metrics.ledger import EventLedger
from kubegpu.metrics.sampler import SimulatedSampler
from kubegpu.model.event import GpuEvent, GpuEventKind
from kubegpu.model.holder import DeviceHolder
from kubegpu.model.node import Gpu, GpuUuid, MigInstance, Node

GPUS = (
    Gpu(
        index=0,
        uuid=GpuUuid("GPU-0"),
        model="H100-80GB",
        memory_mib=81920,
        numa_node=0,
        pci_bus_id="00000000:18:00.0",
    ),
    Gpu(
        index=1,
        uuid=GpuUuid("GPU-1"),
        model="A100-40GB",
        memory_mib=40960,
        numa_node=0,
        pci_bus_id="00000000:28:00.0",
        mig_enabled=True,
        mig_instances=(MigInstance(profile="3g.20gb", start_slot=0, uuid=GpuUuid("MIG-x"), gi_index=2),),
    ),
)
NODE = Node(name="n", gpus=GPUS, topology=None)
SIMULATED = {
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "DCGM_FI_DEV_XID_ERRORS",
}


class Holders:
    def __init__(self, holders: list[DeviceHolder]) -> None:
        self.value = holders

    def holders(self) -> list[DeviceHolder]:
        return self.value


def _holder(pod: str, *ids: str) -> DeviceHolder:
    return DeviceHolder(namespace="ml", pod=pod, container="main", resource="nvidia.com/gpu", device_ids=ids)


def _scrape(
    holders: list[DeviceHolder], ledger: EventLedger | None = None
) -> dict[str, list[tuple[dict[str, str], float]]]:
    ledger = ledger or EventLedger()
    text = DcgmCollector(
        node=lambda: NODE,
        sampler=SimulatedSampler(ledger, clock=lambda: 0.0),
        holders=CachedHolders(Holders(holders)),
        ledger=ledger,
        hostname="node-1",
    ).render()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) >= SIMULATED  # the load model's fields; NVML's others are left out, not faked
    for field in FIELDS:
        if field.name in families:
            assert f"# TYPE {field.name} {field.type}\n{field.name}{{" in text
        else:
            assert f"# HELP {field.name} " not in text  # no empty family
    return {name: [(s.labels, s.value) for s in f.samples] for name, f in families.items()}


def test_every_series_carries_dcgm_exporters_labels() -> None:
    series = _scrape([])
    labels, _ = series["DCGM_FI_DEV_GPU_TEMP"][0]
    assert list(labels.items()) == list(
        {
            "gpu": "0",
            "UUID": "GPU-0",
            "pci_bus_id": "00000000:18:00.0",
            "device": "nvidia0",
            "modelName": "NVIDIA H100 80GB HBM3",
            "Hostname": "node-1",
            "DCGM_FI_DRIVER_VERSION": "simulated",
        }.items()
    )  # in dcgm-exporter's order
    mig_labels, _ = series["DCGM_FI_DEV_FB_FREE"][1]
    assert (mig_labels["UUID"], mig_labels["GPU_I_PROFILE"], mig_labels["GPU_I_ID"]) == (
        "GPU-1",
        "3g.20gb",
        "2",
    )
    assert series["DCGM_FI_DEV_FB_FREE"][1][1] == 20480  # the instance's framebuffer, not the GPU's


def test_two_pods_on_replicas_of_one_gpu_get_two_series_with_the_gpus_whole_values() -> None:
    series = _scrape([_holder("a", "GPU-0::0"), _holder("b", "GPU-0::1"), _holder("m", "MIG-x")])
    used = [(labels.get("pod"), labels["gpu"], value) for labels, value in series["DCGM_FI_DEV_FB_USED"]]
    assert [(p, g) for p, g, _ in used] == [("a", "0"), ("b", "0"), ("m", "1")]
    assert used[0][2] == used[1][2] > 0
    labels = series["DCGM_FI_DEV_GPU_UTIL"][0][0]
    assert (labels["namespace"], labels["pod"], labels["container"]) == ("ml", "a", "main")


def test_the_last_xid_of_each_gpu_comes_from_the_health_events() -> None:
    ledger = EventLedger()
    ledger.record(1, GpuEvent(gpu=1, kind=GpuEventKind.XID, xid=79))
    xids = {
        labels["gpu"]: (labels["err_code"], labels["err_msg"], value)
        for labels, value in _scrape([], ledger)["DCGM_FI_DEV_XID_ERRORS"]
    }
    assert xids["0"] == ("0", "No Error", 0)
    assert xids["1"][0] == "79" and xids["1"][2] == 79 and "fallen off the bus" in xids["1"][1]


def test_without_holders_nothing_is_labelled_with_pods() -> None:
    series = _scrape([])
    assert all("pod" not in labels for labels, _ in series["DCGM_FI_DEV_FB_USED"])
