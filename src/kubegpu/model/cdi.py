"""CDI specs as kubegpu writes them: the container edits that make a GPU work in a container.

A runtime with CDI enabled (containerd 1.7+ with ``enable_cdi``, 2.x, CRI-O) turns a device name such as
``k8s.device-plugin.kubegpu.io/gpu=GPU-…`` into container edits by reading the spec files in its CDI
directories. NVIDIA's device plugin writes such a spec for the devices it advertises (reference
nvidia-cdi-spec.md); kubegpu does the same, under a kind of its own, so a container started from CDI
names alone gets everything a GPU needs:

* per device: its device nodes (``/dev/nvidiaN``; for a MIG device also the ``nvidia-caps`` nodes of its
  GPU instance and compute instance, from ``/proc/driver/nvidia-caps/mig-minors``);
* common to all devices: the control nodes, the driver's libraries (each also under its soname, which
  is what the loader and CUDA ask for), its binaries (``nvidia-smi`` …), the GSP firmware and the
  IPC sockets (persistenced, fabric manager, MPS).

NVIDIA's spec makes the libraries loadable with two ``nvidia-ctk`` hooks (``create-symlinks``,
``update-ldcache``); kubegpu cannot assume ``nvidia-ctk`` exists, so it mounts each library a second
time under the name the host's soname link gives it (``libcuda.so.1``, ``libnvidia-ml.so.1`` …, and
``libcuda.so``) in the same directory as on the host, which is on the loader's default search path of
images of the host's family (``/usr/lib/x86_64-linux-gnu`` on Debian/Ubuntu, ``/usr/lib64`` on RHEL).

Pure: what the driver root holds is found by ``kubegpu.deviceplugin.cdi`` and passed in as
``DriverFiles``; this module only shapes JSON-ready dicts. Facts: the CDI spec (reference
dra-protocol.md section 6) and NVIDIA's spec (reference nvidia-cdi-spec.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AGENT_CDI_VERSION",
    "CONTROL_DEVICE_PATHS",
    "DEFAULT_AGENT_KIND",
    "NO_MIG_MINORS",
    "CdiDevice",
    "DriverFiles",
    "MigMinors",
    "agent_spec",
    "agent_spec_file_name",
    "common_edits",
    "host_path",
    "is_cdi_device_name",
    "parse_mig_minors",
]

AGENT_CDI_VERSION = "0.5.0"  # the lowest that allows a device node's hostPath; NVIDIA's plugin writes it too
DEFAULT_AGENT_KIND = "k8s.device-plugin.kubegpu.io/gpu"
CONTROL_DEVICE_PATHS = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
NVIDIA_CAPS_DIR = "/dev/nvidia-caps"
# What the runtime does with each kind of mount; the same options NVIDIA's spec uses.
LIBRARY_OPTIONS = ("ro", "nosuid", "nodev", "bind")
IPC_OPTIONS = ("nosuid", "nodev", "rbind", "rprivate", "noexec")

# A CDI device name: letters, digits, '_', '-', '.', ':', starting and ending with a letter or digit.
_DEVICE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")
# /proc/driver/nvidia-caps/mig-minors: "gpu0/gi1/access 12", "gpu0/gi1/ci0/access 13", "config 1" …
_MINOR_LINE = re.compile(r"gpu(\d+)/gi(\d+)(?:/ci(\d+))?/access\s+(\d+)")

ApiObject = dict[str, Any]


def is_cdi_device_name(name: str) -> bool:
    """Whether ``name`` may follow ``<kind>=`` (a legacy MIG UUID ``MIG-GPU-…/1/0`` may not)."""
    return bool(_DEVICE_NAME.fullmatch(name))


def host_path(root: str, path: str) -> str:
    """``path`` (as the container sees it) under the host's ``root``: ``/run/nvidia/driver`` +
    ``/usr/bin/nvidia-smi``; the path itself for the root ``/``."""
    return root.rstrip("/") + path


@dataclass(frozen=True)
class MigMinors:
    """The ``nvidia-caps`` minor numbers of MIG GPU instances ``(gpu, gi, None)`` and compute instances
    ``(gpu, gi, ci)``; ``gpu`` is the GPU's minor number (its ``/dev/nvidiaN``)."""

    minors: Mapping[tuple[int, int, int | None], int] = field(default_factory=dict)

    def caps_paths(self, gpu: int, gi: int, ci: int = 0) -> tuple[str, ...]:
        """The device nodes NVIDIA adds for MIG device ``gi``/``ci`` of GPU ``gpu``: its GPU instance's
        and its compute instance's ``/dev/nvidia-caps/nvidia-cap<N>``; none that the file lacks."""
        keys = ((gpu, gi, None), (gpu, gi, ci))
        return tuple(f"{NVIDIA_CAPS_DIR}/nvidia-cap{self.minors[k]}" for k in keys if k in self.minors)


