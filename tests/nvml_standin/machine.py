"""The machine the C-level NVML stand-in (``nvml_standin.c``) plays: a YAML description, compiled.

A machine is described in YAML (``Machine.from_yaml``), or made from one of kubegpu's node specs
(``Machine.from_node``, e.g. ``builtin:dgx-h100``), so every builtin node can be replayed through the real
pynvml. The YAML::

    driver: "550.54.15"          # nvmlSystemGetDriverVersion
    cuda: 12040                  # nvmlSystemGetCudaDriverVersion_v2 (1000 * major + 10 * minor)
    gpus:
      - name: NVIDIA H100 80GB HBM3          # nvmlDeviceGetName
        uuid: GPU-...                        # nvmlDeviceGetUUID
        bus_id: "00000000:18:00.0"           # nvmlDeviceGetPciInfo_v3 .busId
        pci_device_id: 0x233010DE            # .pciDeviceId
        memory_mib: 81559                    # nvmlDeviceGetMemoryInfo .total
        memory_used_mib: 0
        sm_count: 132
        compute_capability: [9, 0]           # nvmlDeviceGetCudaComputeCapability (default: the
                                             # catalogue's for a name it knows, else 0.0)
        minor: 0                             # nvmlDeviceGetMinorNumber (default: the GPU's index)
        fabric: {cluster_uuid: 00112233445566778899aabbccddeeff, clique: 1}   # nvmlDeviceGetGpuFabricInfo
                                             # (absent: not fabric-attached, NOT_SUPPORTED)
        health_events: true                  # false: event registration is "not supported"
        mig: {capable: true, enabled: true, pending: true, reset_needed: false}
        mig_profiles:                        # nvmlDeviceGetGpuInstanceProfileInfo(V) per NVML constant
          - {constant: 0x0, id: 19, compute_slices: 1, memory_slices: 1, max_count: 7,
             memory_mib: 9856, starts: [0, 1, 2, 3, 4, 5, 6],
             sms: 16, copy: 1, decoders: 1, encoders: 0, jpegs: 1, ofas: 0}   # optional
        mig_instances:                       # GPU instances present at nvmlInit, each with one full CI
          - {profile_id: 9, start: 4, gi_id: 1, uuid: MIG-..., busy: false}
        nvlinks:                             # nvmlDeviceGetNvLink{State,RemotePciInfo_v2,RemoteDeviceType}
          - {link: 0, up: true, remote: "00000000:2A:00.0", to: gpu}    # to: gpu | switch
        sample: {gpu_util: 37, mem_util: 12, temperature_c: 41, power_mw: 123456, sm_clock_mhz: 1755,
                 ecc: [2, 1, 10, 5],          # sbe volatile, dbe volatile, sbe aggregate, dbe aggregate
                 mem_clock_mhz: 2619,         # nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)
                 pcie_replays: 3,             # nvmlDeviceGetPcieReplayCounter
                 enc_util: 0, dec_util: 7,    # nvmlDeviceGet{En,De}coderUtilization (null: not supported)
                 reserved_mib: 512,           # nvmlDeviceGetMemoryInfo_v2 .reserved (v1 counts it as used)
                 # absent: what a board of this kind answers (``derived_telemetry``); null: not supported
                 memory_temp_c: 47,           # nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)
                 energy_mj: 123456789,        # nvmlDeviceGetTotalEnergyConsumption
                 remapped_rows: [1, 0, 0, 0], # nvmlDeviceGetRemappedRows: correctable, uncorrectable,
                                              # pending, failure
                 gpm: {graphics: 55.0, tensor: 30.0, dram: 40.0, pcie_tx: 100.0, pcie_rx: 200.0}}
                                              # nvmlGpm*: % and MiB/s (null: GPM not supported)
    ancestors: [[0, 1, 10], ...]             # nvmlDeviceGetTopologyCommonAncestor levels (default 50)
    events: [{gpu: 0, type: xid, data: 79}]  # delivered by the first waits (also: KUBEGPU_NVML_EVENTS)
    faults: [{call: nvmlDeviceGetUUID, code: 15, gpu: 1}]   # gpu -1 or absent: every GPU

The compiled form (``Machine.compile``) is what the C library reads at ``nvmlInit`` from the file named
by ``KUBEGPU_NVML_MACHINE``: one record a line, fields separated by spaces, the GPU name last::

    driver VERSION | cuda INT
    gpu UUID BUS PCI_ID_HEX MEMORY_MIB USED_MIB SMS MIG_CAPABLE MIG_CURRENT MIG_PENDING RESET NAME...
    sample GPU UTIL MEM_UTIL TEMP POWER_MW SM_MHZ SBE_V DBE_V SBE_A DBE_A      (-1: no ECC)
    nvlink GPU LINK STATE REMOTE_BUS REMOTE_TYPE                            (0 GPU, 2 NVSwitch)
    ancestor GPU GPU LEVEL
    giprofile GPU CONSTANT ID COMPUTE_SLICES MEMORY_SLICES MAX_COUNT MEMORY_MIB STARTS(comma list)
              SMS COPY DECODERS ENCODERS JPEGS OFAS     (SMS 0: the GPU's share by compute slices)
    cc GPU MAJOR MINOR
    minor GPU MINOR
    fabric GPU CLUSTER_UUID(32 hex digits) CLIQUE
    gi GPU GI_ID PROFILE_ID START BUSY UUID
    telemetry GPU MEM_MHZ MEM_TEMP ENERGY_MJ REPLAYS ENC DEC RESERVED_MIB CORR UNC PENDING FAILURE
              (-1: not supported; CORR -1: no row remapper)
    gpm GPU GRAPHICS TENSOR DRAM PCIE_TX PCIE_RX    (absent: GPM not supported)
    event GPU xid|dbe|sbe DATA
    fail SYMBOL CODE GPU
    noevents GPU
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kubegpu.errors import KubegpuError
from kubegpu.model.gpu import model_for_product
from kubegpu.model.mig import MigProfile
from kubegpu.model.mig import profiles as mig_profiles
from kubegpu.model.node import Node
from kubegpu.model.topology import LinkKind

# NVML's common-ancestor levels (nvmlGpuTopologyLevel_t) for a PCIe path as nvidia-smi topo -m names it.
ANCESTOR_LEVEL = {LinkKind.PIX: 10, LinkKind.PXB: 20, LinkKind.PHB: 30, LinkKind.NODE: 40, LinkKind.SYS: 50}
NVLINK_PORTS = 18  # links per GPU that the stand-in serves (NVML_NVLINK_MAX_LINKS of Hopper)
# PCI device IDs (0xDDDDVVVV) by catalogue model, as the boards report them; 0x20B010DE-like defaults.
PCI_DEVICE_IDS = {
    "H100-80GB": 0x233010DE,
    "H200-141GB": 0x233510DE,
    "A100-80GB": 0x20B210DE,
    "A100-40GB": 0x20B010DE,
    "V100-32GB": 0x1DB510DE,
    "V100-16GB": 0x1DB110DE,
    "A100-PCIe-40GB": 0x20F110DE,
    "A100-PCIe-80GB": 0x20B510DE,
    "H100-PCIe": 0x233110DE,
    "H100-NVL": 0x232110DE,
    "A30": 0x20B710DE,
    "L4": 0x27B810DE,
    "L40S": 0x26B910DE,
    "A10G": 0x223710DE,
    "T4": 0x1EB810DE,
    "B200": 0x290110DE,
}
SM_COUNTS = {
    "H100-80GB": 132,
    "H100-NVL": 132,
    "H100-PCIe": 114,
    "H200-141GB": 132,
    "A100-80GB": 108,
    "A100-40GB": 108,
    "A100-PCIe-40GB": 108,
    "A100-PCIe-80GB": 108,
    "A30": 56,
    "L4": 58,
    "L40S": 142,
    "A10G": 80,
    "T4": 40,
    "V100-32GB": 80,
    "V100-16GB": 80,
    "B200": 148,
}


def profile_memory_mib(p: MigProfile, gpu_memory_mib: int) -> int:
    """What NVML reports as a simulated profile's memory (``memorySizeMB``): the ``-lgip`` figure where
    the catalogue knows it, else just under the profile's share of the GPU (NVIDIA's name rounds the
    share up to eighths, so this reads back under the catalogue's name)."""
    if p.memory_gib is not None:
        return round(p.memory_gib * 1024)
    return int(gpu_memory_mib * p.memory_slices / 8 * 0.98)


