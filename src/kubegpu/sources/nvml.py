"""The one place kubegpu talks to NVML (nvidia-ml-py): real GPUs, their topology and health events.

Everything NVML goes through this funnel: ``pynvml`` is imported and initialised lazily, bytes are
decoded, optional symbols are probed, and every NVML error is translated into what it means for an
operator and what to do (one table, ``NVML_FAILURES``, read by ``explain`` and by the doctor), so the
agent and the doctor say "the NVIDIA driver is not loaded" rather than ``NVMLError_DriverNotLoaded``.
On a host without a driver, ``NvmlSource.open`` raises ``SourceError`` with that explanation and
nothing else in kubegpu needs to know.

The health watcher is supervised: any failure in it (an event set that cannot be created, a GPU whose
UUID or event registration fails, a wait that fails, an unexpected exception) is logged as one line,
reported as ``WATCH_FAILED`` for the GPUs it can no longer watch (the health policy decides what that
means) and retried with backoff (0.5 s doubling to 30 s); a GPU is reported ``WATCH_RESTORED`` once
NVML delivers events for it again.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from kubegpu.backoff import Backoff, describe
from kubegpu.errors import KubegpuError, SourceError
from kubegpu.model.event import GpuEvent, GpuEventKind
from kubegpu.model.gpu import CATALOGUE, GpuModel
from kubegpu.model.mig import GI_PROFILE_SHAPES, nvidia_memory_gb, nvidia_profile_name
from kubegpu.model.mig import profiles as mig_profiles
from kubegpu.model.node import Gpu, GpuUuid, MigAttributes, MigInstance, Node, sysfs_bus_id
from kubegpu.model.sample import GpuSample, MemoryUse, Profiling, RemappedRows
from kubegpu.model.topology import Link, LinkKind, Topology

__all__ = [
    "DRIVER_NOT_LOADED",
    "NVML_FAILURES",
    "HostReading",
    "NvmlFailure",
    "NvmlSource",
    "explain",
    "failure",
    "failure_in_text",
    "import_pynvml",
    "read_host",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class NvmlFailure:
    """One way NVML fails: its return code, the text that shows it, what it means, what to do.

    ``messages`` are lower-case fragments of NVML's error string or of what ``nvidia-smi`` prints
    that identify the failure unambiguously (none where the words also appear in healthy output).
    ``fix`` is plain-words advice first, then the commands, one a line.
    """

    code: int  # nvmlReturn_t, stable across NVML versions
    messages: tuple[str, ...] = ()
    meaning: str
    fix: tuple[str, ...] = ()

    @property
    def advice(self) -> str:
        """The meaning and the first line of the fix, as one line (for logs and error messages)."""
        return f"{self.meaning}; {self.fix[0]}" if self.fix else self.meaning


DRIVER_NOT_LOADED = NvmlFailure(
    code=9,
    messages=(
        "couldn't communicate with the nvidia driver",
        "could not communicate",
        "driver not loaded",
    ),
    meaning=(
        "the NVIDIA kernel driver is not loaded, or does not match the running kernel (usually a "
        "kernel update without a driver rebuild)"
    ),
    fix=(
        "load the nvidia module, or reinstall the driver for the running kernel",
        "lsmod | grep nvidia  # empty: the module is not loaded",
        "modprobe nvidia      # 'Module nvidia not found' or 'Exec format error': built for another kernel",
        "apt-get install -y build-essential linux-headers-$(uname -r)",
        "nvidia-uninstall && ./NVIDIA-Linux-x86_64-<version>.run --silent --no-opengl-files  "
        "# reinstall for the running kernel (or: dkms autoinstall)",
        "then check nvidia-smi's 'Driver Version' and 'CUDA Version' against what your containers need",
    ),
)

# In the order text is matched against them (``failure_in_text``): the most telling first.
NVML_FAILURES: tuple[NvmlFailure, ...] = (
    DRIVER_NOT_LOADED,
    NvmlFailure(
        code=18,
        messages=("driver/library version mismatch",),
        meaning=(
            "driver/library version mismatch: the user-space driver was upgraded but the old kernel "
            "module is still loaded"
        ),
        fix=(
            "reboot the node (drain first), or reload the nvidia kernel module",
            "rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && modprobe nvidia",
        ),
    ),
    NvmlFailure(
        code=12,
        messages=("nvml shared library not found", "libnvidia-ml.so"),
        meaning=(
            "the NVML library (libnvidia-ml.so.1) was not found: the driver's user-space part is "
            "missing, or the container does not see the driver's libraries"
        ),
        fix=(
            "on the host reinstall the driver; in a container use the NVIDIA container runtime or mount "
            "the driver root",
            "ls /usr/lib/*/libnvidia-ml.so.1",
        ),
    ),
    NvmlFailure(
        code=4,
        messages=("insufficient permissions",),
        meaning="no permission to talk to the NVIDIA driver (/dev/nvidiactl)",
        fix=("run privileged or as root", "ls -l /dev/nvidiactl /dev/nvidia[0-9]*"),
    ),
    NvmlFailure(
        code=6,
        messages=("no devices were found",),
        meaning="NVML sees no GPU, or not the one named",
        fix=(
            "if the GPU is on the PCI bus the driver could not bring it up: reboot; if it persists, "
            "reseat or replace the card",
            "dmesg | grep -iE 'nvrm|xid'  # RmInitAdapter failed / Xid 79",
        ),
    ),
    NvmlFailure(
        code=15,
        meaning="a GPU has fallen off the bus or is otherwise inaccessible (XID 79)",
        fix=("drain the node and reset the GPU or reboot", "dmesg | grep -iE 'nvrm|xid'"),
    ),
    NvmlFailure(
        code=999,
        meaning=(
            "NVML: Unknown Error; in containers this often follows `systemctl daemon-reload` removing "
            "device access"
        ),
        fix=("use CDI or restart the pod",),
    ),
    NvmlFailure(code=3, meaning="not supported by this GPU or driver"),
    NvmlFailure(code=10, meaning="timed out"),
)
_BY_CODE = {f.code: f for f in NVML_FAILURES}


def failure(code: int) -> NvmlFailure | None:
    """The known failure with NVML return code ``code``, if any."""
    return _BY_CODE.get(code)


def failure_in_text(text: str) -> NvmlFailure | None:
    """The known failure whose message ``text`` (nvidia-smi's output, an NVML error) shows, if any."""
    low = text.lower()
    for known in NVML_FAILURES:
        if any(fragment in low for fragment in known.messages):
            return known
    return None


_TOPOLOGY_KIND = {0: LinkKind.PIX, 10: LinkKind.PIX, 20: LinkKind.PXB, 30: LinkKind.PHB, 40: LinkKind.NODE}


def import_pynvml() -> ModuleType:
    """Import nvidia-ml-py's ``pynvml``; ``SourceError`` if the package is missing."""
    try:
        import pynvml as module
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise SourceError("nvidia-ml-py is not installed; pip install nvidia-ml-py") from exc
    loaded: ModuleType = module
    return loaded


def explain(error: BaseException) -> str:
    """What an NVML error means for an operator, and what to do, as one line."""
    code = getattr(error, "value", None)
    known = failure(code) if isinstance(code, int) else None
    if known is not None:
        return known.advice
    return f"NVML error: {error}"


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _catalogue(product: str) -> tuple[str, GpuModel | None]:
    """The catalogue entry whose NVML product name is ``product``, else a model key made of the name
    (``NVIDIA RTX PRO 6000`` -> ``RTX-PRO-6000``); what is labelled comes from NVML either way."""
    for key, model in CATALOGUE.items():
        if model.product == product:
            return key, model
    return product.removeprefix("NVIDIA ").replace(" ", "-"), None


# NVML_ERROR_FUNCTION_NOT_FOUND: this driver's NVML lacks the call (an older driver).
_FUNCTION_NOT_FOUND = 13
_FI_DEV_MEMORY_TEMP = 82  # NVML_FI_DEV_MEMORY_TEMP
GPM_MIN_INTERVAL_S = 1.0
# (NVML_GPM_METRIC_*, Profiling field, scale to dcgm-exporter's unit): GPM gives percentages and MiB/s,
# DCGM's profiling fields are ratios and bytes/s.
_GPM_METRICS: tuple[tuple[int, str, float], ...] = (
    (1, "gr_engine_active", 0.01),  # GRAPHICS_UTIL
    (5, "tensor_active", 0.01),  # ANY_TENSOR_UTIL
    (10, "dram_active", 0.01),  # DRAM_BW_UTIL
    (20, "pcie_tx_bytes", float(2**20)),  # PCIE_TX_PER_SEC
    (21, "pcie_rx_bytes", float(2**20)),  # PCIE_RX_PER_SEC
)


def _raise(error: BaseException) -> None:
    raise error


def _field_number(field: Any) -> float:
    """The number in an ``nvmlFieldValue_t`` by its ``valueType`` (nvmlValueType_t)."""
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    return float(getattr(field.value, member.get(int(field.valueType), "uiVal")))


def _memory_use(info: Any) -> MemoryUse:
    return MemoryUse(used_mib=int(info.used) // 2**20, free_mib=int(info.free) // 2**20)


def _numa_node(bus_id: str, sysfs: Path) -> int | None:
    """The GPU's NUMA node from sysfs. The kernel writes -1 where the firmware names none (virtual
    machines, single-socket hosts); on a host with one online NUMA node that node is the GPU's, as
    ``nvidia-smi topo -m`` reports it (seen on a real H200 VM: sysfs -1, nvidia-smi 0)."""
    try:
        value = int((sysfs / "bus/pci/devices" / sysfs_bus_id(bus_id) / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    if value >= 0:
        return value
    try:
        online = (sysfs / "devices/system/node/online").read_text().strip()
    except OSError:
        return None
    return int(online) if online.isdigit() else None


def _pci_class(bus_id: str, sysfs: Path) -> int | None:
    """The GPU's PCI class code from sysfs (``0x030200``: a 3D controller), as GFD reads it for
    ``gpu.mode``; None where sysfs does not say."""
    try:
        return int((sysfs / "bus/pci/devices" / sysfs_bus_id(bus_id) / "class").read_text().strip(), 16)
    except (OSError, ValueError):
        return None


def _machine_type(sysfs: Path) -> str:
    """The machine's type as GFD reads it (DMI's product name), ``unknown`` where it cannot be read."""
    try:
        return (sysfs / "class/dmi/id/product_name").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return "unknown"


_EVENT_NAMES = {
    "nvmlEventTypeXidCriticalError": "xid",
    "nvmlEventTypeDoubleBitEccError": "ecc-double-bit",
    "nvmlEventTypeSingleBitEccError": "ecc-single-bit",
}


def _event_names(mask: int, nv: Any) -> list[str]:
    """The event kinds in an NVML event mask, by the NVML module's own constants."""
    return [name for attr, name in _EVENT_NAMES.items() if mask & int(getattr(nv, attr, 0))]


class NvmlSource:
    """A node read from NVML; ``nvml`` is injectable (tests pass a fake module)."""

    def __init__(self, nvml: ModuleType | Any, *, sysfs: Path = Path("/sys")) -> None:
        self._nvml = nvml
        self._sysfs = sysfs
        self._handles: list[Any] = []
        self._registered: dict[int, int] = {}  # GPU index -> event mask registered this watch session
        self._model: GpuModel | None = None
        # GPU performance monitoring: per (GPU, GPU instance or None) the last sample, when it was
        # taken and the figures it gave; per GPU whether it has GPM
        self._gpm_lock = threading.Lock()
        self._gpm_samples: dict[tuple[int, int | None], tuple[Any, float, Profiling | None]] = {}
        self._gpm_support: dict[int, bool] = {}

    @classmethod
    def open(cls, nvml: ModuleType | Any | None = None, *, sysfs: Path = Path("/sys")) -> NvmlSource:
        """Initialise NVML; ``SourceError`` explaining why when there is no usable driver."""
        module = nvml if nvml is not None else import_pynvml()
        try:
            module.nvmlInit()
        except module.NVMLError as exc:
            raise SourceError(f"NVML is not available: {explain(exc)}") from exc
        return cls(module, sysfs=sysfs)

    @property
    def module(self) -> ModuleType | Any:
        """The NVML module in use (``pynvml``, or a test's fake): for the MIG backend (``nvmlmig``)."""
        return self._nvml

    def handle(self, index: int) -> Any:
        """The NVML handle of GPU ``index`` (``SourceError`` when NVML cannot give it)."""
        return self._call(f"handle of GPU {index}", self._nvml.nvmlDeviceGetHandleByIndex, index)

    def device_ids(self) -> dict[int, int]:
        """GPU index -> PCI device ID (``0xDDDDVVVV``, mig-parted's device filters); GPUs whose PCI info
        NVML does not give are left out (mig-parted configs then match them by model)."""
        nv = self._nvml
        ids: dict[int, int] = {}
        for i in range(int(self._call("device count", nv.nvmlDeviceGetCount))):
            try:
                ids[i] = int(nv.nvmlDeviceGetPciInfo(nv.nvmlDeviceGetHandleByIndex(i)).pciDeviceId)
            except (nv.NVMLError, AttributeError, TypeError, ValueError) as exc:
                log.info("no PCI device ID from NVML", extra={"gpu": i, "error": str(exc)})
        return ids

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.debug("nvmlShutdown failed", extra={"error": explain(exc)})

    def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            raise SourceError(f"NVML {what} failed: {explain(exc)}") from exc

    # -- the node -------------------------------------------------------------------------------

    def versions(self) -> tuple[str, str | None]:
        """The driver version (``550.54.15``) and the CUDA driver API version (``12.4``); "" / None
        where NVML does not say."""
        try:
            driver = _text(self._nvml.nvmlSystemGetDriverVersion())
        except (self._nvml.NVMLError, AttributeError) as exc:
            log.info("NVML gives no driver version; no cuda.* labels", extra={"error": str(exc)})
            return "", None
        try:
            cuda_int = int(self._nvml.nvmlSystemGetCudaDriverVersion_v2())
        except (self._nvml.NVMLError, AttributeError, TypeError, ValueError) as exc:
            log.info("NVML gives no CUDA version; no cuda.runtime* labels", extra={"error": str(exc)})
            return driver, None
        return driver, f"{cuda_int // 1000}.{(cuda_int % 1000) // 10}"

    @staticmethod
    def _catalogue_profile(model: str, slices: int, memory_mb: int) -> str:
        """The fallback name of a MIG instance whose GPU-instance profile NVML does not say: the
        catalogue profile of that slice count nearest in memory, else ``<slices>g.<GiB>gb``."""
        try:
            known = [p for p in mig_profiles(model) if p.compute_slices == slices and not p.media_extensions]
        except KubegpuError:
            known = []
        if known:
            return min(known, key=lambda p: abs(p.memory_gb * 1024 - memory_mb)).name
        return f"{slices}g.{round(memory_mb / 1024)}gb"

    def _gi_constants(self, handle: Any) -> dict[int, int]:
        """NVML's GPU-instance profile ``id`` -> its profile constant (``NVML_GPU_INSTANCE_PROFILE_*``)
        for every profile the GPU has: the constant names the profile's attribute (``+me``...)."""
        nv = self._nvml
        found: dict[int, int] = {}
        for constant in GI_PROFILE_SHAPES:
            try:
                info = nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant)
            except nv.NVMLError:
                continue  # a profile this GPU does not have
            except (AttributeError, TypeError):
                break
            found.setdefault(int(info.id), constant)
        return found

    @staticmethod
    def _attributes(attrs: Any) -> MigAttributes:
        gi_slices = int(attrs.gpuInstanceSliceCount)
        return MigAttributes(
            memory_mib=int(attrs.memorySizeMB),
            multiprocessors=int(getattr(attrs, "multiprocessorCount", 0)),
            gi_slices=gi_slices,
            ci_slices=int(getattr(attrs, "computeInstanceSliceCount", gi_slices)),
            copy_engines=int(getattr(attrs, "sharedCopyEngineCount", 0)),
            decoders=int(getattr(attrs, "sharedDecoderCount", 0)),
            encoders=int(getattr(attrs, "sharedEncoderCount", 0)),
            jpegs=int(getattr(attrs, "sharedJpegCount", 0)),
            ofas=int(getattr(attrs, "sharedOfaCount", 0)),
        )

    def _mig_instances(
        self, handle: Any, model: str = "", total_bytes: int = 0
    ) -> tuple[bool | None, bool, tuple[MigInstance, ...]]:
        """(MIG-capable, MIG enabled, instances). Capable as NVIDIA decides it: the MIG mode query is
        supported (``None`` when it fails otherwise: unknown). Each instance is named as NVIDIA names it
        (``nvidia_profile_name``): slices and memory from its MIG device's attributes, the attribute
        (``+me``) from its GPU-instance profile, the GB figure from its memory and the GPU's total."""
        nv = self._nvml
        try:
            current, _pending = nv.nvmlDeviceGetMigMode(handle)
        except nv.NVMLError as exc:
            return (False if getattr(exc, "value", None) == 3 else None), False, ()
        except AttributeError:
            return None, False, ()
        if current != nv.NVML_DEVICE_MIG_ENABLE:
            return True, False, ()
        instances = []
        unplaced: list[str] = []
        constants: dict[int, int] | None = None
        for j in range(self._call("max MIG device count", nv.nvmlDeviceGetMaxMigDeviceCount, handle)):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, j)
            except nv.NVMLError:
                continue
            attrs = self._attributes(self._call("MIG attributes", nv.nvmlDeviceGetAttributes, mig))
            gi_id = int(self._call("GPU instance id", nv.nvmlDeviceGetGpuInstanceId, mig))
            start, gi_profile = 0, None
            try:
                gi = nv.nvmlDeviceGetGpuInstanceById(handle, gi_id)
                info = nv.nvmlGpuInstanceGetInfo(gi)
                start = int(info.placement.start)
                gi_profile = int(info.profileId)
            except nv.NVMLError as exc:
                # NVML gives a GPU instance's placement to privileged callers only; without it every
                # instance would silently claim slot 0, so say what is missing and why, once a read.
                unplaced.append(f"GPU instance {gi_id}: {explain(exc)}")
            except (AttributeError, TypeError, ValueError):
                pass
            gb = nvidia_memory_gb(total_bytes, attrs.memory_mib)
            if gi_profile is not None and gb > 0:
                if constants is None:
                    constants = self._gi_constants(handle)
                constant = constants.get(gi_profile)
                attribute = GI_PROFILE_SHAPES[constant][1] if constant is not None else ""
                profile = nvidia_profile_name(
                    attrs.gi_slices, gb, attribute=attribute, ci_slices=attrs.ci_slices
                )
            elif gb > 0:
                profile = nvidia_profile_name(attrs.gi_slices, gb, ci_slices=attrs.ci_slices)
            else:
                profile = self._catalogue_profile(model, attrs.gi_slices, attrs.memory_mib)
            uuid = GpuUuid(_text(self._call("MIG UUID", nv.nvmlDeviceGetUUID, mig)))
            instances.append(
                MigInstance(profile=profile, start_slot=start, uuid=uuid, gi_index=gi_id, attributes=attrs)
            )
        if unplaced:
            log.warning(
                "MIG instance placements unreadable: their start slots are reported as 0 (run the agent "
                "privileged, as NVML requires for GPU-instance queries)",
                extra={"instances": unplaced},
            )
        return True, True, tuple(instances)

    def _compute_capability(self, handle: Any) -> tuple[int, int] | None:
        nv = self._nvml
        try:
            major, minor = nv.nvmlDeviceGetCudaComputeCapability(handle)
        except (nv.NVMLError, AttributeError, TypeError, ValueError) as exc:
            log.info("NVML gives no compute capability", extra={"error": str(exc)})
            return None
        return int(major), int(minor)

    def read_node(self, name: str) -> Node:
        """Every GPU with UUID, model, memory, PCI bus, NUMA node, MIG instances, plus the topology.

        NVML is the source of truth for each GPU: its name, memory, compute capability, MIG capability
        and MIG instances (names, memory, SMs, engines); the catalogue only names the model."""
        nv = self._nvml
        count = int(self._call("device count", nv.nvmlDeviceGetCount))
        gpus = []
        self._handles = []
        for i in range(count):
            handle = self._call(f"handle of GPU {i}", nv.nvmlDeviceGetHandleByIndex, i)
            self._handles.append(handle)
            bus = _text(self._call("PCI info", nv.nvmlDeviceGetPciInfo, handle).busId)
            product = _text(self._call("name", nv.nvmlDeviceGetName, handle))
            model_name, model = _catalogue(product)
            total = int(self._call("memory", nv.nvmlDeviceGetMemoryInfo, handle).total)
            capable, mig_enabled, instances = self._mig_instances(handle, model_name, total)
            if model is not None:
                self._model = model
            gpus.append(
                Gpu(
                    index=i,
                    uuid=GpuUuid(_text(self._call("UUID", nv.nvmlDeviceGetUUID, handle))),
                    model=model_name,
                    memory_mib=total // 2**20,
                    numa_node=_numa_node(bus, self._sysfs),
                    pci_bus_id=bus,
                    mig_enabled=mig_enabled,
                    mig_instances=instances,
                    product=product,
                    compute_capability=self._compute_capability(handle),
                    mig_capable=capable,
                    pci_class=_pci_class(bus, self._sysfs),
                )
            )
        return Node(
            name=name, gpus=tuple(gpus), topology=self._topology(gpus), machine=_machine_type(self._sysfs)
        )

    def _nvlinks(self, handle: Any) -> tuple[dict[str, int], int]:
        """NVLink lanes per peer bus id, and lanes that go to an NVSwitch."""
        nv = self._nvml
        peers: dict[str, int] = {}
        to_switch = 0
        for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                if nv.nvmlDeviceGetNvLinkState(handle, link) != nv.NVML_FEATURE_ENABLED:
                    continue
                remote = sysfs_bus_id(_text(nv.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId))
            except nv.NVMLError:
                continue
            kind = None
            probe = getattr(nv, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
            if probe is not None:
                try:
                    kind = probe(handle, link)
                except nv.NVMLError:
                    kind = None
            if kind is not None and kind == getattr(nv, "NVML_NVLINK_DEVICE_TYPE_SWITCH", object()):
                to_switch += 1
            else:
                peers[remote] = peers.get(remote, 0) + 1
        return peers, to_switch

    def _topology(self, gpus: list[Gpu]) -> Topology | None:
        """Links from NVML's common-ancestor levels and NVLink remotes; ``None`` if any query fails."""
        nv = self._nvml
        n = len(gpus)
        if n == 0:
            return None
        try:
            lanes = [self._nvlinks(h) for h in self._handles]
            rows: list[list[Link]] = []
            for i in range(n):
                row: list[Link] = []
                for j in range(n):
                    if i == j:
                        row.append(Link(kind=LinkKind.SELF))
                        continue
                    nvlinks = lanes[i][0].get(sysfs_bus_id(gpus[j].pci_bus_id), 0)
                    if nvlinks == 0 and lanes[i][1] and lanes[j][1]:
                        nvlinks = min(lanes[i][1], lanes[j][1])  # both on the NVSwitch fabric
                    if nvlinks:
                        row.append(Link(kind=LinkKind.NVLINK, nvlinks=nvlinks))
                        continue
                    level = nv.nvmlDeviceGetTopologyCommonAncestor(self._handles[i], self._handles[j])
                    row.append(Link(kind=_TOPOLOGY_KIND.get(int(level), LinkKind.SYS)))
                rows.append(row)
            model = self._model
            nvlink_gen = model.nvlink_generation if model is not None else None
            pcie_gen = model.pcie_generation if model is not None else None
            topology: Topology = Topology.from_links(
                rows,
                nvlink_generation=nvlink_gen,
                pcie_generation=pcie_gen,
                numa=[g.numa_node for g in gpus],
            )
            return topology
        except (nv.NVMLError, ValueError, TypeError) as exc:
            log.warning(
                "GPU topology unavailable; allocation falls back to simple", extra={"error": str(exc)}
            )
            return None

    # -- telemetry (the metrics exporter) ---------------------------------------------------------

    def driver_version(self) -> str:
        """The driver version (``550.54.15``), or ``""`` if NVML cannot say."""
        try:
            return _text(self._nvml.nvmlSystemGetDriverVersion())
        except self._nvml.NVMLError as exc:
            log.debug("driver version unreadable", extra={"error": explain(exc)})
            return ""

    def read_sample(self, index: int) -> GpuSample:
        """GPU ``index``'s telemetry: utilisation (GPU, memory copy, encoder, decoder), framebuffer
        (with NVML's reserved part), temperatures, power, energy, clocks, PCIe replays, ECC counts,
        remapped rows and, on GPUs with GPU performance monitoring (Hopper and later), the profiling
        fields between this read and the previous one (``_profiling``).

        A read NVML refuses leaves its field ``None`` and says why in ``problems`` (explained as
        every NVML failure is), except "not supported" (code 3), which is what a GPU without the
        counter answers, and a call this NVML lacks: both are left out silently. ``read_node`` must
        have run (it finds the handles).
        """
        nv = self._nvml
        handle = self._handles[index]
        problems: list[str] = []

        def read(what: str, fn: Callable[..., Any] | str, *args: Any) -> Any:
            try:
                call = getattr(nv, fn) if isinstance(fn, str) else fn
                return call(*args)
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) not in (3, _FUNCTION_NOT_FOUND):
                    problems.append(f"{what}: {explain(exc)}")
                return None
            except AttributeError:  # an older nvidia-ml-py without the call
                return None

        rates = read("utilization", nv.nvmlDeviceGetUtilizationRates, handle)
        memory = self._memory(handle, read)
        temperature = read("temperature", nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU)
        power_mw = read("power", nv.nvmlDeviceGetPowerUsage, handle)
        sm_clock = read("SM clock", nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM)
        mem_clock = read("memory clock", "nvmlDeviceGetClockInfo", handle, getattr(nv, "NVML_CLOCK_MEM", 2))
        energy = read("energy", "nvmlDeviceGetTotalEnergyConsumption", handle)
        replays = read("PCIe replay counter", "nvmlDeviceGetPcieReplayCounter", handle)
        encoder = read("encoder utilization", "nvmlDeviceGetEncoderUtilization", handle)
        decoder = read("decoder utilization", "nvmlDeviceGetDecoderUtilization", handle)
        rows = read("remapped rows", "nvmlDeviceGetRemappedRows", handle)

        def ecc(error_type: int, counter: int) -> int | None:
            value = read("ECC counters", nv.nvmlDeviceGetTotalEccErrors, handle, error_type, counter)
            return None if value is None else int(value)

        corrected, uncorrected = nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        mig_memory, mig_profiling = self._mig_readings(index, handle, read)
        return GpuSample(
            gpu_util=None if rates is None else float(rates.gpu),
            mem_copy_util=None if rates is None else float(rates.memory),
            temperature_c=None if temperature is None else float(temperature),
            power_w=None if power_mw is None else power_mw / 1000.0,
            memory=memory,
            sm_clock_mhz=None if sm_clock is None else float(sm_clock),
            mem_clock_mhz=None if mem_clock is None else float(mem_clock),
            memory_temperature_c=self._memory_temperature(handle, read),
            energy_mj=None if energy is None else int(energy),
            pcie_replays=None if replays is None else int(replays),
            enc_util=None if encoder is None else float(encoder[0]),
            dec_util=None if decoder is None else float(decoder[0]),
            remapped_rows=None
            if rows is None
            else RemappedRows(correctable=int(rows[0]), uncorrectable=int(rows[1]), failed=bool(rows[3])),
            ecc_sbe_volatile=ecc(corrected, nv.NVML_VOLATILE_ECC),
            ecc_dbe_volatile=ecc(uncorrected, nv.NVML_VOLATILE_ECC),
            ecc_sbe_aggregate=ecc(corrected, nv.NVML_AGGREGATE_ECC),
            ecc_dbe_aggregate=ecc(uncorrected, nv.NVML_AGGREGATE_ECC),
            profiling=self._profiling((index, None), handle, read),
            mig_memory=mig_memory,
            mig_profiling=mig_profiling,
            problems=tuple(dict.fromkeys(problems)),
        )

    def _memory(self, handle: Any, read: Callable[..., Any]) -> MemoryUse | None:
        """The framebuffer from NVML's v2 memory info (used, free and reserved, which v2's ``used``
        excludes, as DCGM reports them), else from v1 (no reserved figure) where this NVML lacks v2."""
        nv = self._nvml
        version = getattr(nv, "nvmlMemory_v2", None)
        if version is not None:
            try:
                info = nv.nvmlDeviceGetMemoryInfo(handle, version)
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) not in (3, _FUNCTION_NOT_FOUND):
                    return cast("MemoryUse | None", read("memory", _raise, exc))
            except (AttributeError, TypeError):  # a binding without the version argument
                pass
            else:
                return MemoryUse(
                    used_mib=int(info.used) // 2**20,
                    free_mib=int(info.free) // 2**20,
                    reserved_mib=int(info.reserved) // 2**20,
                )
        info = read("memory", nv.nvmlDeviceGetMemoryInfo, handle)
        return None if info is None else _memory_use(info)

    def _memory_temperature(self, handle: Any, read: Callable[..., Any]) -> float | None:
        """HBM temperature: NVML's field ``NVML_FI_DEV_MEMORY_TEMP`` (82), as DCGM reads it; boards
        without a memory sensor answer "not supported" in the field's own return code."""
        nv = self._nvml
        values = read("memory temperature", "nvmlDeviceGetFieldValues", handle, [_FI_DEV_MEMORY_TEMP])
        if not values:
            return None
        field = values[0]
        code = int(field.nvmlReturn)
        if code != 0:
            read("memory temperature", _raise, nv.NVMLError(code))
            return None
        return float(_field_number(field))

    def _mig_readings(
        self, index: int, handle: Any, read: Callable[..., Any]
    ) -> tuple[dict[str, MemoryUse], dict[str, Profiling]]:
        """Each MIG instance's own framebuffer and profiling fields, by MIG UUID."""
        nv = self._nvml
        mode = read("MIG mode", nv.nvmlDeviceGetMigMode, handle)
        if mode is None or mode[0] != nv.NVML_DEVICE_MIG_ENABLE:
            return {}, {}
        memory: dict[str, MemoryUse] = {}
        profiling: dict[str, Profiling] = {}
        for j in range(read("max MIG device count", nv.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, j)
            except nv.NVMLError:
                continue  # an empty slot
            uuid = read("MIG UUID", nv.nvmlDeviceGetUUID, mig)
            if uuid is None:
                continue
            used = self._memory(mig, read)
            if used is not None:
                memory[_text(uuid)] = used
            gi_id = read("GPU instance id", "nvmlDeviceGetGpuInstanceId", mig)
            if gi_id is not None:
                own = self._profiling((index, int(gi_id)), handle, read)
                if own is not None:
                    profiling[_text(uuid)] = own
        return memory, profiling

    def _gpm_supported(self, index: int, handle: Any, read: Callable[..., Any]) -> bool:
        with self._gpm_lock:
            known = self._gpm_support.get(index)
        if known is None:
            support = read("GPU performance monitoring", "nvmlGpmQueryDeviceSupport", handle)
            known = support is not None and bool(support.isSupportedDevice)
            with self._gpm_lock:
                self._gpm_support[index] = known
        return known

    def _profiling(
        self, key: tuple[int, int | None], handle: Any, read: Callable[..., Any]
    ) -> Profiling | None:
        """dcgm-exporter's profiling fields from NVML's GPU performance monitoring (GPM, Hopper and
        later) for GPU ``key[0]`` or, with ``key[1]`` a GPU instance id, that MIG instance.

        GPM measures between two samples: each read takes one and reports the metrics since the
        previous read's (the first read of a GPU reports none). A read within ``GPM_MIN_INTERVAL_S``
        of the previous sample repeats the last figures instead of measuring a few milliseconds.
        ``None`` where the GPU has no GPM (before Hopper: not faked)."""
        if not self._gpm_supported(key[0], handle, read):
            return None
        now = time.monotonic()
        with self._gpm_lock:
            previous = self._gpm_samples.get(key)
            if previous is not None and previous[2] is not None and now - previous[1] < GPM_MIN_INTERVAL_S:
                return previous[2]
            sample = read("GPM sample", "nvmlGpmSampleAlloc")
            if sample is None:
                return None
            if key[1] is None:
                taken = read("GPM sample", "nvmlGpmSampleGet", handle, sample)
            else:
                taken = read("GPM sample", "nvmlGpmMigSampleGet", handle, key[1], sample)
            if taken is None:
                read("GPM sample", "nvmlGpmSampleFree", sample)
                return None
            result = None if previous is None else self._gpm_metrics(previous[0], sample, read)
            if previous is not None:
                read("GPM sample", "nvmlGpmSampleFree", previous[0])
            self._gpm_samples[key] = (sample, now, result)
            return result

    def _gpm_metrics(self, first: Any, second: Any, read: Callable[..., Any]) -> Profiling | None:
        nv = self._nvml
        try:
            request = nv.c_nvmlGpmMetricsGet_t()
        except AttributeError:
            return None
        request.version = getattr(nv, "NVML_GPM_METRICS_GET_VERSION", 1)
        request.numMetrics = len(_GPM_METRICS)
        request.sample1 = first
        request.sample2 = second
        for i, (metric, _, _) in enumerate(_GPM_METRICS):
            request.metrics[i].metricId = metric
        answer = read("GPM metrics", "nvmlGpmMetricsGet", request)
        if answer is None:
            return None
        values: dict[str, float] = {}
        for i, (_, name, scale) in enumerate(_GPM_METRICS):
            got = answer.metrics[i]
            if int(got.nvmlReturn) == 0:
                values[name] = float(got.value) * scale
        return Profiling(**values) if values else None

    # -- health ---------------------------------------------------------------------------------

    def watch_health(
        self,
        stop: threading.Event,
        emit: Callable[[GpuEvent], None],
        *,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Block until ``stop``, turning NVML XID/ECC events into ``GpuEvent``s; never dies silently.

        Each session creates an event set, registers every GPU and waits (5 s at a time). A session that
        fails ends with every GPU ``WATCH_FAILED`` and starts again after ``backoff``; a GPU that fails
        registration alone is retried inside the session. ``stop.wait`` is the only sleep.
        """
        backoff = backoff if backoff is not None else Backoff(initial_s=0.5, max_s=30.0)
        unwatched: set[int] = set()
        while not stop.is_set():
            try:
                self._watch_session(stop, emit, unwatched, backoff, clock)
            except Exception as exc:
                delay = backoff.failed()
                detail = describe(exc)
                log.warning(
                    "NVML health watcher failed; retrying",
                    extra={"error": detail, "failures": backoff.failures, "retry_in_s": round(delay, 2)},
                )
                log.debug("NVML health watcher failure", exc_info=True)
                self._unwatched(range(len(self._handles)), detail, emit, unwatched)
                stop.wait(delay)

    @staticmethod
    def _unwatched(
        gpus: Iterable[int], detail: str, emit: Callable[[GpuEvent], None], unwatched: set[int]
    ) -> None:
        for i in gpus:
            if i not in unwatched:
                unwatched.add(i)
                emit(GpuEvent(gpu=i, kind=GpuEventKind.WATCH_FAILED, detail=detail, source="nvml"))

    def _register(self, i: int, events: Any, wanted: int) -> str | None:
        """Register GPU ``i``'s events; its UUID, ``""`` if it has no events to watch; raises NVMLError."""
        nv = self._nvml
        handle = self._handles[i]
        uuid = _text(nv.nvmlDeviceGetUUID(handle))
        try:
            supported = nv.nvmlDeviceGetSupportedEventTypes(handle)
            nv.nvmlDeviceRegisterEvents(handle, wanted & supported, events)
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) != 3:
                raise
            log.warning("health events not supported", extra={"gpu": i})
            return ""
        self._registered[i] = wanted & supported
        return uuid

    def _watch_session(
        self,
        stop: threading.Event,
        emit: Callable[[GpuEvent], None],
        unwatched: set[int],
        backoff: Backoff,
        clock: Callable[[], float],
    ) -> None:
        nv = self._nvml
        wanted = nv.nvmlEventTypeXidCriticalError | nv.nvmlEventTypeDoubleBitEccError
        wanted |= nv.nvmlEventTypeSingleBitEccError
        events = self._call("event set creation", nv.nvmlEventSetCreate)
        try:
            by_uuid: dict[str, int] = {}
            failing: set[int] = set()
            pending: set[int] = set()  # registered again; restored after the next good wait
            retry_at = 0.0

            def register(gpus: Iterable[int]) -> None:
                nonlocal retry_at
                for i in sorted(gpus):
                    try:
                        uuid = self._register(i, events, wanted)
                    except nv.NVMLError as exc:
                        failing.add(i)
                        delay = backoff.failed()
                        retry_at = clock() + delay
                        log.warning(
                            "NVML event registration failed; retrying",
                            extra={"gpu": i, "error": explain(exc), "retry_in_s": round(delay, 2)},
                        )
                        self._unwatched([i], f"event registration: {explain(exc)}", emit, unwatched)
                        continue
                    failing.discard(i)
                    if uuid:
                        by_uuid[uuid] = i
                    if i in unwatched:
                        pending.add(i)

            self._registered.clear()
            register(range(len(self._handles)))
            log.info(
                "NVML health watch armed",
                extra={
                    "events": {str(i): _event_names(m, nv) for i, m in sorted(self._registered.items())},
                    "failing": sorted(failing),
                },
            )
            while not stop.is_set():
                if failing and clock() >= retry_at:
                    register(set(failing))
                timeout_ms = 5000
                if failing:
                    timeout_ms = max(0, min(timeout_ms, int((retry_at - clock()) * 1000)))
                if pending:
                    timeout_ms = 0  # one immediate wait proves the set works
                try:
                    data = nv.nvmlEventSetWait_v2(events, timeout_ms)
                except nv.NVMLError as exc:
                    if getattr(exc, "value", None) != 10:
                        raise SourceError(f"NVML event wait failed: {explain(exc)}") from exc
                    data = None
                if pending:
                    for i in sorted(pending):
                        unwatched.discard(i)
                        emit(GpuEvent(gpu=i, kind=GpuEventKind.WATCH_RESTORED, source="nvml"))
                    log.info("NVML health watcher recovered", extra={"gpus": sorted(pending)})
                    pending.clear()
                if not failing:
                    backoff.reset()
                if data is not None:
                    self._emit_event(data, by_uuid, emit)
        finally:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlEventSetFree(events)

    def _emit_event(self, data: Any, by_uuid: dict[str, int], emit: Callable[[GpuEvent], None]) -> None:
        nv = self._nvml
        if data.eventType == nv.nvmlEventTypeXidCriticalError:
            kind, xid = GpuEventKind.XID, int(data.eventData)
        elif data.eventType == nv.nvmlEventTypeDoubleBitEccError:
            kind, xid = GpuEventKind.ECC_DOUBLE_BIT, None
        elif data.eventType == nv.nvmlEventTypeSingleBitEccError:
            kind, xid = GpuEventKind.ECC_SINGLE_BIT, None
        else:
            return
        try:
            uuid = _text(nv.nvmlDeviceGetUUID(data.device))
        except nv.NVMLError as exc:
            # As NVIDIA: an event whose GPU cannot be named counts for every GPU (the policy judges it).
            detail = f"the GPU of this event could not be identified: {explain(exc)}"
            for i in range(len(self._handles)):
                emit(GpuEvent(gpu=i, kind=kind, xid=xid, detail=detail, source="nvml"))
            return
        emit(GpuEvent(gpu=by_uuid.get(uuid, uuid), kind=kind, xid=xid, source="nvml"))


@dataclass(frozen=True, kw_only=True)
class HostReading:
    """This host's GPUs as NVML reports them once: the node, and the driver and CUDA versions."""

    node: Node
    driver: str
    cuda: str | None


def read_host(name: str, nvml: ModuleType | Any | None = None, *, sysfs: Path = Path("/sys")) -> HostReading:
    """Open NVML, read the node and the versions, close it; ``SourceError`` when there is no driver."""
    source = NvmlSource.open(nvml, sysfs=sysfs)
    try:
        node = source.read_node(name)
        driver, cuda = source.versions()
    finally:
        source.close()
    return HostReading(node=node, driver=driver, cuda=cuda)
