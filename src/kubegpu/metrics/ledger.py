"""What the agent's health events said about each GPU: its last XID and the ECC errors reported.

``DCGM_FI_DEV_XID_ERRORS`` is "the value of the last XID error encountered"; kubegpu's XIDs arrive as
health events (NVML's event watcher, ``--fault-file``), so the agent hands every event it applies to
this ledger as well. Simulated GPUs take their ECC counters from here too (NVML reads real ones).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from kubegpu.model.event import GpuEvent, GpuEventKind

__all__ = ["EventLedger", "GpuRecord"]


@dataclass(frozen=True, kw_only=True)
class GpuRecord:
    last_xid: int = 0  # 0: none seen (dcgm-exporter's "No Error")
    ecc_single_bit: int = 0
    ecc_double_bit: int = 0


class EventLedger:
    """Thread-safe, per GPU index."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[int, GpuRecord] = {}

    def record(self, gpu: int, event: GpuEvent) -> None:
        with self._lock:
            old = self._records.get(gpu, GpuRecord())
            if event.kind is GpuEventKind.XID and event.xid is not None:
                new = GpuRecord(
                    last_xid=event.xid, ecc_single_bit=old.ecc_single_bit, ecc_double_bit=old.ecc_double_bit
                )
            elif event.kind is GpuEventKind.ECC_SINGLE_BIT:
                new = GpuRecord(
                    last_xid=old.last_xid,
                    ecc_single_bit=old.ecc_single_bit + 1,
                    ecc_double_bit=old.ecc_double_bit,
                )
            elif event.kind is GpuEventKind.ECC_DOUBLE_BIT:
                new = GpuRecord(
                    last_xid=old.last_xid,
                    ecc_single_bit=old.ecc_single_bit,
                    ecc_double_bit=old.ecc_double_bit + 1,
                )
            else:
                return
            self._records[gpu] = new

    def get(self, gpu: int) -> GpuRecord:
        with self._lock:
            return self._records.get(gpu, GpuRecord())