def nvml_gi_constant(compute_slices: int, memory_slices: int, media_extensions: bool) -> int:
    """``NVML_GPU_INSTANCE_PROFILE_*`` for a GPU-instance shape, from nvml.h's names: ``_1_SLICE`` 0x0,
    ``_2_SLICE`` 0x1, ``_3_SLICE`` 0x2, ``_4_SLICE`` 0x3, ``_7_SLICE`` 0x4, ``_1_SLICE_REV1`` 0x7 (one
    slice with the media engines), ``_1_SLICE_REV2`` 0x9 (one compute slice with two memory slices)."""
    if compute_slices == 1 and media_extensions:
        return 0x7
    if compute_slices == 1 and memory_slices == 2:
        return 0x9
    return {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4}[compute_slices]


@dataclass
class MigProfileSpec:
    constant: int
    id: int
    compute_slices: int
    memory_slices: int
    max_count: int
    memory_mib: int
    starts: list[int]
    sms: int = 0  # per instance; 0: the GPU's SMs shared by compute slices
    copy: int = 1
    decoders: int = 0
    encoders: int = 0
    jpegs: int = 0
    ofas: int = 0


@dataclass
class MigInstanceSpec:
    profile_id: int
    start: int
    gi_id: int
    uuid: str
    busy: bool = False


