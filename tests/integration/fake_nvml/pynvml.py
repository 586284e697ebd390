"""A fake ``pynvml`` for the real agent process: put this directory first on PYTHONPATH.

Two H100s (UUIDs ``GPU-fake-0``, ``GPU-fake-1``). Faults are injected at run time through the JSON file
named by ``KUBEGPU_FAKE_NVML``, re-read on every call: ``{"fail": {"nvmlEventSetCreate": 999,
"nvmlEventSetWait_v2": "TypeError"}}`` makes a call raise ``NVMLError(999)`` or a builtin exception.
Event waits return a timeout after at most 50 ms.
"""

from __future__ import annotations

import builtins
import json
import os
import time
from types import SimpleNamespace

NVML_DEVICE_MIG_ENABLE = 1
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 2
nvmlEventTypeXidCriticalError = 8
nvmlEventTypeDoubleBitEccError = 2
nvmlEventTypeSingleBitEccError = 1


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def _maybe_fail(name: str) -> None:
    path = os.environ.get("KUBEGPU_FAKE_NVML", "")
    try:
        with open(path) as f:
            script = json.load(f)
    except (OSError, ValueError):
        return
    fault = script.get("fail", {}).get(name)
    if isinstance(fault, int):
        raise NVMLError(fault)
    if isinstance(fault, str):
        raise getattr(builtins, fault)(f"injected into {name}")


def nvmlInit() -> None:
    pass


def nvmlShutdown() -> None:
    pass


def nvmlDeviceGetCount() -> int:
    return 2


def nvmlDeviceGetHandleByIndex(i: int) -> int:
    return i


def nvmlDeviceGetPciInfo(h: int) -> SimpleNamespace:
    return SimpleNamespace(busId=f"00000000:{0x18 + h:02X}:00.0".encode())


def nvmlDeviceGetMigMode(h: int) -> tuple[int, int]:
    return (0, 0)


def nvmlDeviceGetName(h: int) -> bytes:
    return b"NVIDIA H100 80GB HBM3"


def nvmlDeviceGetUUID(h: int) -> bytes:
    _maybe_fail("nvmlDeviceGetUUID")
    return f"GPU-fake-{h}".encode()


def nvmlDeviceGetMemoryInfo(h: int) -> SimpleNamespace:
    return SimpleNamespace(total=80 * 2**30)


def nvmlDeviceGetNvLinkState(h: int, link: int) -> int:
    raise NVMLError(3)


def nvmlDeviceGetTopologyCommonAncestor(a: int, b: int) -> int:
    return 40


def nvmlEventSetCreate() -> str:
    _maybe_fail("nvmlEventSetCreate")
    return "set"


def nvmlEventSetFree(s: str) -> None:
    pass


def nvmlDeviceGetSupportedEventTypes(h: int) -> int:
    return 0xFF


def nvmlDeviceRegisterEvents(h: int, mask: int, s: str) -> None:
    _maybe_fail("nvmlDeviceRegisterEvents")


def nvmlEventSetWait_v2(s: str, timeout_ms: int) -> SimpleNamespace:
    time.sleep(min(timeout_ms, 50) / 1000)
    _maybe_fail("nvmlEventSetWait_v2")
    raise NVMLError(10)
