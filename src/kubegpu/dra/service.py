"""``kubegpu dra serve``: the DRA driver process for one node, composed from its parts.

node source (node spec or NVML) -> devices (``model.dra``) -> ResourceSlices (``SliceKeeper``) and
the kubelet plugin (``DraServer`` over ``DraDriver``), until SIGTERM. On a simulated node with
``simulated_nvidia_smi`` the stand-in ``nvidia-smi`` is written under the plugin directory and every
prepared claim's CDI spec mounts it, as the device plugin does.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from kubegpu.deviceplugin import nvidia_smi
from kubegpu.deviceplugin.cdi import find_driver_files, read_mig_minors
from kubegpu.dra.checkpoint import CHECKPOINT_NAME, CdiStore, Checkpoint
from kubegpu.dra.claimwatch import ClaimWatch, WatchApi
from kubegpu.dra.driver import ClaimReader, DraDriver
from kubegpu.dra.server import DeviceHealth, DraServer
from kubegpu.dra.slices import SliceApi, SliceKeeper, SlicePublisher
from kubegpu.echo import clip
from kubegpu.errors import InputError, UnknownGpuError
from kubegpu.health.policy import HealthPolicy
from kubegpu.health.tracker import HealthTracker
from kubegpu.model.cdi import common_edits
from kubegpu.model.dra import (
    CDI_KIND,
    DRIVER_NAME,
    DeviceOrder,
    DraDevice,
    DraGpus,
    dra_devices,
    order_devices,
)
from kubegpu.model.event import GpuEvent
from kubegpu.model.node import Node, sysfs_bus_id, uuid_aliases
from kubegpu.sources.faults import FaultFileFollower

__all__ = [
    "DEFAULT_CDI_DIR",
    "DEFAULT_KUBELET_DIR",
    "DraOptions",
    "DraService",
    "HealthSource",
    "NodeReading",
    "driver_edits",
    "load_node",
    "pcie_root",
]

log = logging.getLogger(__name__)

# watch_health(stop, emit): NVML's event loop (NvmlSource.watch_health), run on its own thread
HealthSource = Callable[[threading.Event, Callable[[GpuEvent], None]], None]

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
    fault_file: Path | None = None  # health events to inject, as for the agent (docs/agent.md)
    device_order: DeviceOrder = DeviceOrder.TOPOLOGY

    @property
    def plugin_dir(self) -> Path:
        return (self.kubelet_dir / "plugins" / self.driver).absolute()

    @property
    def registry_dir(self) -> Path:
        return (self.kubelet_dir / "plugins_registry").absolute()


def pcie_root(bus_id: str, sysfs: Path = Path("/sys")) -> str | None:
    """The PCIe root complex of a GPU (``pci0000:15``) from sysfs, as ``resource.kubernetes.io/pcieRoot``
    wants it; ``None`` when sysfs does not know the device (simulated GPUs)."""
    try:
        real = (sysfs / "bus/pci/devices" / sysfs_bus_id(bus_id)).resolve(strict=True)
    except OSError:
        return None
    for part in real.parts:
        if part.startswith("pci") and ":" in part:
            return part
    return None


@dataclass(frozen=True, kw_only=True)
class NodeReading:
    node: Node
    driver_version: str | None = None
    health_sources: tuple[HealthSource, ...] = ()  # NVML's event loop; none for simulated GPUs


def load_node(options: DraOptions) -> NodeReading:
    """The node; from NVML also the driver version and its health-event loop (NVML stays open)."""
    if options.use_nvml:
        from kubegpu.sources.nvml import NvmlSource

        source = NvmlSource.open()
        return NodeReading(
            node=source.read_node(options.node_name),
            driver_version=source.driver_version(),
            health_sources=(source.watch_health,),
        )
    if options.node_spec is None:
        raise InputError("give a GPU source: --node-spec SOURCE (simulated GPUs) or --nvml (real GPUs)")
    from kubegpu.sources.spec import load_node as load_spec

    return NodeReading(node=load_spec(options.node_spec))


def driver_edits(
    node: Node, devices: Sequence[DraDevice], *, driver_root: str = "/", proc_root: Path = Path("/proc")
) -> tuple[dict[str, tuple[str, ...]], dict[str, Any]]:
    """What claims' CDI specs carry on real GPUs besides each GPU's ``/dev/nvidiaN``: each MIG device's
    nvidia-caps nodes (by device name) and the common edits, as in the agent's spec
    (``deviceplugin/cdi.py``): control nodes, the driver's libraries, binaries, firmware, IPC sockets."""
    minors = read_mig_minors(proc_root)
    gi = {str(m.uuid): (g.index, m.gi_index) for g in node.gpus for m in g.mig_instances}
    nodes = {d.name: minors.caps_paths(*gi[d.uuid]) for d in devices if d.uuid in gi}
    return nodes, common_edits(find_driver_files(driver_root, driver_root))