NO_MIG_MINORS = MigMinors()  # no MIG-capable driver, simulated GPUs: MIG devices get no nvidia-caps nodes


def parse_mig_minors(text: str) -> MigMinors:
    """The GPU- and compute-instance lines of ``mig-minors``; other lines (``config``, ``monitor``,
    anything unexpected) are skipped, as NVIDIA's plugin skips them."""
    minors: dict[tuple[int, int, int | None], int] = {}
    for line in text.splitlines():
        match = _MINOR_LINE.fullmatch(line.strip())
        if match is None:
            continue
        gpu, gi, ci, minor = match.groups()
        minors[(int(gpu), int(gi), int(ci) if ci is not None else None)] = int(minor)
    return MigMinors(minors)


@dataclass(frozen=True, kw_only=True)
class DriverFiles:
    """What a node's driver offers containers, as found under its roots. Every path is what the
    container sees (``/usr/bin/nvidia-smi``); the host's file is ``host_path(driver_root, path)``
    (device nodes: under ``dev_root``). Only files that exist are listed."""

    driver_root: str = "/"
    dev_root: str = "/"
    dev_seen_at: str = ""  # where the agent sees the dev root ("": at dev_root), to check a node exists
    version: str | None = None  # the driver version the library names carry (libcuda.so.<version>)
    control_nodes: tuple[str, ...] = ()
    libraries: tuple[str, ...] = ()
    # (the name the loader asks for, the library it is): libcuda.so.1 -> libcuda.so.550.54.15
    library_links: tuple[tuple[str, str], ...] = ()
    binaries: tuple[str, ...] = ()
    firmware: tuple[str, ...] = ()
    ipc: tuple[str, ...] = ()  # sockets and the MPS pipe directory


@dataclass(frozen=True, kw_only=True)
class CdiDevice:
    """One device of a spec: its name (after ``<kind>=``) and its device nodes (container paths)."""

    name: str
    nodes: tuple[str, ...] = ()
    env: tuple[str, ...] = ()


def _nodes(paths: Iterable[str], dev_root: str) -> list[ApiObject]:
    return [{"path": p, "hostPath": host_path(dev_root, p)} for p in dict.fromkeys(paths)]


def common_edits(
    files: DriverFiles,
    *,
    env: Sequence[str] = (),
    mounts: Sequence[tuple[str, str]] = (),
) -> ApiObject:
    """The container edits every device of a spec shares: ``env``, the control nodes, the driver's
    libraries (and their soname links), binaries, firmware and IPC sockets, plus ``mounts`` (host path,
    container path) read-only (the simulated ``nvidia-smi``). Empty keys are left out."""
    root = files.driver_root
    ro = list(LIBRARY_OPTIONS)
    entries: list[ApiObject] = []
    for path in (*files.libraries, *files.binaries, *files.firmware):
        entries.append({"hostPath": host_path(root, path), "containerPath": path, "options": ro})
    for link, target in files.library_links:
        entries.append({"hostPath": host_path(root, target), "containerPath": link, "options": ro})
    for path in files.ipc:
        entries.append(
            {"hostPath": host_path(root, path), "containerPath": path, "options": list(IPC_OPTIONS)}
        )
    for host, container in mounts:
        entries.append({"hostPath": host, "containerPath": container, "options": ro})
    unique: dict[str, ApiObject] = {}
    for entry in entries:
        unique.setdefault(entry["containerPath"], entry)  # the first mount of a container path wins
    edits: ApiObject = {}
    if env:
        edits["env"] = list(env)
    if files.control_nodes:
        edits["deviceNodes"] = _nodes(files.control_nodes, files.dev_root)
    if unique:
        edits["mounts"] = list(unique.values())
    return edits


def agent_spec_file_name(kind: str) -> str:
    """The agent's spec file in the CDI directory: ``<vendor>-<class>_kubegpu-agent.json``, a name no
    other tool writes, so the agent never replaces a spec it did not write."""
    return kind.replace("/", "-") + "_kubegpu-agent.json"


def agent_spec(
    kind: str, devices: Sequence[CdiDevice], common: ApiObject, *, dev_root: str = "/"
) -> ApiObject:
    """The agent's spec: one CDI device per entry of ``devices`` (its nodes found under ``dev_root``; a
    device without edits is not valid CDI: the caller leaves such devices out), and the ``common``
    edits when there are any."""
    entries: list[ApiObject] = []
    for d in devices:
        edits: ApiObject = {}
        if d.env:
            edits["env"] = list(d.env)
        if d.nodes:
            edits["deviceNodes"] = _nodes(d.nodes, dev_root)
        entries.append({"name": d.name, "containerEdits": edits})
    spec: ApiObject = {"cdiVersion": AGENT_CDI_VERSION, "kind": kind, "devices": entries}
    if common:
        spec["containerEdits"] = common
    return spec
