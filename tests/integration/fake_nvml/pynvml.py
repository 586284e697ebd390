"""A fake ``pynvml`` for the real agent process: put this directory first on PYTHONPATH.

Two H100s (UUIDs ``GPU-fake-0``, ``GPU-fake-1``). Faults are injected at run time through the JSON file
named by ``KUBEGPU_FAKE_NVML``, re-read on every call: ``{"fail": {"nvmlEventSetCreate": 999,
"nvmlEventSetWait_v2": "TypeError"}}`` makes a call raise ``NVMLError(999)`` or a builtin exception.
Event waits return a timeout after at most 50 ms. Telemetry (the metrics exporter's reads) is fixed per
GPU ``h``: utilisation ``37+h``/``12+h`` %, ``(h+1)`` GiB of the 80 GiB used, ``41+h`` C, ``123.456+h`` W,
SM clock 1755 MHz, ECC corrected/uncorrected ``2h``/``h`` (volatile) and ``10+2h``/``5+h`` (aggregate).
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
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1


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
    _maybe_fail("nvmlDeviceGetMemoryInfo")
    used = (h + 1) * 2**30
    return SimpleNamespace(total=80 * 2**30, used=used, free=80 * 2**30 - used)


def nvmlSystemGetDriverVersion() -> bytes:
    return b"550.54.15"


def nvmlDeviceGetUtilizationRates(h: int) -> SimpleNamespace:
    _maybe_fail("nvmlDeviceGetUtilizationRates")
    return SimpleNamespace(gpu=37 + h, memory=12 + h)


def nvmlDeviceGetTemperature(h: int, sensor: int) -> int:
    _maybe_fail("nvmlDeviceGetTemperature")
    return 41 + h


def nvmlDeviceGetPowerUsage(h: int) -> int:
    _maybe_fail("nvmlDeviceGetPowerUsage")
    return 123456 + h * 1000


def nvmlDeviceGetClockInfo(h: int, clock: int) -> int:
    _maybe_fail("nvmlDeviceGetClockInfo")
    return 1755


def nvmlDeviceGetTotalEccErrors(h: int, error_type: int, counter: int) -> int:
    _maybe_fail("nvmlDeviceGetTotalEccErrors")
    per_gpu = 2 * h if error_type == NVML_MEMORY_ERROR_TYPE_CORRECTED else h
    return per_gpu + (0 if counter == NVML_VOLATILE_ECC else 10 // (1 + error_type))


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