class DraService:
    def __init__(
        self,
        options: DraOptions,
        *,
        node: Node,
        driver_version: str | None,
        api: SliceApi,
        claims: ClaimReader,
        allocations: WatchApi | None = None,
        health: HealthPolicy | None = None,
        health_sources: Sequence[HealthSource] = (),
        gpus: DraGpus | None = None,
    ) -> None:
        self.options = options
        self.node = node
        roots = (
            {g.index: r for g in node.gpus if (r := pcie_root(g.pci_bus_id)) is not None}
            if options.use_nvml
            else {}
        )
        served = gpus or DraGpus(all=True)
        missing = sorted(i for i in served.indexes if not any(g.index == i for g in node.gpus))
        if missing:
            raise InputError(
                f"kubegpu.dra.gpus: GPU {', '.join(map(str, missing))} is not on node {node.name} "
                f"(GPUs {', '.join(str(g.index) for g in node.gpus) or 'none'})"
            )
        self._all_devices: Sequence[DraDevice] = dra_devices(
            node, driver_version=driver_version, pcie_roots=roots, include=lambda g: served.serves(g.index)
        )
        aliases = uuid_aliases(node)
        self.tracker = HealthTracker(
            gpu_count=len(node.gpus), aliases=aliases, policy=health or HealthPolicy()
        )
        self._devices: Sequence[DraDevice] = self._healthy()
        self._health_watchers: list[threading.Thread] = []
        self._followers: list[FaultFileFollower] = []
        self.health_sources = list(health_sources)
        mounts: tuple[tuple[str, str], ...] = ()
        if options.simulated_nvidia_smi and not options.use_nvml and node.gpus:
            path = nvidia_smi.install(node, options.plugin_dir / SIM_TOOLS_DIR)
            mounts = tuple((str(path), p) for p in nvidia_smi.CONTAINER_PATHS)
        caps_nodes, common = driver_edits(node, self._all_devices) if options.use_nvml else ({}, None)
        self.driver = DraDriver(
            node_name=options.node_name,
            devices=self._devices,
            claims=claims,
            checkpoint=Checkpoint(options.plugin_dir / CHECKPOINT_NAME),
            cdi=CdiStore(options.cdi_dir, kind=CDI_KIND),
            driver=options.driver,
            mounts=mounts,
            on_change=self._claims_changed,
            gpu_nodes=options.use_nvml,
            device_nodes=caps_nodes,
            common_edits=common,
        )
        # topology order reads the pool's allocations: one list, then a watch (issue 57; docs/dra.md)
        self._claim_watch = (
            ClaimWatch(
                allocations, pool=options.node_name, driver=options.driver, on_change=self._claims_changed
            )
            if allocations is not None and options.device_order is DeviceOrder.TOPOLOGY
            else None
        )
        self.server = DraServer(
            self.driver,
            plugin_dir=options.plugin_dir,
            registry_dir=options.registry_dir,
            driver_name=options.driver,
            health=self,
        )
        self.slices = SliceKeeper(
            SlicePublisher(api, node_name=options.node_name, driver=options.driver),
            self._ordered,
            interval_s=options.resync_s,
        )
        self._stop = threading.Event()

    @property
    def devices(self) -> Sequence[DraDevice]:
        return self._devices

    def _ordered(self) -> Sequence[DraDevice]:
        """The published devices in slice order; ``topology`` order reads the pool's allocations."""
        devices = self._devices
        if self.options.device_order is DeviceOrder.INDEX or self._claim_watch is None:
            return order_devices(devices, (), DeviceOrder.INDEX)
        return order_devices(devices, self._claim_watch.allocated(), self.options.device_order)

    def _claims_changed(self) -> None:
        """A claim was prepared or unprepared: the allocations changed, so may the best device order."""
        if self.options.device_order is DeviceOrder.TOPOLOGY:
            self.slices.poke()

    # -- HealthFeed: what kubelet's DRAResourceHealth stream reports per device ------------------------

    def health(self) -> tuple[int, Sequence[DeviceHealth]]:
        version = self.tracker.version
        out = []
        for d in self._all_devices:
            status = self.tracker.status(d.gpu_index)
            out.append(DeviceHealth(device=d.name, healthy=status.healthy, message=status.reason))
        return version, out

    def wait_for_change(self, seen: int, timeout: float) -> int:
        return self.tracker.wait_for_change(seen, timeout)

    def wake(self) -> None:
        self.tracker.wake()

    def _healthy(self) -> Sequence[DraDevice]:
        return tuple(d for d in self._all_devices if self.tracker.is_healthy(d.gpu_index))

    def apply_event(self, observed: GpuEvent) -> None:
        """A health event from NVML or the fault file; a GPU that turns unhealthy leaves the slice."""
        event = dataclasses.replace(observed, detail=clip(observed.detail))
        try:
            self.tracker.apply(event)
        except UnknownGpuError as exc:
            log.error("health event for an unknown GPU ignored", extra={"error": str(exc)})

    def _follow_health(self) -> None:
        """Republish on every health change (and let quiet GPUs recover, per the policy)."""
        seen = self.tracker.version
        while not self._stop.is_set():
            seen_now = self.tracker.wait_for_change(seen, 1.0)
            self.tracker.recover_quiet()
            seen_now = self.tracker.version
            if seen_now == seen:
                continue
            seen = seen_now
            devices = self._healthy()
            self._devices = devices
            self.driver.set_devices(devices)
            self.slices.poke()
            log.info(
                "published devices changed with GPU health",
                extra={"devices": len(devices), "withheld": len(self._all_devices) - len(devices)},
            )

    def start(self) -> None:
        self.server.start()
        if self._claim_watch is not None:
            self._claim_watch.start()
        self.slices.start()
        watcher = threading.Thread(target=self._follow_health, name="dra-health", daemon=True)
        watcher.start()
        self._health_watchers.append(watcher)
        if self.options.fault_file is not None:
            follower = FaultFileFollower(self.options.fault_file, self.apply_event)
            follower.start()
            self._followers.append(follower)
        for source in self.health_sources:
            t = threading.Thread(
                target=source, args=(self._stop, self.apply_event), name="dra-nvml", daemon=True
            )
            t.start()
            self._health_watchers.append(t)
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
        self.tracker.wake()
        for follower in self._followers:
            follower.stop()
        if self._claim_watch is not None:
            self._claim_watch.stop()
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
