"""dcgm-exporter's GPU series, built at scrape time: names, types, HELP texts and labels as its 4.x.

Labels, in dcgm-exporter's order: ``gpu``, ``UUID``, ``pci_bus_id``, ``device`` (``nvidia<index>``),
``modelName`` (NVML's product name), for MIG series ``GPU_I_PROFILE`` and ``GPU_I_ID``, ``Hostname``,
``DCGM_FI_DRIVER_VERSION``, then ``container``, ``namespace``, ``pod`` for series of held devices.
``DCGM_FI_DEV_XID_ERRORS`` also carries ``err_code`` and ``err_msg`` (dcgm-exporter's text,
``xid_text``). Which series exist is ``attribution.targets``; the values come from a ``GpuSampler``
(docs/metrics.md). A field no series has is not written; on MIG series ``DCGM_FI_DEV_GPU_UTIL`` is 0
and the other utilisations are left out (NVML measures none per instance), the profiling fields are
the instance's own.

Rendered here rather than by prometheus-client, whose text writer renames a counter's family to
``<name>_total`` (dcgm-exporter's counters keep their names, e.g. ``DCGM_FI_DEV_ECC_SBE_VOL_TOTAL``) and
sorts labels: this writes dcgm-exporter's exposition (label order, ``%d`` for integer fields and ``%f``
for double ones, no timestamps).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

from kubegpu.metrics.attribution import SeriesTarget, held_counts, targets
from kubegpu.metrics.holders import CachedHolders
from kubegpu.metrics.ledger import EventLedger
from kubegpu.metrics.sampler import GpuSampler
from kubegpu.metrics.xid_text import xid_text
from kubegpu.model.holder import DeviceHolder
from kubegpu.model.node import Gpu, Node
from kubegpu.model.sample import GpuSample, MemoryUse, RemappedRows

__all__ = ["FIELDS", "DcgmCollector", "Field", "model_name", "render_family", "xid_message"]


@dataclass(frozen=True, kw_only=True)
class Field:
    """One dcgm-exporter field: ``value(sample, memory, mig)`` where ``memory`` is the series'
    framebuffer (the MIG instance's on a MIG series, else the GPU's) and ``mig`` the MIG instance's
    UUID on a MIG series, else ``None``; ``None`` leaves the series out."""

    name: str
    type: str
    help: str
    value: Callable[[GpuSample, MemoryUse | None, str | None], float | None]
    double: bool = False  # written as %f (dcgm-exporter's double fields), else %d


def _whole_gpu(
    read: Callable[[GpuSample], float | None],
) -> Callable[[GpuSample, MemoryUse | None, str | None], float | None]:
    """A utilisation of the whole GPU that NVML cannot measure per MIG instance: left out of MIG
    series (dcgm-exporter: "not supported for MIG configurations") rather than copied onto each."""
    return lambda s, m, mig: None if mig is not None else read(s)


def _profiling(attr: str) -> Callable[[GpuSample, MemoryUse | None, str | None], float | None]:
    """A profiling field: the GPU's on a GPU series, the instance's own on a MIG series (never the
    parent's); absent where NVML's GPU performance monitoring gives none."""

    def value(s: GpuSample, m: MemoryUse | None, mig: str | None) -> float | None:
        profiling = s.profiling if mig is None else s.mig_profiling.get(mig)
        return None if profiling is None else cast("float | None", getattr(profiling, attr))

    return value


def _remapped(
    read: Callable[[RemappedRows], float],
) -> Callable[[GpuSample, MemoryUse | None, str | None], float | None]:
    return lambda s, m, mig: None if s.remapped_rows is None else read(s.remapped_rows)


# dcgm-exporter's default counters (etc/default-counters.csv) in its order, then the ECC totals it
# ships commented out; DCGM_FI_DEV_XID_ERRORS is written after them (``XID_FIELD``).
FIELDS: tuple[Field, ...] = (
    Field(
        name="DCGM_FI_DEV_SM_CLOCK",
        type="gauge",
        help="SM clock frequency (in MHz).",
        value=lambda s, m, mig: s.sm_clock_mhz,
    ),
    Field(
        name="DCGM_FI_DEV_MEM_CLOCK",
        type="gauge",
        help="Memory clock frequency (in MHz).",
        value=lambda s, m, mig: s.mem_clock_mhz,
    ),
    Field(
        name="DCGM_FI_DEV_MEMORY_TEMP",
        type="gauge",
        help="Memory temperature (in C).",
        value=lambda s, m, mig: s.memory_temperature_c,
    ),
    Field(
        name="DCGM_FI_DEV_GPU_TEMP",
        type="gauge",
        help="GPU temperature (in C).",
        value=lambda s, m, mig: s.temperature_c,
    ),
    Field(
        name="DCGM_FI_DEV_POWER_USAGE",
        type="gauge",
        help="Power draw (in W).",
        value=lambda s, m, mig: s.power_w,
        double=True,
    ),
    Field(
        name="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        type="counter",
        help="Total energy consumption since boot (in mJ).",
        value=lambda s, m, mig: s.energy_mj,
    ),
    Field(
        name="DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        type="counter",
        help="Total number of PCIe retries.",
        value=lambda s, m, mig: s.pcie_replays,
    ),
    Field(
        name="DCGM_FI_DEV_GPU_UTIL",
        type="gauge",
        help="GPU utilization (in %).",
        # dcgm-exporter reports 0 for a MIG instance: NVML measures no utilisation per instance
        value=lambda s, m, mig: 0.0 if mig is not None else s.gpu_util,
    ),
    Field(
        name="DCGM_FI_DEV_MEM_COPY_UTIL",
        type="gauge",
        help="Memory utilization (in %).",
        value=_whole_gpu(lambda s: s.mem_copy_util),
    ),
    Field(
        name="DCGM_FI_DEV_ENC_UTIL",
        type="gauge",
        help="Encoder utilization (in %).",
        value=_whole_gpu(lambda s: s.enc_util),
    ),
    Field(
        name="DCGM_FI_DEV_DEC_UTIL",
        type="gauge",
        help="Decoder utilization (in %).",
        value=_whole_gpu(lambda s: s.dec_util),
    ),
    Field(
        name="DCGM_FI_DEV_FB_FREE",
        type="gauge",
        help="Framebuffer memory free (in MiB).",
        value=lambda s, m, mig: None if m is None else m.free_mib,
    ),
    Field(
        name="DCGM_FI_DEV_FB_USED",
        type="gauge",
        help="Framebuffer memory used (in MiB).",
        value=lambda s, m, mig: None if m is None else m.used_mib,
    ),
    Field(
        name="DCGM_FI_DEV_FB_RESERVED",
        type="gauge",
        help="Framebuffer memory reserved (in MiB).",
        value=lambda s, m, mig: None if m is None else m.reserved_mib,
    ),
    Field(
        name="DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        type="counter",
        help="Number of remapped rows for uncorrectable errors",
        value=_remapped(lambda r: r.uncorrectable),
    ),
    Field(
        name="DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        type="counter",
        help="Number of remapped rows for correctable errors",
        value=_remapped(lambda r: r.correctable),
    ),
    Field(
        name="DCGM_FI_DEV_ROW_REMAP_FAILURE",
        type="gauge",
        help="Whether remapping of rows has failed",
        value=_remapped(lambda r: int(r.failed)),
    ),
    Field(
        name="DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        type="gauge",
        help="Ratio of time the graphics engine is active.",
        value=_profiling("gr_engine_active"),
        double=True,
    ),
    Field(
        name="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        type="gauge",
        help="Ratio of cycles the tensor (HMMA) pipe is active.",
        value=_profiling("tensor_active"),
        double=True,
    ),
    Field(
        name="DCGM_FI_PROF_DRAM_ACTIVE",
        type="gauge",
        help="Ratio of cycles the device memory interface is active sending or receiving data.",
        value=_profiling("dram_active"),
        double=True,
    ),
    Field(
        name="DCGM_FI_PROF_PCIE_TX_BYTES",
        type="gauge",
        help=(
            "The rate of data transmitted over the PCIe bus - including both protocol headers and data "
            "payloads - in bytes per second."
        ),
        value=_profiling("pcie_tx_bytes"),
    ),
    Field(
        name="DCGM_FI_PROF_PCIE_RX_BYTES",
        type="gauge",
        help=(
            "The rate of data received over the PCIe bus - including both protocol headers and data "
            "payloads - in bytes per second."
        ),
        value=_profiling("pcie_rx_bytes"),
    ),
    Field(
        name="DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        type="counter",
        help="Total number of single-bit volatile ECC errors.",
        value=lambda s, m, mig: s.ecc_sbe_volatile,
    ),
    Field(
        name="DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        type="counter",
        help="Total number of double-bit volatile ECC errors.",
        value=lambda s, m, mig: s.ecc_dbe_volatile,
    ),
    Field(
        name="DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        type="counter",
        help="Total number of single-bit persistent ECC errors.",
        value=lambda s, m, mig: s.ecc_sbe_aggregate,
    ),
    Field(
        name="DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        type="counter",
        help="Total number of double-bit persistent ECC errors.",
        value=lambda s, m, mig: s.ecc_dbe_aggregate,
    ),
)
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
XID_HELP = "Value of the last XID error encountered."


def model_name(gpu: Gpu) -> str:
    """dcgm-exporter's ``modelName``: NVML's name as is (``NVIDIA L4``), the catalogue's for a
    simulated GPU."""
    return gpu.product_name


def xid_message(xid: int) -> str:
    """dcgm-exporter's ``err_msg`` for XID ``xid`` (``No Error`` for 0, ``Unknown Error`` outside its
    table)."""
    return xid_text(xid)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_family(
    name: str, help_text: str, kind: str, samples: Sequence[tuple[dict[str, str], float]], *, double: bool
) -> str:
    """One family in the text format 0.0.4, labels in the order given."""
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        number = f"{value:f}" if double else f"{round(value):d}"
        lines.append(f"{name}{{{text}}} {number}")
    return "\n".join(lines) + "\n"


class DcgmCollector:
    """Every ``render`` reads the node, its holders and its samples and writes the GPU families."""

    def __init__(
        self,
        *,
        node: Callable[[], Node | None],
        sampler: GpuSampler,
        holders: CachedHolders | None,
        ledger: EventLedger,
        hostname: str,
    ) -> None:
        self._node = node
        self._sampler = sampler
        self._holders = holders
        self._ledger = ledger
        self._hostname = hostname

    def _labels(self, target: SeriesTarget, driver: str) -> dict[str, str]:
        gpu = target.gpu
        labels = {
            "gpu": str(gpu.index),
            "UUID": str(gpu.uuid),
            "pci_bus_id": gpu.pci_bus_id,
            "device": f"nvidia{gpu.index}",
            "modelName": model_name(gpu),
        }
        if target.mig is not None:
            labels["GPU_I_PROFILE"] = target.mig.profile
            labels["GPU_I_ID"] = str(target.mig.gi_index)
        labels["Hostname"] = self._hostname
        labels["DCGM_FI_DRIVER_VERSION"] = driver
        if target.owner is not None:
            labels["container"] = target.owner.container
            labels["namespace"] = target.owner.namespace
            labels["pod"] = target.owner.pod
        return labels

    def render(self) -> str:
        """The GPU families as text ("" when there is no GPU)."""
        node = self._node()
        if node is None or not node.gpus:
            return ""
        holders: Sequence[DeviceHolder] = ()
        if self._holders is not None:
            holders = self._holders.holders() or ()
        series = targets(node, holders)
        samples = self._sampler.sample(node, held_counts(holders))
        driver = self._sampler.driver_version()
        rows = []
        for target in series:
            sample = samples.get(target.gpu.index)
            if sample is None:
                continue
            memory, mig = sample.memory, None
            if target.mig is not None:
                mig = str(target.mig.uuid)
                memory = sample.mig_memory.get(mig)
            rows.append((self._labels(target, driver), sample, memory, mig, target.gpu.index))
        out = []
        for field in FIELDS:
            family = [
                (labels, float(value))
                for labels, sample, memory, mig, _ in rows
                if (value := field.value(sample, memory, mig)) is not None
            ]
            if family:  # as dcgm-exporter: a field no GPU reports has no family, not an empty one
                out.append(render_family(field.name, field.help, field.type, family, double=field.double))
        xids = []
        for labels, _, _, _, index in rows:
            xid = self._ledger.get(index).last_xid
            xids.append(({**labels, "err_code": str(xid), "err_msg": xid_message(xid)}, float(xid)))
        out.append(render_family(XID_FIELD, XID_HELP, "gauge", xids, double=False))
        return "".join(out)