@dataclass
class NvLinkSpec:
    link: int
    remote: str
    to: str = "gpu"
    up: bool = True


# Boards with HBM: a memory temperature sensor (NVML_FI_DEV_MEMORY_TEMP) and, from Ampere, a row remapper.
HBM_BOARDS = re.compile(r"\b(A100|A30|H100|H200|V100|B200|GB200)\b")


def derived_telemetry(name: str, compute_capability: list[int], index: int) -> dict[str, Any]:
    """What a board answers for the telemetry a machine leaves unsaid, by what it is: a memory
    temperature on HBM boards, energy from Volta (7.0), remapped rows on HBM boards from Ampere (8.0),
    GPU performance monitoring from Hopper (9.0); ``None`` where NVML says "not supported"."""
    major = compute_capability[0]
    hbm = HBM_BOARDS.search(name) is not None
    return {
        "memory_temp_c": 45 + index if hbm else None,
        "energy_mj": 1_000_000_000 + 1000 * index if major >= 7 else None,
        "remapped_rows": [index, 0, 0, 0] if hbm and major >= 8 else None,
        "gpm": (
            {"graphics": 55.0 + index, "tensor": 30.0, "dram": 40.0, "pcie_tx": 100.0, "pcie_rx": 200.0}
            if major >= 9
            else None
        ),
    }


@dataclass
class SampleSpec:
    gpu_util: int = 37
    mem_util: int = 12
    temperature_c: int = 41
    power_mw: int = 123456
    sm_clock_mhz: int = 1755
    ecc: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    mem_clock_mhz: int = 1593
    pcie_replays: int = 0
    enc_util: int | None = 0
    dec_util: int | None = 0
    reserved_mib: int = 0
    memory_temp_c: int | None = None
    energy_mj: int | None = None
    remapped_rows: list[int] | None = None
    gpm: dict[str, float] | None = None


