"""The NVML funnel, driven by a fake ``pynvml`` module (this suite runs without a GPU or driver)."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from kubegpu.errors import SourceError
from kubegpu.model.topology import LinkKind
from kubegpu.sources.events import GpuEvent, GpuEventKind
from kubegpu.sources.nvml import NvmlSource, explain


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeNvml:
    """Two H100s joined by 18 NVLinks, one on NUMA node 1; XID 79 on GPU 1, then stop."""

    NVMLError = NVMLError
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18
    nvmlEventTypeXidCriticalError = 8
    nvmlEventTypeDoubleBitEccError = 2
    nvmlEventTypeSingleBitEccError = 1

    def __init__(self, init_error: int | None = None) -> None:
        self.init_error = init_error
        self.buses = ["00000000:18:00.0", "00000000:2A:00.0"]
        self.events: list[object] = []
        self.stop: threading.Event | None = None

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self.buses[h].encode())

    def nvmlDeviceGetMigMode(self, h: int) -> tuple[int, int]:
        return (0, 0)

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return f"GPU-{h}".encode()

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(total=80 * 2**30)

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self.buses[1 - h].encode())

    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
        return 50

    def nvmlEventSetCreate(self) -> str:
        return "set"

    def nvmlEventSetFree(self, s: str) -> None:
        pass

    def nvmlDeviceGetSupportedEventTypes(self, h: int) -> int:
        return 0xFF

    def nvmlDeviceRegisterEvents(self, h: int, mask: int, s: str) -> None:
        pass

    def nvmlEventSetWait_v2(self, s: str, timeout_ms: int) -> SimpleNamespace:
        if not self.events:
            assert self.stop is not None
            self.stop.set()
            raise NVMLError(10)  # timeout
        return self.events.pop(0)  # type: ignore[return-value]


def test_no_driver_is_a_source_error_that_says_what_to_do() -> None:
    with pytest.raises(SourceError, match=r"libnvidia-ml\.so\.1"):
        NvmlSource.open(FakeNvml(init_error=12))
    with pytest.raises(SourceError, match="kernel driver is not loaded"):
        NvmlSource.open(FakeNvml(init_error=9))


def test_version_mismatch_is_explained() -> None:
    assert "reload" in explain(NVMLError(18))
    assert explain(NVMLError(12345)).startswith("NVML error")


def test_real_pynvml_on_this_host_reports_cleanly_or_reads_gpus() -> None:
    # Without a driver this must be one SourceError with an explanation, never a crash.
    try:
        source = NvmlSource.open()
    except SourceError as exc:
        assert "NVML is not available" in str(exc)
        return
    try:
        node = source.read_node("here")
        assert all(g.uuid for g in node.gpus)
    finally:
        source.close()


def test_read_node_maps_nvml_to_the_model(tmp_path: Path) -> None:
    sysfs = tmp_path
    (sysfs / "bus/pci/devices/0000:2a:00.0").mkdir(parents=True)
    (sysfs / "bus/pci/devices/0000:2a:00.0/numa_node").write_text("1\n")
    source = NvmlSource.open(FakeNvml(), sysfs=sysfs)
    node = source.read_node("n1")
    assert [g.uuid for g in node.gpus] == ["GPU-0", "GPU-1"]
    assert node.gpus[0].model == "H100-80GB"  # the catalogue name
    assert node.gpus[0].memory_mib == 80 * 1024
    assert [g.numa_node for g in node.gpus] == [None, 1]
    assert node.topology is not None
    link = node.topology.links[0][1]
    assert link.kind is LinkKind.NVLINK and link.nvlinks == 18


def test_watch_health_turns_xid_events_into_gpu_events() -> None:
    fake = FakeNvml()
    fake.events = [SimpleNamespace(eventType=8, eventData=79, device=1)]
    source = NvmlSource.open(fake)
    source.read_node("n1")
    stop = threading.Event()
    fake.stop = stop
    seen: list[GpuEvent] = []
    source.watch_health(stop, seen.append)
    assert [(e.gpu, e.kind, e.xid) for e in seen] == [(1, GpuEventKind.XID, 79)]
