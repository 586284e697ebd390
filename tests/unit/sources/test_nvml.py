"""The NVML funnel, driven by a fake ``pynvml`` module (this suite runs without a GPU or driver)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from kubegpu.errors import SourceError
from kubegpu.model.event import GpuEvent, GpuEventKind
from kubegpu.model.topology import LinkKind
from kubegpu.sources.nvml import DRIVER_NOT_LOADED, NVML_FAILURES, NvmlSource, explain, failure_in_text


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


@pytest.mark.parametrize(
    ("numa_node", "online", "expected"),
    [
        ("1\n", "0-1\n", 1),  # the firmware names the node
        ("-1\n", "0\n", 0),  # none named, one node online: that one (a real H200 VM; nvidia-smi says 0)
        ("-1\n", "0-1\n", None),  # none named on a two-node host: unknown, not guessed
        ("-1\n", None, None),  # no node list at all
    ],
)
def test_a_gpu_whose_sysfs_numa_node_is_minus_one_is_on_the_only_online_node(
    tmp_path: Path, numa_node: str, online: str | None, expected: int | None
) -> None:
    (tmp_path / "bus/pci/devices/0000:2a:00.0").mkdir(parents=True)
    (tmp_path / "bus/pci/devices/0000:2a:00.0/numa_node").write_text(numa_node)
    if online is not None:
        (tmp_path / "devices/system/node").mkdir(parents=True)
        (tmp_path / "devices/system/node/online").write_text(online)
    node = NvmlSource.open(FakeNvml(), sysfs=tmp_path).read_node("n1")
    assert [g.numa_node for g in node.gpus] == [None, expected]


def test_the_health_watch_logs_which_events_it_armed_per_gpu(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kubegpu.sources.nvml")
    fake = FakeNvml()
    source = NvmlSource.open(fake)
    source.read_node("n1")
    stop = threading.Event()
    fake.stop = stop
    source.watch_health(stop, lambda _e: None)
    armed = [r for r in caplog.records if r.getMessage() == "NVML health watch armed"]
    assert len(armed) == 1
    assert armed[0].__dict__["events"] == {
        "0": ["xid", "ecc-double-bit", "ecc-single-bit"],
        "1": ["xid", "ecc-double-bit", "ecc-single-bit"],
    }
    assert armed[0].__dict__["failing"] == []


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


class ScriptedNvml(FakeNvml):
    """``FakeNvml`` whose calls fail as scripted: ``fail[name]`` is a queue of exceptions (None = works)."""

    def __init__(self, fail: dict[str, list[BaseException | None]]) -> None:
        super().__init__()
        self.fail = fail
        self.watching = False  # read_node is done: UUID failures apply from now on

    def _maybe_fail(self, name: str) -> None:
        queue = self.fail.get(name)
        if queue:
            error = queue.pop(0)
            if error is not None:
                raise error

    def nvmlEventSetCreate(self) -> str:
        self._maybe_fail("nvmlEventSetCreate")
        return "set"

    def nvmlDeviceRegisterEvents(self, h: int, mask: int, s: str) -> None:
        self._maybe_fail(f"nvmlDeviceRegisterEvents:{h}")

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        if self.watching:
            self._maybe_fail(f"nvmlDeviceGetUUID:{h}")
        return super().nvmlDeviceGetUUID(h)

    def nvmlEventSetWait_v2(self, s: str, timeout_ms: int) -> SimpleNamespace:
        self._maybe_fail("nvmlEventSetWait_v2")
        return super().nvmlEventSetWait_v2(s, timeout_ms)


class InstantStop(threading.Event):
    """A stop event whose waits return at once and are recorded (the backoff delays asked for)."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(float(timeout or 0))
        return self.is_set()


