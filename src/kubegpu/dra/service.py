"""``kubegpu dra serve``: the DRA driver process for one node, composed from its parts.

node source (node spec or NVML) -> devices (``model.dra``) -> ResourceSlices (``SliceKeeper``) and
the kubelet plugin (``DraServer`` over ``DraDriver``), until SIGTERM. On a simulated node with
``simulated_nvidia_smi`` the stand-in ``nvidia-smi`` is written under the plugin directory and every
prepared claim's CDI spec mounts it, as the device plugin does.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from kubegpu.deviceplugin import nvidia_smi
from kubegpu.dra.checkpoint import CHECKPOINT_NAME, CdiStore, Checkpoint
from kubegpu.dra.driver import ClaimReader, DraDriver
from kubegpu.dra.server import DraServer
from kubegpu.dra.slices import SliceApi, SliceKeeper, SlicePublisher
from kubegpu.errors import InputError
from kubegpu.model.dra import CDI_KIND, DRIVER_NAME, DraDevice, dra_devices
from kubegpu.model.node import Node

__all__ = ["DEFAULT_CDI_DIR", "DEFAULT_KUBELET_DIR", "DraOptions", "DraService", "load_node", "pcie_root"]

log = logging.getLogger(__name__)

DEFAULT_KUBELET_DIR = Path("/var/lib/kubelet")
DEFAULT_CDI_DIR = Path("/var/run/cdi")
SIM_TOOLS_DIR = "kubegpu-sim"


@dataclass(frozen=True, kw_only=True)
class DraOptions:
    node_name: str
    node_spec: str | None = None
    use_nvml: bool = False
    kubelet_dir: Path = DEFAULT_KUBELET_DIR
    cdi_dir: Path = DEFAULT_CDI_DIR
    driver: str = DRIVER_NAME
    kubeconfig: str | None = None
    simulated_nvidia_smi: bool = False
    resync_s: float = 10.0

    @property
    def plugin_dir(self) -> Path:
        return (self.kubelet_dir / "plugins" / self.driver).absolute()

    @property
    def registry_dir(self) -> Path:
        return (self.kubelet_dir / "plugins_registry").absolute()


def pcie_root(bus_id: str, sysfs: Path = Path("/sys")) -> str | None:
    """The PCIe root complex of a GPU (``pci0000:15``) from sysfs, as ``resource.kubernetes.io/pcieRoot``
    wants it; ``None`` when sysfs does not know the device (simulated GPUs)."""
    text = bus_id.lower()
    domain, _, rest = text.partition(":")
    bdf = f"{domain[-4:]}:{rest}" if rest else text
    try:
        real = (sysfs / "bus/pci/devices" / bdf).resolve(strict=True)
    except OSError:
        return None
    for part in real.parts:
        if part.startswith("pci") and ":" in part:
            return part
    return None


def load_node(options: DraOptions) -> tuple[Node, str | None]:
    """The node and, from NVML, the driver version."""
    if options.use_nvml:
        from kubegpu.sources.nvml import NvmlSource

        source = NvmlSource.open()
        try:
            return source.read_node(options.node_name), source.driver_version()
        finally:
            source.close()
    if options.node_spec is None:
        raise InputError("give a GPU source: --node-spec SOURCE (simulated GPUs) or --nvml (real GPUs)")
    from kubegpu.sources.spec import load_node as load_spec

    return load_spec(options.node_spec), None


class DraService:
    def __init__(
        self,
        options: DraOptions,
        *,
        node: Node,
        driver_version: str | None,
        api: SliceApi,
        claims: ClaimReader,
    ) -> None:
        self.options = options
        self.node = node
        roots = (
            {g.index: r for g in node.gpus if (r := pcie_root(g.pci_bus_id)) is not None}
            if options.use_nvml
            else {}
        )
        self._devices: Sequence[DraDevice] = dra_devices(
            node, driver_version=driver_version, pcie_roots=roots
        )
        mounts: tuple[tuple[str, str], ...] = ()
        if options.simulated_nvidia_smi and not options.use_nvml and node.gpus:
            path = nvidia_smi.install(node, options.plugin_dir / SIM_TOOLS_DIR)
            mounts = tuple((str(path), p) for p in nvidia_smi.CONTAINER_PATHS)
        self.driver = DraDriver(
            node_name=options.node_name,
            devices=self._devices,
            claims=claims,
            checkpoint=Checkpoint(options.plugin_dir / CHECKPOINT_NAME),
            cdi=CdiStore(options.cdi_dir, kind=CDI_KIND),
            driver=options.driver,
            mounts=mounts,
        )
        self.server = DraServer(
            self.driver,
            plugin_dir=options.plugin_dir,
            registry_dir=options.registry_dir,
            driver_name=options.driver,
        )
        self.slices = SliceKeeper(
            SlicePublisher(api, node_name=options.node_name, driver=options.driver),
            lambda: self._devices,
            interval_s=options.resync_s,
        )
        self._stop = threading.Event()

    @property
    def devices(self) -> Sequence[DraDevice]:
        return self._devices

    def start(self) -> None:
        self.server.start()
        self.slices.start()
        log.info(
            "DRA driver started",
            extra={
                "driver": self.options.driver,
                "node": self.options.node_name,
                "devices": len(self._devices),
            },
        )

    def stop(self) -> None:
        self._stop.set()
        self.slices.stop()
        self.server.stop()
        log.info("DRA driver stopped", extra={"driver": self.options.driver})

    def run_until_signalled(self) -> None:
        def on_term(signum: int, frame: FrameType | None) -> None:
            self._stop.set()

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)
        self.start()
        try:
            while not self._stop.wait(1.0):
                pass
        finally:
            self.stop()


def node_name_from_env() -> str | None:
    return os.environ.get("NODE_NAME") or None
