"""The agent's CDI spec on disk: what the driver root holds, and the spec file kept in step with it.

With ``deviceListStrategy`` ``cdi-cri`` or ``cdi-annotations`` Allocate names devices
``<cdiKind>=<id>``; the runtime can only inject them when a spec declares them. The agent writes that
spec itself (``model/cdi.py`` says what it holds), atomically, as
``<cdiSpecDir>/<vendor>-<class>_kubegpu-agent.json``: on start, again on a reload whose devices or
settings change it, and removes it on a clean stop. It never touches another file of the directory.

``find_driver_files`` searches the driver root as NVIDIA's toolkit does: the driver version from
``libcuda.so.<version>`` in the usual library directories, every ``lib*.so.<version>`` beside it (and
in ``vdpau/``), the soname links to them, the driver's binaries on the usual ``PATH`` directories, GSP
firmware under ``/lib/firmware/nvidia/<version>/`` and the IPC sockets under ``/run`` and ``/var/run``.
``read_mig_minors`` reads ``<proc root>/driver/nvidia-caps/mig-minors`` (tests give their own proc root).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kubegpu.atomicfile import write_atomically
from kubegpu.deviceplugin.config import AgentConfig, DeviceListStrategy
from kubegpu.deviceplugin.inventory import Inventory
from kubegpu.model.cdi import (
    CONTROL_DEVICE_PATHS,
    NO_MIG_MINORS,
    CdiDevice,
    DriverFiles,
    MigMinors,
    agent_spec,
    agent_spec_file_name,
    common_edits,
    is_cdi_device_name,
    parse_mig_minors,
)

__all__ = [
    "BINARIES",
    "BINARY_DIRS",
    "LIBRARY_DIRS",
    "MIG_MINORS",
    "AgentCdiSpec",
    "build_agent_spec",
    "find_driver_files",
    "read_mig_minors",
    "wants_spec",
]

log = logging.getLogger(__name__)

# Where a driver's libraries live (the directories NVIDIA's toolkit searches), relative to the root.
LIBRARY_DIRS = (
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu/nvidia/current",
    "/lib/aarch64-linux-gnu/nvidia/current",
    "/usr/lib",
    "/lib",
)
BINARY_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-imex",
    "nvidia-imex-ctl",
)
IPC_SOCKETS = ("nvidia-persistenced/socket", "nvidia-fabricmanager/socket")  # under /run, else /var/run
MPS_PIPE_DIR = "/tmp/nvidia-mps"
FIRMWARE_DIR = "/lib/firmware/nvidia"
MIG_MINORS = "driver/nvidia-caps/mig-minors"  # under the proc root
_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?")
_CDI = {DeviceListStrategy.CDI_CRI, DeviceListStrategy.CDI_ANNOTATIONS}


def _under(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def _container_path(root: Path, host: Path) -> str:
    return "/" + str(host.relative_to(root)).lstrip("/") if host != root else "/"


def _driver_version(root: Path) -> tuple[str | None, list[Path]]:
    """The version in the first ``libcuda.so.<version>`` (else ``libnvidia-ml.so.<version>``) file
    found, and the library directories holding libraries of that version."""
    version = None
    for stem in ("libcuda.so.", "libnvidia-ml.so."):
        for d in LIBRARY_DIRS:
            folder = _under(root, d)
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                continue
            for name in names:
                suffix = name[len(stem) :]
                if name.startswith(stem) and _VERSION.fullmatch(suffix) and (folder / name).is_file():
                    version = suffix
                    break
            if version:
                break
        if version:
            break
    if version is None:
        return None, []
    dirs: list[Path] = []
    seen: set[Path] = set()  # /lib is /usr/lib on merged-/usr systems: each directory once
    for d in LIBRARY_DIRS:
        folder = _under(root, d)
        for candidate in (folder, folder / "vdpau"):
            if not candidate.is_dir() or candidate.resolve() in seen:
                continue
            if any(candidate.glob(f"lib*.so.{version}")):
                seen.add(candidate.resolve())
                dirs.append(candidate)
    return version, dirs


def _resolve_in(root: Path, link: Path, hops: int = 8) -> Path | None:
    """Where the symlink ``link`` leads, an absolute target read as under ``root``."""
    current = link
    for _ in range(hops):
        try:
            target = os.readlink(current)
        except OSError:
            return current if current.is_file() else None
        current = _under(root, target) if target.startswith("/") else current.parent / target
    return None


def _libraries(root: Path, version: str, dirs: Sequence[Path]) -> tuple[list[str], list[tuple[str, str]]]:
    files: list[str] = []
    links: list[tuple[str, str]] = []
    for folder in dirs:
        real = {p for p in folder.glob(f"lib*.so.{version}") if p.is_file() and not p.is_symlink()}
        files.extend(_container_path(root, p) for p in sorted(real))
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if not entry.is_symlink() or not entry.name.startswith("lib") or ".so" not in entry.name:
                continue
            target = _resolve_in(root, Path(entry.path))
            if target is not None and target in real:
                links.append((_container_path(root, Path(entry.path)), _container_path(root, target)))
    return files, links


def find_driver_files(driver_root: str = "/", dev_root: str = "/", *, seen_at: str = "") -> DriverFiles:
    """What the driver installed under ``driver_root`` (device nodes under ``dev_root``) offers a
    container; only what exists is listed. A root without a driver gives empty lists. ``seen_at`` is
    where the agent sees the host's ``driver_root`` (in a pod that mounts it elsewhere, NVIDIA's
    ``driverRootCtrPath``); the files are searched there, and named by their host paths."""
    root = Path(seen_at or driver_root)
    version, dirs = _driver_version(root)
    libraries: list[str] = []
    links: list[tuple[str, str]] = []
    firmware: list[str] = []
    if version is not None:
        libraries, links = _libraries(root, version, dirs)
        fw = _under(root, f"{FIRMWARE_DIR}/{version}")
        firmware = [_container_path(root, p) for p in sorted(fw.glob("gsp*.bin")) if p.is_file()]
    binaries: list[str] = []
    for name in BINARIES:
        for d in BINARY_DIRS:
            if _under(root, f"{d}/{name}").is_file():
                binaries.append(f"{d}/{name}")
                break
    ipc: list[str] = []
    for socket in IPC_SOCKETS:
        for run in ("/run", "/var/run"):
            if _under(root, f"{run}/{socket}").exists():
                ipc.append(f"{run}/{socket}")
                break
    if _under(root, MPS_PIPE_DIR).is_dir():
        ipc.append(MPS_PIPE_DIR)
    dev_seen_at = seen_at if seen_at and dev_root == driver_root else dev_root
    dev = Path(dev_seen_at)
    return DriverFiles(
        driver_root=driver_root,
        dev_root=dev_root,
        dev_seen_at=dev_seen_at,
        version=version,
        control_nodes=tuple(p for p in CONTROL_DEVICE_PATHS if _under(dev, p).exists()),
        libraries=tuple(libraries),
        library_links=tuple(links),
        binaries=tuple(binaries),
        firmware=tuple(firmware),
        ipc=tuple(ipc),
    )


def read_mig_minors(proc_root: Path = Path("/proc")) -> MigMinors:
    """``<proc_root>/driver/nvidia-caps/mig-minors``; empty when there is none (no MIG-capable driver,
    simulated GPUs)."""
    try:
        text = (proc_root / MIG_MINORS).read_text(errors="replace")
    except OSError:
        return NO_MIG_MINORS
    return parse_mig_minors(text)


def wants_spec(config: AgentConfig) -> bool:
    """Whether the agent writes a spec: a CDI device-list strategy and a spec directory."""
    return bool(config.cdi_spec_dir) and any(s in _CDI for s in config.device_list_strategies)


def build_agent_spec(
    inventory: Inventory,
    config: AgentConfig,
    files: DriverFiles,
    *,
    simulated: bool = False,
    mounts: Sequence[tuple[str, str]] = (),
) -> tuple[dict[str, Any] | None, list[str]]:
    """The spec for every device the inventory advertises, named as Allocate names them
    (``<cdiKind>=<id>`` per ``deviceIDStrategy``; replicas are their GPU), and warnings. ``None``
    when no device can be declared.

    Real GPUs: each device's nodes that exist under the dev root; a device with none is left out (the
    runtime then refuses it by name instead of starting a container without its GPU), and the common
    ``NVIDIA_VISIBLE_DEVICES=void`` keeps an NVIDIA runtime hook from adding GPUs of its own, as in
    NVIDIA's spec. Simulated GPUs: no node is required; each device sets ``KUBEGPU_SIM_GPU_<n>`` to its
    UUID, which the stand-in ``nvidia-smi`` (in ``mounts``) lists when no NVIDIA_VISIBLE_DEVICES is set.
    """
    dev = Path(files.dev_seen_at or files.dev_root)
    nodes: dict[str, list[str]] = {}
    uuids: dict[str, str] = {}
    for resource in inventory.resources:
        for device in resource.devices:
            name = device.visible_id(config.device_id_strategy)
            uuids.setdefault(name, device.uuid)
            known = nodes.setdefault(name, [])
            known.extend(p for p in device.paths if p not in known)
    warnings: list[str] = []
    devices: list[CdiDevice] = []
    for n, (name, known) in enumerate(nodes.items()):
        if not is_cdi_device_name(name):
            warnings.append(f"CDI spec: {name} cannot be a CDI device name (a legacy MIG UUID?); left out")
            continue
        paths = [p for p in known if _under(dev, p).exists()]
        env = (f"KUBEGPU_SIM_GPU_{n}={uuids[name]}",) if simulated else ()
        if not paths and not env:
            warnings.append(
                f"CDI spec: no device node of {name} exists under {files.dev_root} "
                f"({', '.join(known) or 'none known'}); left out"
            )
            continue
        devices.append(CdiDevice(name=name, nodes=tuple(paths), env=env))
    if not devices:
        return None, warnings
    common = common_edits(files, env=() if simulated else ("NVIDIA_VISIBLE_DEVICES=void",), mounts=mounts)
    return agent_spec(config.cdi_kind, devices, common, dev_root=files.dev_root), warnings


class AgentCdiSpec:
    """The one spec file the agent owns; remembers what it wrote, so a rewrite happens only on change
    and a moved directory or kind removes the old file."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self._text: str | None = None

    def apply(self, config: AgentConfig, spec: dict[str, Any] | None) -> Path | None:
        """Write ``spec`` where ``config`` says (``None``, or a config that wants none: remove the file
        written before); returns the spec's path. ``OSError`` when it cannot be written."""
        if spec is None or not wants_spec(config):
            self.remove()
            return None
        path = Path(config.cdi_spec_dir) / agent_spec_file_name(config.cdi_kind)
        text = json.dumps(spec, indent=1) + "\n"
        if path == self.path and text == self._text and path.exists():
            return path
        write_atomically(path, text)
        if self.path is not None and self.path != path:
            self._unlink(self.path)
        self.path, self._text = path, text
        return path

    def remove(self) -> None:
        """Remove the file this object wrote, if any (a clean stop)."""
        if self.path is not None:
            self._unlink(self.path)
        self.path, self._text = None, None

    @staticmethod
    def _unlink(path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("cannot remove the agent's CDI spec", extra={"path": str(path), "error": str(exc)})