def _watch(
    fake: ScriptedNvml, *, clock_step_s: float = 0.0
) -> tuple[list[tuple[int | str, str]], list[float]]:
    source = NvmlSource.open(fake)
    source.read_node("n1")
    fake.watching = True
    stop = InstantStop()
    fake.stop = stop
    seen: list[GpuEvent] = []
    now = [0.0]

    def clock() -> float:
        now[0] += clock_step_s
        return now[0]

    source.watch_health(stop, seen.append, clock=clock)
    return [(e.gpu, e.kind.value) for e in seen], stop.waits


FAILED, RESTORED = GpuEventKind.WATCH_FAILED.value, GpuEventKind.WATCH_RESTORED.value


def test_an_event_set_that_cannot_be_created_marks_every_gpu_and_is_retried_with_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = ScriptedNvml({"nvmlEventSetCreate": [NVMLError(999), NVMLError(999), None]})
    events, waits = _watch(fake)
    assert events == [(0, FAILED), (1, FAILED), (0, RESTORED), (1, RESTORED)]
    assert waits == [0.5, 1.0]
    failures = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(failures) == 2
    assert all(r.exc_info is None for r in failures)
    assert "Unknown Error" in str(failures[0].__dict__["error"])


def test_an_unexpected_exception_in_the_wait_restarts_the_watcher_instead_of_ending_it() -> None:
    fake = ScriptedNvml({"nvmlEventSetWait_v2": [None, TypeError("ctypes went wrong")]})
    fake.events = [SimpleNamespace(eventType=8, eventData=79, device=1)]
    events, waits = _watch(fake)
    assert events == [(1, "xid"), (0, FAILED), (1, FAILED), (0, RESTORED), (1, RESTORED)]
    assert waits == [0.5]


def test_a_failing_wait_marks_every_gpu_until_nvml_waits_again() -> None:
    fake = ScriptedNvml({"nvmlEventSetWait_v2": [NVMLError(999), NVMLError(999), NVMLError(999)]})
    events, waits = _watch(fake)
    assert events == [(0, FAILED), (1, FAILED), (0, RESTORED), (1, RESTORED)]
    assert waits == [0.5, 1.0, 2.0]


def test_a_gpu_whose_uuid_or_registration_fails_is_marked_alone_and_retried() -> None:
    fake = ScriptedNvml({"nvmlDeviceGetUUID:1": [NVMLError(15), None], "nvmlDeviceRegisterEvents:0": []})
    fake.events = [SimpleNamespace(eventType=8, eventData=79, device=0)]
    events, _ = _watch(fake, clock_step_s=1.0)
    assert events == [(1, FAILED), (1, RESTORED), (0, "xid")]
    fake = ScriptedNvml({"nvmlDeviceRegisterEvents:0": [NVMLError(999), NVMLError(999), None]})
    fake.events = [SimpleNamespace(eventType=8, eventData=13, device=1)] * 3
    events, _ = _watch(fake, clock_step_s=1.0)
    assert events[0] == (0, FAILED) and (0, RESTORED) in events
    assert events.count((1, "xid")) == 3


def test_an_event_on_a_gpu_nvml_cannot_name_counts_for_every_gpu() -> None:
    fake = ScriptedNvml({"nvmlDeviceGetUUID:1": [None, NVMLError(15)]})
    fake.events = [SimpleNamespace(eventType=8, eventData=79, device=1)]
    events, _ = _watch(fake)
    assert events == [(0, "xid"), (1, "xid")]


def test_every_known_failure_is_recognised_by_its_own_messages() -> None:
    for known in NVML_FAILURES:
        for fragment in known.messages:
            assert failure_in_text(f"Failed to initialize NVML: {fragment.upper()}\n") is known
    assert failure_in_text("NVIDIA-SMI 550.54.15  Driver Version: 550.54.15  [Not Supported]") is None


def test_explain_says_the_meaning_and_the_first_step_of_the_fix_on_one_line() -> None:
    text = explain(NVMLError(9))
    assert text.startswith(DRIVER_NOT_LOADED.meaning) and DRIVER_NOT_LOADED.fix[0] in text
    assert "\n" not in text
    assert len({f.code for f in NVML_FAILURES}) == len(NVML_FAILURES)