@dataclass
class GpuSpec:
    name: str
    uuid: str
    bus_id: str
    memory_mib: int
    pci_device_id: int = 0x20B010DE
    memory_used_mib: int = 0
    sm_count: int = 108
    health_events: bool = True
    mig_capable: bool = False
    mig_enabled: bool = False
    mig_pending: bool = False
    reset_needed: bool = False
    mig_profiles: list[MigProfileSpec] = field(default_factory=list)
    mig_instances: list[MigInstanceSpec] = field(default_factory=list)
    nvlinks: list[NvLinkSpec] = field(default_factory=list)
    sample: SampleSpec = field(default_factory=SampleSpec)
    compute_capability: list[int] = field(default_factory=lambda: [0, 0])
    minor: int | None = None
    fabric: dict[str, Any] | None = None


@dataclass
class Machine:
    gpus: list[GpuSpec]
    driver: str = "550.54.15"
    cuda: int = 12040
    ancestors: list[tuple[int, int, int]] = field(default_factory=list)
    events: list[tuple[int, str, int]] = field(default_factory=list)
    faults: list[tuple[str, int, int]] = field(default_factory=list)

    # -- from kubegpu's node model -----------------------------------------------------------------

    @classmethod
    def from_node(cls, node: Node, *, driver: str = "550.54.15", cuda: int = 12040) -> Machine:
        """The machine that, read through NVML, is ``node``: names, UUIDs, buses, memory, MIG layout,
        NVLink lanes (through NVSwitch ports where the node's lanes outnumber a GPU's ports) and PCIe
        common ancestors."""
        topo = node.topology
        n = len(node.gpus)
        lanes = [[0] * n for _ in range(n)]
        if topo is not None:
            for i in range(n):
                for j in range(n):
                    link = topo.links[i][j]
                    if i != j and link.kind is LinkKind.NVLINK:
                        lanes[i][j] = link.nvlinks
        switched = any(sum(row) > NVLINK_PORTS for row in lanes)
        gpus = []
        for g in node.gpus:
            capability = g.capability
            spec = GpuSpec(
                name=g.product_name,
                uuid=str(g.uuid),
                bus_id=g.pci_bus_id,
                memory_mib=g.memory_mib,
                pci_device_id=PCI_DEVICE_IDS.get(g.model, 0x20B010DE),
                sm_count=SM_COUNTS.get(g.model, 80),
                compute_capability=list(capability) if capability is not None else [0, 0],
                mig_capable=g.can_mig,
                mig_enabled=g.mig_enabled,
                mig_pending=g.mig_enabled,
                sample=SampleSpec(
                    gpu_util=37 + g.index,
                    mem_util=12 + g.index,
                    temperature_c=41 + g.index,
                    power_mw=123456 + 1000 * g.index,
                    ecc=[2 * g.index, g.index, 10 + 2 * g.index, 5 + g.index],
                    **derived_telemetry(
                        g.product_name, list(capability) if capability is not None else [0, 0], g.index
                    ),
                ),
            )
            try:
                known = mig_profiles(g.model) if spec.mig_capable else ()
            except KubegpuError:  # MIG-capable without simulated profiles (A30, GB200)
                known = ()
            if known:
                for p in known:
                    spec.mig_profiles.append(
                        MigProfileSpec(
                            constant=nvml_gi_constant(p.compute_slices, p.memory_slices, p.media_extensions),
                            id=p.gi_profile_id,
                            compute_slices=p.compute_slices,
                            memory_slices=p.memory_slices,
                            max_count=p.max_count,
                            memory_mib=profile_memory_mib(p, g.memory_mib),
                            starts=list(p.start_slots),
                            sms=p.sm_count or 0,
                        )
                    )
                by_name = {p.name: p for p in known}
                for m in g.mig_instances:
                    spec.mig_instances.append(
                        MigInstanceSpec(
                            profile_id=by_name[m.profile].gi_profile_id,
                            start=m.start_slot,
                            gi_id=m.gi_index,
                            uuid=str(m.uuid),
                        )
                    )
            port = 0
            if switched:
                width = max(lanes[g.index], default=0)
                spec.nvlinks = [
                    NvLinkSpec(link=k, remote=_switch_bus(k), to="switch")
                    for k in range(min(width, NVLINK_PORTS))
                ]
            else:
                for j, count in enumerate(lanes[g.index]):
                    for _ in range(count):
                        spec.nvlinks.append(NvLinkSpec(link=port, remote=node.gpus[j].pci_bus_id))
                        port += 1
            gpus.append(spec)
        ancestors = []
        if topo is not None:
            for i in range(n):
                for j in range(i + 1, n):
                    kind = topo.links[i][j].kind
                    if kind in ANCESTOR_LEVEL:
                        level = ANCESTOR_LEVEL[kind]
                    else:  # an NVLink pair: the PCIe path NVML also reports for it
                        a, b = node.gpus[i].numa_node, node.gpus[j].numa_node
                        level = 40 if a == b else 50
                    ancestors.append((i, j, level))
        return cls(
            gpus=gpus,
            driver=node.driver_version or driver,
            cuda=_cuda_int(node.cuda_version) if node.cuda_version else cuda,
            ancestors=ancestors,
        )

    # -- YAML ----------------------------------------------------------------------------------------

    @classmethod
    def from_yaml(cls, path: Path) -> Machine:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        return cls.from_dict(doc)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Machine:
        gpus = []
        for raw in doc.get("gpus", []):
            g = dict(raw)
            mig = g.pop("mig", {}) or {}
            profiles = [MigProfileSpec(**p) for p in g.pop("mig_profiles", [])]
            instances = [MigInstanceSpec(**m) for m in g.pop("mig_instances", [])]
            links = [NvLinkSpec(**k) for k in g.pop("nvlinks", [])]
            if "compute_capability" not in g:  # the catalogue's, for a GPU it knows by NVML's name
                known = model_for_product(str(g.get("name", "")))
                g["compute_capability"] = list(known.compute_capability) if known is not None else [0, 0]
            raw_sample = dict(g.pop("sample", {}) or {})
            derived = derived_telemetry(str(g.get("name", "")), g["compute_capability"], len(gpus))
            sample = SampleSpec(**{**derived, **raw_sample})
            gpus.append(
                GpuSpec(
                    **g,
                    mig_capable=bool(mig.get("capable", False)),
                    mig_enabled=bool(mig.get("enabled", False)),
                    mig_pending=bool(mig.get("pending", mig.get("enabled", False))),
                    reset_needed=bool(mig.get("reset_needed", False)),
                    mig_profiles=profiles,
                    mig_instances=instances,
                    nvlinks=links,
                    sample=sample,
                )
            )
        return cls(
            gpus=gpus,
            driver=str(doc.get("driver", "550.54.15")),
            cuda=int(doc.get("cuda", 12040)),
            ancestors=[(int(a), int(b), int(level)) for a, b, level in doc.get("ancestors", [])],
            events=[(int(e["gpu"]), str(e["type"]), int(e.get("data", 0))) for e in doc.get("events", [])],
            faults=[(str(f["call"]), int(f["code"]), int(f.get("gpu", -1))) for f in doc.get("faults", [])],
        )

    # -- the compiled form ---------------------------------------------------------------------------

    def compile(self) -> str:
        out = [f"driver {self.driver}", f"cuda {self.cuda}"]
        for i, g in enumerate(self.gpus):
            out.append(
                f"gpu {g.uuid} {g.bus_id} {g.pci_device_id:08x} {g.memory_mib} {g.memory_used_mib} "
                f"{g.sm_count} {int(g.mig_capable)} {int(g.mig_enabled)} {int(g.mig_pending)} "
                f"{int(g.reset_needed)} {g.name}"
            )
            out.append(f"cc {i} {g.compute_capability[0]} {g.compute_capability[1]}")
            if g.minor is not None:
                out.append(f"minor {i} {g.minor}")
            if g.fabric is not None:
                out.append(f"fabric {i} {g.fabric['cluster_uuid']} {int(g.fabric['clique'])}")
            s = g.sample
            ecc = " ".join(str(v) for v in s.ecc)
            out.append(
                f"sample {i} {s.gpu_util} {s.mem_util} {s.temperature_c} {s.power_mw} {s.sm_clock_mhz} {ecc}"
            )
            remap = s.remapped_rows if s.remapped_rows is not None else [-1, -1, -1, -1]
            telemetry = [
                s.mem_clock_mhz,
                s.memory_temp_c,
                s.energy_mj,
                s.pcie_replays,
                s.enc_util,
                s.dec_util,
                s.reserved_mib,
                *remap,
            ]
            out.append(f"telemetry {i} " + " ".join(str(-1 if v is None else v) for v in telemetry))
            if s.gpm is not None:
                gpm = [s.gpm.get(k, 0.0) for k in ("graphics", "tensor", "dram", "pcie_tx", "pcie_rx")]
                out.append(f"gpm {i} " + " ".join(f"{float(v):f}" for v in gpm))
            for k in g.nvlinks:
                out.append(f"nvlink {i} {k.link} {int(k.up)} {k.remote} {2 if k.to == 'switch' else 0}")
            for p in g.mig_profiles:
                starts = ",".join(str(s) for s in p.starts)
                out.append(
                    f"giprofile {i} {p.constant} {p.id} {p.compute_slices} {p.memory_slices} {p.max_count} "
                    f"{p.memory_mib} {starts} {p.sms} {p.copy} {p.decoders} {p.encoders} {p.jpegs} {p.ofas}"
                )
            for m in g.mig_instances:
                out.append(f"gi {i} {m.gi_id} {m.profile_id} {m.start} {int(m.busy)} {m.uuid}")
            if not g.health_events:
                out.append(f"noevents {i}")
        out += [f"ancestor {a} {b} {level}" for a, b, level in self.ancestors]
        out += [f"event {gpu} {kind} {data}" for gpu, kind, data in self.events]
        out += [f"fail {call} {code} {gpu}" for call, code, gpu in self.faults]
        return "\n".join(out) + "\n"

    def write(self, path: Path) -> Path:
        path.write_text(self.compile(), encoding="utf-8")
        return path

    def smi_xml(self) -> str:
        """What ``nvidia-smi -q -x`` would print for this machine (the fields the device script compares:
        driver and CUDA versions, and per GPU its bus, name, UUID, PCI device ID, memory, MIG mode)."""
        cuda = f"{self.cuda // 1000}.{(self.cuda % 1000) // 10}"
        out = [
            '<?xml version="1.0" ?>',
            "<nvidia_smi_log>",
            f"  <driver_version>{self.driver}</driver_version>",
            f"  <cuda_version>{cuda}</cuda_version>",
            f"  <attached_gpus>{len(self.gpus)}</attached_gpus>",
        ]
        for g in self.gpus:
            mode = ("Enabled" if g.mig_enabled else "Disabled") if g.mig_capable else "N/A"
            migs = "<mig_device/>" * len(g.mig_instances) if g.mig_enabled else "None"
            out += [
                f'  <gpu id="{g.bus_id}">',
                f"    <product_name>{g.name}</product_name>",
                f"    <mig_mode><current_mig>{mode}</current_mig>"
                f"<pending_mig>{mode}</pending_mig></mig_mode>",
                f"    <mig_devices>{migs}</mig_devices>",
                f"    <uuid>{g.uuid}</uuid>",
                f"    <pci><pci_bus_id>{g.bus_id}</pci_bus_id>"
                f"<pci_device_id>0x{g.pci_device_id:08X}</pci_device_id></pci>",
                f"    <fb_memory_usage><total>{g.memory_mib} MiB</total>"
                f"<used>{g.memory_used_mib} MiB</used></fb_memory_usage>",
                "  </gpu>",
            ]
        out.append("</nvidia_smi_log>")
        return "\n".join(out) + "\n"


def _cuda_int(version: str) -> int:
    """``12.4`` -> 12040 (nvmlSystemGetCudaDriverVersion_v2's form)."""
    major, _, minor = version.partition(".")
    return 1000 * int(major) + 10 * int(minor or 0)


def _switch_bus(port: int) -> str:
    """The PCI bus of the NVSwitch behind NVLink port ``port`` (four switches, as on HGX H100)."""
    return f"00000000:{0xC0 + port % 4:02X}:00.0"
