"""Host checks: is there an NVIDIA GPU, is the driver loaded and consistent, does NVML answer.

These are the first links of the chain (seed 001 §1 and §5.1, seed 000's table row "a GPU
disappeared"). Every fact is read through a ``HostProbe`` so a fixture root in a temporary directory
drives exactly the code that runs on a real node.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from kubegpu.doctor.chain import Check
from kubegpu.doctor.finding import CheckId, Layer, Outcome, fail, ok, skip, warn
from kubegpu.doctor.hostprobe import CommandResult, HostProbe
from kubegpu.errors import SourceError
from kubegpu.health.xid import XidEvent, XidPolicy, XidVerdict, parse_xid_line
from kubegpu.sources.nvml import DRIVER_NOT_LOADED, HostReading, failure_in_text

__all__ = ["HOST_CHECKS", "HostFacts", "NodeContext", "PciGpu", "SmiGpu"]

NVIDIA_VENDOR = "0x10de"
# PCI class 0x0300 (VGA display controller) and 0x0302 (3D controller): GPUs, not NVSwitches/bridges.
GPU_CLASS_PREFIXES = ("0x0300", "0x0302")
LIB_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "usr/local/nvidia/lib64",
    "run/nvidia/driver/usr/lib/x86_64-linux-gnu",  # the GPU Operator's driver container
    "run/nvidia/driver/usr/lib64",
)
SMI_QUERY = (
    "--query-gpu=index,pci.bus_id,name,driver_version,persistence_mode",
    "--format=csv,noheader",
)
_MODULE_VERSION_RE = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)")
_BOOT_BANNER_RE = re.compile(r"kernel: (\[\s*0\.0+\] )?Linux version ")
_LIBNVML_RE = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$")

ID_GPU_PRESENT = CheckId("host.gpu-present")
ID_NOUVEAU = CheckId("host.nouveau")
ID_DRIVER_LOADED = CheckId("host.driver-loaded")
ID_DRIVER_VERSION = CheckId("host.driver-version")
ID_DEVICE_NODES = CheckId("host.device-nodes")
ID_NVML = CheckId("host.nvml")
ID_NVML_LIBRARY = CheckId("host.nvml-library")
ID_PERSISTENCE = CheckId("host.persistence-mode")
ID_GPU_COUNT = CheckId("host.gpu-count")
ID_XID = CheckId("host.xid")

REINSTALL_STEPS = "\n".join(DRIVER_NOT_LOADED.fix)


@dataclass(frozen=True, kw_only=True)
class PciGpu:
    """An NVIDIA GPU as the PCI bus lists it (``/sys/bus/pci/devices/<bus_id>``)."""

    bus_id: str
    device_id: str
    class_code: str


@dataclass(frozen=True, kw_only=True)
class SmiGpu:
    """One row of ``nvidia-smi --query-gpu``."""

    index: str
    bus_id: str
    name: str
    driver_version: str
    persistence_mode: str


def normalize_bus_id(bus_id: str) -> str:
    """NVML's ``00000000:3B:00.0`` and sysfs's ``0000:3b:00.0`` to the sysfs form."""
    bus_id = bus_id.strip().lower()
    return bus_id[-12:] if len(bus_id) > 12 else bus_id


@dataclass(frozen=True, kw_only=True)
class XidSummary:
    """XID events of one GPU and code, for reporting."""

    bus_id: str
    xid: int
    count: int
    last: XidEvent


NvmlReader = Callable[[], HostReading]


def _live_nvml() -> HostReading:
    from kubegpu.sources.nvml import read_host

    return read_host("doctor")


class HostFacts:
    """Facts about one host, each read once and shared by the checks.

    ``nvml`` reads the GPUs through the agent's own NVML funnel; by default it is the live one on the
    live host and absent under a fixture root (whose files are not the library's GPUs)."""

    def __init__(self, probe: HostProbe, *, nvml: NvmlReader | None = None) -> None:
        self.probe = probe
        self._nvml = nvml if nvml is not None else (_live_nvml if probe.is_live else None)

    @cached_property
    def pci_gpus(self) -> tuple[PciGpu, ...]:
        gpus = []
        for dev in self.probe.glob("sys/bus/pci/devices", "*"):
            vendor = (self.probe.read_path(dev / "vendor") or "").strip().lower()
            klass = (self.probe.read_path(dev / "class") or "").strip().lower()
            if vendor == NVIDIA_VENDOR and klass.startswith(GPU_CLASS_PREFIXES):
                device = (self.probe.read_path(dev / "device") or "").strip().lower()
                gpus.append(PciGpu(bus_id=dev.name.lower(), device_id=device, class_code=klass))
        return tuple(gpus)

    @cached_property
    def modules(self) -> dict[str, str]:
        text = self.probe.read_text("proc/modules") or ""
        return {line.split()[0]: line for line in text.splitlines() if line.strip()}

    @cached_property
    def kernel_release(self) -> str | None:
        text = self.probe.read_text("proc/sys/kernel/osrelease")
        if text and text.strip():
            return text.strip()
        res = self.probe.run("uname", "-r", timeout_s=2.0)
        return res.stdout.strip() or None if res.succeeded else None

    @cached_property
    def module_version(self) -> str | None:
        text = self.probe.read_text("sys/module/nvidia/version")
        if text and text.strip():
            return text.strip()
        proc = self.probe.read_text("proc/driver/nvidia/version") or ""
        match = _MODULE_VERSION_RE.search(proc)
        return match.group(1) if match else None

    @cached_property
    def nvml_libraries(self) -> dict[str, Path]:
        """User-space driver versions found, from ``libnvidia-ml.so.<version>`` file names."""
        found: dict[str, Path] = {}
        for rel in LIB_DIRS:
            for lib in self.probe.glob(rel, "libnvidia-ml.so.*"):
                match = _LIBNVML_RE.search(lib.name)
                if match:
                    found.setdefault(match.group(1), lib)
        return found

    @cached_property
    def nvml_reading(self) -> HostReading | SourceError | None:
        """The GPUs as the agent's own NVML (nvidia-ml-py loading libnvidia-ml.so.1) reads them, the
        error it gives instead, or ``None`` when there is no NVML to read (a fixture root)."""
        if self._nvml is None:
            return None
        try:
            return self._nvml()
        except SourceError as exc:
            return exc

    @cached_property
    def smi(self) -> CommandResult:
        return self.probe.run("nvidia-smi", *SMI_QUERY)

    @cached_property
    def smi_gpus(self) -> tuple[SmiGpu, ...]:
        rows = []
        if self.smi.problem is not None:
            return ()
        for line in self.smi.stdout.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 5 and parts[0].isdigit():
                rows.append(
                    SmiGpu(
                        index=parts[0],
                        bus_id=normalize_bus_id(parts[1]),
                        name=parts[2],
                        driver_version=parts[3],
                        persistence_mode=parts[4],
                    )
                )
        return tuple(rows)

    @cached_property
    def kernel_log(self) -> tuple[str, list[str]] | None:
        """(source, lines) of the kernel log: ``dmesg`` on the real root, else the log files."""
        if self.probe.is_live:
            res = self.probe.run("dmesg", timeout_s=2.0)
            if res.succeeded and res.stdout:
                return "dmesg", res.stdout.splitlines()
        for rel in ("var/log/kern.log", "var/log/messages"):
            text = self.probe.read_text(rel)
            if text is not None:
                lines = text.splitlines()
                # only since the last boot, like dmesg: XIDs before a reboot are history
                boots = [i for i, line in enumerate(lines) if _BOOT_BANNER_RE.search(line)]
                return f"/{rel} (since the last boot)" if boots else "/" + rel, lines[
                    boots[-1] if boots else 0 :
                ]
        return None


@dataclass(kw_only=True)
class NodeContext:
    """What the host checks run against: the facts and the XID policy in force."""

    facts: HostFacts
    xid_policy: XidPolicy = field(default_factory=XidPolicy)


def check_gpu_present(ctx: NodeContext) -> Outcome:
    gpus = ctx.facts.pci_gpus
    if not gpus:
        probe = ctx.facts.probe
        return fail(
            "no NVIDIA GPU on the PCI bus (vendor 0x10de, display/3D class)",
            f"scanned {probe.display(probe.path('sys/bus/pci/devices'))}: "
            f"{len(probe.glob('sys/bus/pci/devices', '*'))} devices, none NVIDIA",
            fix="lspci -nn | grep -i nvidia  # nothing: the card is not visible to this OS "
            "(not seated, no slot power, or not passed through to this VM)",
        )
    return ok(
        f"{len(gpus)} NVIDIA GPU(s) on the PCI bus",
        *(f"{g.bus_id} device={g.device_id} class={g.class_code}" for g in gpus),
    )


def _nouveau_blacklisted(probe: HostProbe) -> str | None:
    for rel in ("etc/modprobe.d", "usr/lib/modprobe.d", "lib/modprobe.d", "run/modprobe.d"):
        for conf in probe.glob(rel, "*.conf"):
            for n, line in enumerate((probe.read_path(conf) or "").splitlines(), start=1):
                words = line.split("#", 1)[0].split()
                if words[:2] == ["blacklist", "nouveau"]:
                    return f"{probe.display(conf)}:{n}: {line.strip()}"
    cmdline = probe.read_text("proc/cmdline") or ""
    for word in cmdline.split():
        if word.startswith("modprobe.blacklist=") and "nouveau" in word.split("=", 1)[1].split(","):
            return f"/proc/cmdline: {word}"
    return None


NOUVEAU_FIX = (
    "printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' > /etc/modprobe.d/blacklist-nouveau.conf\n"
    "update-initramfs -u  # dracut -f on RHEL\n"
    "reboot"
)


def check_nouveau(ctx: NodeContext) -> Outcome:
    loaded = ctx.facts.modules.get("nouveau")
    blacklist = _nouveau_blacklisted(ctx.facts.probe)
    if loaded is not None:
        return fail(
            "the open-source nouveau driver is loaded and holds the GPU, so the nvidia module cannot bind",
            f"/proc/modules: {loaded}",
            *([f"blacklisted in {blacklist}, but the running initramfs predates it"] if blacklist else []),
            fix=NOUVEAU_FIX,
        )
    if blacklist is None:
        return warn(
            "nouveau is not loaded but not blacklisted either: a kernel update or a missing nvidia "
            "module lets it grab the GPU at the next boot",
            "no 'blacklist nouveau' in /etc/modprobe.d, /usr/lib/modprobe.d or /proc/cmdline",
            fix=NOUVEAU_FIX,
        )
    return ok("nouveau is not loaded and is blacklisted", blacklist)


def _nvidia_module_kernels(probe: HostProbe) -> list[str]:
    kernels = []
    for moddir in probe.glob("lib/modules", "*"):
        dep = probe.read_path(moddir / "modules.dep") or ""
        if re.search(r"/nvidia\.ko(\.\w+)?:", dep):
            kernels.append(moddir.name)
    return kernels


def check_driver_loaded(ctx: NodeContext) -> Outcome:
    facts = ctx.facts
    line = facts.modules.get("nvidia")
    if line is not None:
        extra = [
            facts.modules[m] for m in ("nvidia_uvm", "nvidia_modeset", "nvidia_drm") if m in facts.modules
        ]
        return ok("the nvidia kernel module is loaded", f"/proc/modules: {line}", *extra)
    release = facts.kernel_release
    built_for = _nvidia_module_kernels(facts.probe)
    evidence = ["/proc/modules: no 'nvidia' line (lsmod | grep nvidia is empty)"]
    if release:
        evidence.append(f"running kernel: {release}")
    if "nouveau" in facts.modules:
        evidence.append("nouveau is loaded and holds the GPU (see host.nouveau)")
    if built_for and release and release not in built_for:
        return fail(
            f"the nvidia module was built for kernel {', '.join(built_for)} but kernel {release} is "
            "running: the kernel was updated without rebuilding the driver",
            *evidence,
            f"nvidia.ko listed in /lib/modules/{{{','.join(built_for)}}}/modules.dep only",
            fix=REINSTALL_STEPS,
        )
    if release and release in built_for:
        return fail(
            "the nvidia module is installed for the running kernel but not loaded",
            *evidence,
            f"nvidia.ko is in /lib/modules/{release}/modules.dep",
            fix="modprobe nvidia && dmesg | grep -i nvrm  # the kernel log says why it refuses "
            "(nouveau bound to the GPU, unsigned module with Secure Boot, version mismatch)",
        )
    return fail(
        "the nvidia kernel module is not loaded and no nvidia.ko is installed for the running kernel",
        *evidence,
        fix=REINSTALL_STEPS,
    )


def check_driver_version(ctx: NodeContext) -> Outcome:
    facts = ctx.facts
    kernel = facts.module_version
    libs = facts.nvml_libraries
    smi_versions = sorted({g.driver_version for g in facts.smi_gpus})
    evidence = [f"kernel module: {kernel or 'unknown (no /sys/module/nvidia/version)'}"]
    evidence += [f"user space: {facts.probe.display(path)}" for path in libs.values()]
    evidence += [f"nvidia-smi driver_version: {v}" for v in smi_versions]
    if not libs and not smi_versions:
        return fail(
            "the user-space driver (libnvidia-ml.so, NVML) is missing: nothing can talk to the GPU",
            *evidence,
            f"no libnvidia-ml.so.<version> in {', '.join('/' + d for d in LIB_DIRS)}",
            fix="reinstall the driver (the runfile or the distribution's nvidia-driver/libnvidia-compute "
            "package of the same version as the kernel module), then ls /usr/lib/*/libnvidia-ml.so*",
        )
    user = sorted(set(libs) | set(smi_versions))
    if kernel is not None and any(v != kernel for v in user):
        other = ", ".join(v for v in user if v != kernel)
        return fail(
            f"driver/library version mismatch: kernel module {kernel}, user-space driver {other}: the "
            "driver was upgraded without reloading the kernel module",
            *evidence,
            fix="reboot the node (kubectl drain <node> first), or stop every GPU user and run "
            "rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && modprobe nvidia",
        )
    if len(libs) > 1:
        return warn(
            f"several user-space driver versions installed ({', '.join(sorted(libs))})",
            *evidence,
            fix="remove the stale libnvidia-ml.so.<old> left by an earlier install (nvidia-uninstall or "
            "the package manager) so containers get the one matching the kernel module",
        )
    return ok(f"kernel module and user-space driver agree ({kernel or user[0]})", *evidence)


def check_device_nodes(ctx: NodeContext) -> Outcome:
    probe = ctx.facts.probe
    minors = sorted(
        (p for p in probe.glob("dev", "nvidia[0-9]*") if p.name[6:].isdigit()), key=lambda p: int(p.name[6:])
    )
    missing = [name for name in ("nvidiactl", "nvidia-uvm") if not probe.exists(f"dev/{name}")]
    if not minors:
        missing.append("nvidia0…")
    evidence = [f"present: {', '.join(['/dev/' + p.name for p in minors]) or 'no /dev/nvidiaN'}"]
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"):
        if probe.exists(f"dev/{name}"):
            evidence.append(f"present: /dev/{name}")
    if missing:
        return fail(
            f"device nodes missing: {', '.join('/dev/' + m for m in missing)}; containers cannot use "
            "the GPU (CUDA needs /dev/nvidiactl, /dev/nvidiaN and /dev/nvidia-uvm)",
            *evidence,
            fix="nvidia-modprobe -u -c=0  # creates the nodes and loads nvidia-uvm; run nvidia-smi once "
            "or enable nvidia-persistenced so they exist at boot",
        )
    pci = len(ctx.facts.pci_gpus)
    if len(minors) < pci:
        return warn(
            f"{len(minors)} /dev/nvidiaN nodes for {pci} GPUs on the PCI bus",
            *evidence,
            fix="nvidia-smi  # creates nodes for every GPU the driver initialised; see host.gpu-count",
        )
    return ok(f"device nodes present for {len(minors)} GPU(s), control and UVM", *evidence)


def check_nvml(ctx: NodeContext) -> Outcome:
    res = ctx.facts.smi
    text = res.output
    evidence = [res.describe(), *text.splitlines()[:6]]
    if res.problem is not None and "not found" in res.problem:
        return fail(
            "nvidia-smi is not installed: the driver's user-space part is missing",
            *evidence,
            fix="install the driver (runfile or nvidia-utils-<branch> of the kernel module's version)",
        )
    if res.problem is not None:
        return fail(
            f"nvidia-smi did not finish ({res.problem}): the driver or a GPU is wedged",
            *evidence,
            fix="dmesg | grep -iE 'nvrm|xid'  # look for Xid 79/119; drain the node and reboot",
        )
    known = failure_in_text(text)  # the meanings NVML's funnel gives its own errors
    if known is not None:
        return fail(
            f"nvidia-smi: {known.meaning}",
            *evidence,
            f"PCI bus: {len(ctx.facts.pci_gpus)} NVIDIA GPU(s)",
            fix="\n".join(known.fix)
            or "read the message above; dmesg | grep -i nvrm shows the driver's side",
        )
    if res.returncode != 0:
        return fail(
            f"nvidia-smi failed (exit {res.returncode})",
            *evidence,
            fix="read the message above; dmesg | grep -i nvrm shows the driver's side",
        )
    gpus = ctx.facts.smi_gpus
    if not gpus:
        return fail(
            "nvidia-smi ran but listed no GPU", *evidence, fix="nvidia-smi -q  # and dmesg | grep -i nvrm"
        )
    rows = [f"GPU {g.index} {g.bus_id} {g.name} driver {g.driver_version}" for g in gpus]
    errors = [line for line in text.splitlines() if "unable to determine" in line.lower()]
    if errors:
        return warn(
            f"NVML answers for {len(gpus)} GPU(s) but not for all", *rows, *errors, fix="see host.gpu-count"
        )
    return ok(f"NVML answers: {len(gpus)} GPU(s), driver {gpus[0].driver_version}", *rows)


def check_nvml_library(ctx: NodeContext) -> Outcome:
    """The library the device plugin itself uses (nvidia-ml-py and libnvidia-ml.so.1), not nvidia-smi:
    they can disagree (a container with nvidia-smi but another library, a library of another driver)."""
    facts = ctx.facts
    reading = facts.nvml_reading
    pci = len(facts.pci_gpus)
    if reading is None:
        return skip("NVML is read on the live host only (--host-root names another root)")
    if isinstance(reading, SourceError):
        text = str(reading)
        known = failure_in_text(text)
        return fail(
            f"the device plugin's NVML (nvidia-ml-py, libnvidia-ml.so.1) does not start: {text}",
            f"PCI bus: {pci} NVIDIA GPU(s)",
            fix="\n".join(known.fix) if known is not None and known.fix else "kubegpu doctor node --verbose",
        )
    node = reading.node
    rows = [
        f"GPU {g.index} {g.pci_bus_id} {g.model} {g.memory_mib} MiB {g.uuid}"
        + (f" MIG on, {len(g.mig_instances)} instance(s)" if g.mig_enabled else "")
        for g in node.gpus
    ]
    versions = f"driver {reading.driver or 'unknown'}, CUDA {reading.cuda or 'unknown'}"
    if len(node.gpus) != pci:
        return warn(
            f"the device plugin's NVML sees {len(node.gpus)} GPU(s), the PCI bus {pci} ({versions})",
            *rows,
            fix="see host.gpu-count; a GPU NVML does not list is one the plugin cannot advertise",
        )
    return ok(f"the device plugin's NVML sees {len(node.gpus)} GPU(s) ({versions})", *rows)


def check_persistence_mode(ctx: NodeContext) -> Outcome:
    off = [g for g in ctx.facts.smi_gpus if g.persistence_mode.lower() != "enabled"]
    if off:
        return warn(
            f"persistence mode is off on {len(off)} GPU(s): the driver tears the GPU down between users, "
            "so every pod start pays the initialisation again",
            *(f"GPU {g.index} {g.bus_id}: persistence_mode={g.persistence_mode}" for g in off),
            fix="nvidia-smi -pm 1  # now; systemctl enable --now nvidia-persistenced  # across reboots",
        )
    return ok(f"persistence mode on for all {len(ctx.facts.smi_gpus)} GPU(s)")


def _same_gpu(xid_bus: str, pci_bus: str) -> bool:
    """XID lines name ``0000:3b:00`` (no function) and sometimes ``3b:00``; sysfs has ``0000:3b:00.0``."""
    return pci_bus.partition(".")[0].endswith(xid_bus.partition(".")[0])


def check_gpu_count(ctx: NodeContext) -> Outcome:
    pci = {g.bus_id: g for g in ctx.facts.pci_gpus}
    nvml = {g.bus_id for g in ctx.facts.smi_gpus}
    missing = sorted(set(pci) - nvml)
    if missing:
        evidence = [f"PCI: {len(pci)} GPU(s); NVML: {len(nvml)} GPU(s)"]
        evidence += [f"missing from NVML: {bus}" for bus in missing]
        for event in _xid_summaries(ctx):
            if any(_same_gpu(event.bus_id, bus) for bus in missing):
                evidence.append(f"kernel log: {event.last.text}")
        return fail(
            f"{len(missing)} GPU(s) disappeared: on the PCI bus but not visible to NVML "
            f"({', '.join(missing)}); the device plugin reports them unhealthy or not at all",
            *evidence,
            fix="dmesg | grep -iE 'xid|nvrm'  # Xid 79: fell off the bus; kubectl drain <node>; reboot; "
            "if it repeats, reseat the card, check power and cooling, or RMA it",
        )
    return ok(f"all {len(pci)} PCI GPU(s) visible to NVML")


def _xid_summaries(ctx: NodeContext) -> list[XidSummary]:
    log = ctx.facts.kernel_log
    if log is None:
        return []
    found: dict[tuple[str, int], XidSummary] = {}
    for line in log[1]:
        event = parse_xid_line(line)
        if event is None:
            continue
        key = (event.pci_bus_id, event.xid)
        prev = found.get(key)
        found[key] = XidSummary(
            bus_id=event.pci_bus_id, xid=event.xid, count=(prev.count if prev else 0) + 1, last=event
        )
    return list(found.values())


def _xid_fix(xid: int) -> str:
    taint = "kubectl taint nodes <node> nvidia.com/gpu-xid-error=true:NoSchedule  # keep new pods off"
    if xid == 79:
        action = (
            "kubectl drain <node>; reboot; if Xid 79 returns, reseat/replace the card (PCIe, power, cooling)"
        )
    elif xid in (48, 63, 64, 92, 94, 95):
        action = (
            "kubectl drain <node>; nvidia-smi -r -i <gpu> or reboot to apply the row remap/page retirement; "
            "nvidia-smi -q -d ECC,ROW_REMAPPER; RMA if remapping failed (Xid 64) or errors recur"
        )
    elif xid == 74:
        action = (
            "nvidia-smi nvlink -s; kubectl drain <node>; reset the GPU; "
            "contact support if NVLink errors recur"
        )
    elif xid in (119, 120):
        action = (
            "kubectl drain <node>; reboot; update the driver (GSP firmware timeouts are fixed per branch)"
        )
    else:
        action = (
            "kubectl drain <node>; reset the GPU (nvidia-smi -r -i <gpu>) or reboot; "
            "see NVIDIA's XID catalogue"
        )
    return f"{action}\n{taint}"


def check_xid(ctx: NodeContext) -> Outcome:
    log = ctx.facts.kernel_log
    if log is None:
        return skip("no kernel log readable (no /var/log/kern.log or /var/log/messages, dmesg not allowed)")
    source, _ = log
    summaries = _xid_summaries(ctx)
    if not summaries:
        return ok(f"no 'NVRM: Xid' lines in {source}")
    fatal = [s for s in summaries if ctx.xid_policy.classify(s.xid) is XidVerdict.FATAL]
    ignored = [s for s in summaries if s not in fatal]

    def line(s: XidSummary) -> str:
        return f"Xid {s.xid} ({s.last.meaning}) on {s.bus_id} ×{s.count}: {s.last.text}"

    if fatal:
        worst = fatal[-1]
        return fail(
            f"fatal XID {', '.join(str(s.xid) for s in fatal)} in {source}: "
            f"{worst.last.meaning} on {worst.bus_id}; the device plugin marks such GPUs unhealthy",
            *(line(s) for s in fatal + ignored),
            fix=_xid_fix(worst.xid),
        )
    return warn(
        f"application XID(s) {', '.join(str(s.xid) for s in ignored)} in {source}: faults of a program, "
        "not of the GPU (ignored by the health policy)",
        *(line(s) for s in ignored),
        fix="look at the workload that ran at that time (kubectl logs); the GPU stays allocatable",
    )


HOST_CHECKS: tuple[Check[NodeContext], ...] = (
    Check(id=ID_GPU_PRESENT, layer=Layer.HOST, needs=(), run=check_gpu_present),
    Check(id=ID_NOUVEAU, layer=Layer.HOST, needs=(ID_GPU_PRESENT,), run=check_nouveau),
    Check(id=ID_DRIVER_LOADED, layer=Layer.HOST, needs=(ID_GPU_PRESENT,), run=check_driver_loaded),
    Check(id=ID_DRIVER_VERSION, layer=Layer.HOST, needs=(ID_DRIVER_LOADED,), run=check_driver_version),
    Check(id=ID_DEVICE_NODES, layer=Layer.HOST, needs=(ID_DRIVER_LOADED,), run=check_device_nodes),
    Check(id=ID_NVML, layer=Layer.HOST, needs=(ID_GPU_PRESENT,), run=check_nvml),
    Check(id=ID_NVML_LIBRARY, layer=Layer.HOST, needs=(ID_GPU_PRESENT,), run=check_nvml_library),
    Check(id=ID_PERSISTENCE, layer=Layer.HOST, needs=(ID_NVML,), run=check_persistence_mode),
    Check(id=ID_GPU_COUNT, layer=Layer.HOST, needs=(ID_NVML,), run=check_gpu_count),
    Check(id=ID_XID, layer=Layer.HOST, needs=(ID_GPU_PRESENT,), run=check_xid),
)
