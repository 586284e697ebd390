"""The node agent: source -> inventory -> one device plugin server per resource, kept registered.

``Agent`` composes the pieces and owns their lifecycles:

1. reads the node from a node spec (``builtin:…`` or YAML) or from NVML;
2. resolves the configuration (CLI > env > file) and builds the inventory;
3. serves every resource on a fresh socket, then registers it with kubelet, retrying with backoff
   while kubelet is absent or refuses;
4. watches for kubelet restarts (a recreated ``kubelet.sock``: a new device, inode or ctime, since
   ext4 reuses inode numbers; or a plugin socket that vanished) and then serves again on fresh
   sockets and re-registers, without restarting the process; a restart that fails is retried with
   backoff, one log line per failure;
5. feeds health events (NVML, ``--fault-file``) into one ``HealthTracker`` that all servers read;
6. ``reload()`` (SIGHUP) re-reads the configuration, all or nothing: an invalid one is logged and the
   running one kept; servers whose resource changed are started first, then switched to, then the old
   ones stopped; a server whose resource did not change keeps its socket and its streams. If a new
   server cannot start, nothing changes;
7. ``stop()`` (SIGTERM) wins over everything: no server starts once it is asked for, an in-flight
   registration is abandoned, every server stops and its socket is removed, within a few seconds;
8. with ``failOnInitError=false`` a node whose GPUs cannot be read (no driver, NVML missing) keeps the
   agent alive serving nothing; it logs why and retries every ``init_retry_s`` until the GPUs appear,
   then serves them;
9. a changed config file is picked up like SIGHUP: its resolved path, inode, size and mtime are
   watched (kubelet updates a mounted ConfigMap by swapping a ``..data`` symlink), and a reload runs
   when its content differs from the one last loaded;
10. in simulated mode (``--node-spec``) with ``--simulated-nvidia-smi`` it writes a stand-in
    ``nvidia-smi`` script into ``<plugin dir>/kubegpu-sim/`` and Allocate mounts it into containers
    (``deviceplugin/nvidia_smi.py``); real mode never does;
11. ``--health-address`` serves ``/healthz`` and ``/readyz`` for kubelet's probes (``probes.py``);
12. ``--metrics-address`` serves dcgm-exporter-compatible ``/metrics`` (``kubegpu.metrics``, imported
    only then): NVML or the load model for values, kubelet's PodResources for pod labels, and the
    agent's own RPC latencies, registrations and health transitions through small hooks.
13. with ``--node-name`` (NODE_NAME) and API access (``--kubeconfig``, or the pod's service account) it
    keeps its Node's GPU labels and quarantines the node on a fatal GPU failure (``kubegpu.node``,
    docs/node.md); without them both are off, with one log line, and the agent works as before.
    The quarantine an earlier run left on the Node is read back before health events flow.
14. with ``kubegpu.migManager.enabled`` (and the same node name and API access) the MIG manager
    (``kubegpu.node.migmanager``) follows the node label ``nvidia.com/mig.config``; a repartition it
    applies is served through ``reload(node=...)``, the same all-or-nothing swap as a config reload,
    so the new MIG resources reach kubelet without a restart (docs/mig.md, "The MIG manager").
15. with ``kubegpu.fractional`` it also serves ``kubegpu.io/gpu-milli`` (1000 devices per whole GPU)
    and, with the same node name and API access, hands each share's container the GPU that
    ``kubegpu extender`` chose for its pod (``deviceplugin/shares.py``, docs/extender.md); the hand-outs
    are kept in ``<plugin dir>/kubegpu-state/shares.json``. The node labels' apply also publishes the
    GPUs' UUIDs (annotation ``kubegpu.io/gpu-uuids``), fractional or not.
16. under ``cdi-cri`` / ``cdi-annotations`` it writes the CDI spec of its devices into
    ``kubegpu.cdiSpecDir`` before serving, rewrites it when a reload changes it and removes it on stop
    (``deviceplugin/cdi.py``; docs/agent.md "The CDI spec"); MIG devices get their nvidia-caps nodes
    from ``/proc/driver/nvidia-caps/mig-minors`` (``KUBEGPU_PROC_ROOT`` stands for /proc in tests).

The plugin directory is made absolute once, when the agent is built (gRPC's ``unix://`` needs it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from kubegpu.backoff import Backoff, describe
from kubegpu.deviceplugin import nvidia_smi
from kubegpu.deviceplugin.cdi import (
    AgentCdiSpec,
    build_agent_spec,
    find_driver_files,
    read_mig_minors,
    wants_spec,
)
from kubegpu.deviceplugin.config import AgentConfig, SharingKind, load_config
from kubegpu.deviceplugin.inventory import GPU_RESOURCE, Inventory, Resource, ResourceKind, build_inventory
from kubegpu.deviceplugin.kubelet_socket import SocketIdentity, socket_identity
from kubegpu.deviceplugin.listsize import check_inventory
from kubegpu.deviceplugin.mps import DaemonPlan, daemon_plans
from kubegpu.deviceplugin.mps_daemon import MpsSupervisor, find_control
from kubegpu.deviceplugin.plugin import ResourcePlugin
from kubegpu.deviceplugin.response import MountSpec
from kubegpu.deviceplugin.server import REGISTER_TIMEOUT_S, PluginServer, RpcObserver, register
from kubegpu.deviceplugin.sockets import make_dirs, too_long
from kubegpu.echo import clip
from kubegpu.errors import InputError, KubegpuError, RegistrationFailed, SourceError, UnknownGpuError
from kubegpu.health.tracker import HealthTracker
from kubegpu.model.cdi import MigMinors
from kubegpu.model.event import GpuEvent
from kubegpu.model.migplan import MigBackend
from kubegpu.model.node import Node, uuid_aliases
from kubegpu.node.labels import DriverVersions, LabelInputs, MigMode, SharingMode, node_labels
from kubegpu.podresources.client import DEFAULT_POD_RESOURCES_SOCKET
from kubegpu.probes import ProbeServer
from kubegpu.sources.faults import FaultFileFollower

if TYPE_CHECKING:
    from kubegpu.deviceplugin.shares import ShareBroker
    from kubegpu.metrics.exporter import MetricsExporter
    from kubegpu.node.hygiene import NodeHygiene
    from kubegpu.node.migmanager import MigManager
    from kubegpu.sources.migsim import SimulatedMigBackend
    from kubegpu.sources.nvml import NvmlSource

__all__ = ["DEFAULT_DEVICE_PLUGIN_DIR", "Agent", "AgentOptions", "label_inputs", "labels_for"]

log = logging.getLogger(__name__)

DEFAULT_DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET_NAME = "kubelet.sock"
KUBELET_MISSING_EVERY_S = 60.0  # how often a missing kubelet.sock is said again
SIM_TOOLS_DIR = "kubegpu-sim"  # under the plugin dir: the simulated nvidia-smi
STATE_DIR = "kubegpu-state"  # under the plugin dir: the share hand-outs (kubegpu.fractional)
INIT_RETRY_S = 30.0  # NVIDIA's plugin retries a failed start after 30 s
STOP_BUDGET_S = 3.0  # stop() to exit, whatever kubelet does (docs/agent.md promises < 5 s)


@dataclass(frozen=True, kw_only=True)
class AgentOptions:
    """What the command line gives the agent; ``kubelet_socket`` "" disables registration."""

    node_spec: str | None = None
    use_nvml: bool = False
    device_plugin_dir: Path = DEFAULT_DEVICE_PLUGIN_DIR
    kubelet_socket: str = KUBELET_SOCKET_NAME
    config_file: Path | None = None
    cli_overrides: Mapping[str, object] = field(default_factory=dict)
    fault_file: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    watch_interval_s: float = 0.1
    max_backoff_s: float = 5.0
    register_timeout_s: float = REGISTER_TIMEOUT_S
    health_address: str | None = None  # HOST:PORT for /healthz and /readyz; None: no endpoint
    init_retry_s: float = INIT_RETRY_S
    simulated_nvidia_smi: bool = False  # --node-spec only: mount a stand-in nvidia-smi into containers
    node_name: str | None = None  # the Node the labels and the quarantine go to; None: both off
    kubeconfig: str | None = None  # None: the pod's service account (in a pod), else ~/.kube/config
    mps_check_s: float = 1.0  # how often the MPS control daemons are checked (and first restarted)

    @property
    def kubelet_socket_path(self) -> Path | None:
        if not self.kubelet_socket:
            return None
        path = Path(self.kubelet_socket)
        return path if path.is_absolute() else self.device_plugin_dir / path


@dataclass(kw_only=True)
class _Slot:
    server: PluginServer
    registered_with: SocketIdentity | None = None  # the kubelet.sock this server registered with
    next_attempt: float = 0.0
    backoff_s: float = 0.1
    restart_at: float = 0.0  # a failed restart is retried from then
    restart_backoff: Backoff | None = None


class Agent:
    """One node's device plugin; thread-safe start/stop/reload."""

    def __init__(self, options: AgentOptions, *, clock: Callable[[], float] = time.monotonic) -> None:
        # Resolved once, against the directory the agent was started in: every socket path it binds
        # or dials (its own and kubelet's) is then absolute, as gRPC's unix:// needs.
        self.options = dataclasses.replace(options, device_plugin_dir=options.device_plugin_dir.absolute())
        self._clock = clock
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._slots: list[_Slot] = []
        self._supervisor: threading.Thread | None = None
        self._fault_follower: FaultFileFollower | None = None
        self._nvml_stop = threading.Event()
        self._nvml_thread: threading.Thread | None = None
        self._nvml_source: NvmlSource | None = None
        self.node: Node | None = None
        self.config: AgentConfig | None = None
        self.inventory: Inventory | None = None
        self.tracker: HealthTracker | None = None
        self.init_error: str | None = None  # why the GPUs could not be read (failOnInitError=false)
        self._init_failures = 0
        self._next_init_at = 0.0
        self._config_seen: tuple[object, ...] | None = None  # identity of the config file last loaded
        self._config_digest: str | None = None
        self._config_pending: tuple[object, ...] | None = None  # a new identity seen once, not yet loaded
        self._sim_mounts: tuple[MountSpec, ...] = ()
        self._cdi = AgentCdiSpec()  # the CDI spec of the agent's devices (deviceplugin/cdi.py)
        self._probes: ProbeServer | None = None
        self._metrics: MetricsExporter | None = None
        self._hygiene: NodeHygiene | None = None
        self._mig: MigManager | None = None
        self._reload_lock = threading.Lock()  # a config reload and a MIG repartition never interleave
        # when kubelet's registration socket was last said to be missing (None: present, or not waited on)
        self._kubelet_missing_told: float | None = None
        self._label_timestamp = int(time.time())  # GFD's gfd.timestamp: once per (re)start
        self._driver: DriverVersions | None = None
        self._shares: ShareBroker | None = None
        self._shares_tried = False
        self._mps: MpsSupervisor | None = None  # the MPS control daemons (deviceplugin/mps_daemon.py)

    # -- building ---------------------------------------------------------------------------------

    def _config_identity(self) -> tuple[object, ...] | None:
        path = self.options.config_file
        if path is None:
            return None
        try:
            real = os.path.realpath(path)
            st = os.stat(real)
        except OSError:
            return None
        return (real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def _config_content_digest(self) -> str | None:
        path = self.options.config_file
        if path is None:
            return None
        try:
            return hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            return None

    def _load_config(self) -> AgentConfig:
        identity, digest = self._config_identity(), self._config_content_digest()
        config = load_config(self.options.config_file, env=self.options.env, cli=self.options.cli_overrides)
        self._config_seen, self._config_digest = identity, digest
        return config

    def _load_node(self) -> Node:
        if self.options.use_nvml:
            from kubegpu.sources.nvml import NvmlSource

            source = NvmlSource.open()
            self._nvml_source = source
            return source.read_node(os.environ.get("NODE_NAME", os.uname().nodename))
        if self.options.node_spec is None:
            raise InputError("give a GPU source: --node-spec SOURCE (simulated GPUs) or --nvml (real GPUs)")
        from kubegpu.sources.spec import load_node

        return load_node(self.options.node_spec)

    def _plugin(
        self, resource: Resource, inventory: Inventory, config: AgentConfig, tracker: HealthTracker
    ) -> ResourcePlugin:
        wants_shares = config.fractional and (
            resource.kind is ResourceKind.MILLI or resource.name == GPU_RESOURCE
        )
        share_memory = None
        if config.mps_shares and resource.kind is ResourceKind.MILLI:
            share_memory = {g.index: g.memory_mib for g in inventory.node.gpus}
        return ResourcePlugin(
            resource=resource,
            topology=inventory.node.topology,
            config=config,
            tracker=tracker,
            extra_mounts=self._sim_mounts,
            shares=self._share_broker() if wants_shares else None,
            mps=self._mps,
            share_memory_mib=share_memory,
        )

    def _mps_daemons(self, plans: tuple[DaemonPlan, ...], config: AgentConfig) -> None:
        """Build the MPS supervisor the first time ``plans`` ask for a daemon (``ConfigError`` when
        ``nvidia-cuda-mps-control`` cannot be found), then start what ``plans`` need that does not run:
        before any server advertises their resources."""
        if not plans:
            return
        if not self.options.use_nvml and not config.mps_control:
            # simulated GPUs have no MPS to run: a daemon only when one is named (a stand-in, in tests)
            if self._mps is None:
                log.info("simulated GPUs: no MPS control daemon runs (kubegpu.mps.control names one to run)")
            return
        try:  # every MPS container mounts <mpsRoot>/shm (response.py): it must exist on the host
            os.makedirs(os.path.join(config.mps_root, "shm"), mode=0o755, exist_ok=True)
        except OSError as exc:
            raise InputError(
                f"flags.mpsRoot {config.mps_root}: cannot create shm in it: {exc.strerror or exc}"
            ) from exc
        if self._mps is None:
            binary = find_control(config, self.options.env.get("PATH") or os.environ.get("PATH"))

            def wake() -> None:
                tracker = self.tracker
                if tracker is not None:
                    tracker.wake()  # every ListAndWatch looks again at once

            self._mps = MpsSupervisor(
                binary,
                base_env=os.environ,
                check_s=self.options.mps_check_s,
                max_backoff_s=self.options.max_backoff_s,
                on_change=wake,
            )
            log.info("MPS control daemons supervised", extra={"control": binary})
        self._mps.apply(plans)
        self._mps.start()  # its checks (and restarts); once only, also when a reload brings MPS first

    def _share_broker(self) -> ShareBroker | None:
        """The shares' broker (built once, on the first resource that needs it); None, with one log
        line, without a node name or API access: Allocate of kubegpu.io/gpu-milli then says why."""
        if self._shares is not None or self._shares_tried:
            return self._shares
        self._shares_tried = True
        name = self.options.node_name
        if not name:
            log.warning("kubegpu.fractional: shares cannot be handed out without a node name (--node-name)")
            return None
        from kubegpu.deviceplugin.shares import LEDGER_NAME, ShareBroker, ShareLedger
        from kubegpu.kubeapi import ApiObject, KubeApi

        try:
            api = KubeApi(kubeconfig=self.options.kubeconfig)
        except KubegpuError as exc:
            log.warning(
                "kubegpu.fractional: shares cannot be handed out: no API access", extra={"error": str(exc)}
            )
            return None
        selector = f"spec.nodeName={name}"

        def list_pods() -> list[ApiObject]:
            return api.list_objects("/api/v1/pods", field_selector=selector)[0]

        def current_node() -> Node:
            assert self.node is not None
            return self.node

        ledger = ShareLedger(self.options.device_plugin_dir / STATE_DIR / LEDGER_NAME)
        self._shares = ShareBroker(node_name=name, list_pods=list_pods, ledger=ledger, node=current_node)
        log.info("kubegpu.fractional: shares on", extra={"node": name, "handouts": len(ledger.handouts())})
        return self._shares

    @staticmethod
    def _aliases(node: Node) -> dict[str, int]:
        return uuid_aliases(node)

    @classmethod
    def _tracker(cls, node: Node, config: AgentConfig) -> HealthTracker:
        return HealthTracker(gpu_count=len(node.gpus), aliases=cls._aliases(node), policy=config.health)

    def _install_sim_tools(self, node: Node) -> None:
        """Simulated mode: (re)write the stand-in nvidia-smi and mount it into every allocation."""
        if not self.options.simulated_nvidia_smi or self.options.node_spec is None or not node.gpus:
            return
        path = nvidia_smi.install(node, self.options.device_plugin_dir / SIM_TOOLS_DIR)
        self._sim_mounts = tuple(
            MountSpec(container_path=p, host_path=str(path), read_only=True)
            for p in nvidia_smi.CONTAINER_PATHS
        )

    def _mig_minors(self) -> MigMinors:
        """The nvidia-caps minors of MIG devices; ``KUBEGPU_PROC_ROOT`` stands for /proc (tests)."""
        return read_mig_minors(Path(self.options.env.get("KUBEGPU_PROC_ROOT") or "/proc"))

    def _write_cdi_spec(self, inventory: Inventory, config: AgentConfig) -> None:
        """Write (or remove) the CDI spec of ``inventory``'s devices as ``config`` says; ``OSError``."""
        spec = None
        if wants_spec(config):
            files = find_driver_files(
                config.nvidia_driver_root, config.nvidia_dev_root, seen_at=config.container_driver_root
            )
            spec, warnings = build_agent_spec(
                inventory,
                config,
                files,
                simulated=not self.options.use_nvml,
                mounts=[(m.host_path, m.container_path) for m in self._sim_mounts],
            )
            for warning in warnings:
                log.warning(warning)
        path = self._cdi.apply(config, spec)
        if path is not None:
            log.info("CDI spec written", extra={"path": str(path), "kind": config.cdi_kind})

    def _server(self, plugin: ResourcePlugin) -> PluginServer:
        observer: RpcObserver | None = self._metrics.observe_rpc if self._metrics is not None else None
        return PluginServer(plugin, self.options.device_plugin_dir, observer=observer)

    def _plugins(self, inventory: Inventory, config: AgentConfig, tracker: HealthTracker) -> list[_Slot]:
        return [
            _Slot(server=self._server(self._plugin(r, inventory, config, tracker)))
            for r in inventory.resources
        ]

    def _served(self, resource: str) -> bool:
        """Whether a PodResources entry is one of the resources this agent serves (or NVIDIA's names)."""
        inventory = self.inventory
        names = {str(r.name) for r in inventory.resources} if inventory is not None else set()
        return resource in names or resource == "nvidia.com/gpu" or resource.startswith("nvidia.com/mig-")

    def _build_metrics(self, config: AgentConfig) -> MetricsExporter | None:
        """The metrics exporter when ``--metrics-address`` is given (not started yet), else ``None``."""
        if not config.metrics_address:
            return None
        from kubegpu.metrics.exporter import MetricsExporter
        from kubegpu.metrics.ledger import EventLedger
        from kubegpu.metrics.sampler import GpuSampler, NvmlSampler, SimulatedSampler
        from kubegpu.podresources.client import PodResourcesClient

        ledger = EventLedger()
        sampler: GpuSampler = (
            NvmlSampler(lambda: self._nvml_source) if self.options.use_nvml else SimulatedSampler(ledger)
        )

        holders = None
        if config.pod_resources_socket:
            holders = PodResourcesClient(Path(config.pod_resources_socket), wanted=self._served)
        return MetricsExporter(
            address=config.metrics_address,
            node=lambda: self.node,
            sampler=sampler,
            holders=holders,
            hostname=self.options.env.get("NODE_NAME") or os.uname().nodename,
            ledger=ledger,
        )

    def start(self) -> None:
        """Load everything (raising ``KubegpuError`` on bad input, with nothing started), then serve."""
        config = self._load_config()
        try:
            node = self._load_node()
        except SourceError as exc:
            if config.fail_on_init_error:
                raise
            self._init_failed(exc)
            node = Node(name=os.uname().nodename, gpus=(), topology=None)
        node = self._restore_mig_layout(node, config)
        inventory = build_inventory(node, config, mig_minors=self._mig_minors())
        check_inventory(inventory)  # kubelet reads at most 4 MiB of ListAndWatch (issue 57)
        tracker = self._tracker(node, config)
        fault_file = self.options.fault_file
        if fault_file is not None and (fault_file.is_dir() or not fault_file.absolute().parent.is_dir()):
            what = "is a directory" if fault_file.is_dir() else "its directory does not exist"
            raise InputError(
                f"--fault-file {fault_file}: {what}; give a file of JSON lines (it may appear later)"
            )
        plugin_dir = self.options.device_plugin_dir
        problem = too_long(plugin_dir, what="--device-plugin-dir")
        if problem is not None:
            raise InputError(problem)
        try:
            make_dirs(plugin_dir)  # 0750 whatever the umask; an existing one (kubelet's) is left alone
        except OSError as exc:
            raise InputError(
                f"--device-plugin-dir {plugin_dir}: cannot create it: {exc.strerror or exc}"
            ) from exc
        for warning in (*config.warnings, *inventory.warnings):
            log.warning(warning)
        try:
            self._install_sim_tools(node)
        except OSError as exc:
            raise InputError(
                f"--device-plugin-dir {plugin_dir}: cannot write the simulated nvidia-smi: "
                f"{exc.strerror or exc}"
            ) from exc
        try:
            self._write_cdi_spec(inventory, config)  # before any Allocate can name its devices
        except OSError as exc:
            raise InputError(
                f"kubegpu.cdiSpecDir {config.cdi_spec_dir}: cannot write the CDI spec that "
                f"{','.join(s.value for s in config.device_list_strategies)} needs: {exc.strerror or exc} "
                '(mount the host\'s CDI directory, or set kubegpu.cdiSpecDir "" when another tool '
                "writes the spec of kubegpu.cdiKind)"
            ) from exc
        self.tracker = tracker
        try:
            self._mps_daemons(daemon_plans(inventory, config), config)  # before anything is advertised
        except BaseException:
            self._cdi.remove()
            raise
        self._metrics = self._build_metrics(config)
        with self._lock:
            self.node, self.config, self.inventory, self.tracker = node, config, inventory, tracker
            self._slots = self._plugins(inventory, config, tracker)
            try:
                for slot in self._slots:
                    if self._stop.is_set():
                        break  # SIGTERM during start: stop() follows and stops what did start
                    slot.server.start()
            except BaseException:
                for slot in self._slots:
                    slot.server.stop(grace_s=0)
                self._cdi.remove()
                if self._mps is not None:
                    self._mps.stop()
                raise
        log.info(
            "agent started",
            extra={
                "node": node.name,
                "gpus": len(node.gpus),
                "resources": {str(r.name): len(r.devices) for r in inventory.resources},
            },
        )
        self._start_hygiene()
        self._follow_mig_settings(config)
        if self.options.fault_file is not None:
            self._fault_follower = FaultFileFollower(self.options.fault_file, self.apply_event)
            self._fault_follower.start()
        self._start_nvml_watch()
        self._supervisor = threading.Thread(target=self._supervise, name="registration", daemon=True)
        self._supervisor.start()
        if self.options.health_address:
            probes = ProbeServer(self.options.health_address, healthz=self.healthz, readyz=self.readyz)
            try:
                probes.start()
            except BaseException:
                self.stop()
                raise
            self._probes = probes
        if self._metrics is not None:
            try:
                self._metrics.start()
            except BaseException:
                self.stop()
                raise

    # -- the Node object: labels and quarantine (kubegpu.node) ------------------------------------

    def _start_hygiene(self) -> None:
        """Start the node's labels and quarantine when a node name and API access are given; read the
        quarantine an earlier run recorded back into the tracker first (before health events flow)."""
        config, node, tracker = self.config, self.node, self.tracker
        assert config is not None and node is not None and tracker is not None
        if self._hygiene is not None or not (
            config.node_labels or config.quarantine.enabled or config.fractional
        ):
            return
        if not node.gpus:
            return  # nothing to label or quarantine (failOnInitError=false: reload() comes back here)
        name = self.options.node_name
        if not name:
            log.info("node labels and quarantine off: no node name (give --node-name or NODE_NAME)")
            return
        from kubegpu.kubeapi import KubeApi
        from kubegpu.node.hygiene import NodeHygiene
        from kubegpu.podresources.client import PodResourcesClient

        try:
            api = KubeApi(kubeconfig=self.options.kubeconfig)
        except KubegpuError as exc:
            log.info("node labels and quarantine off: no API server access", extra={"error": str(exc)})
            return
        pods = PodResourcesClient(
            Path(config.pod_resources_socket or DEFAULT_POD_RESOURCES_SOCKET), wanted=self._served
        )
        hygiene = NodeHygiene(
            api,
            node_name=name,
            tracker=tracker,
            uuids=[str(g.uuid) for g in node.gpus],
            index_of=self._aliases(node),
            holders=pods.holders,
            quarantine=config.quarantine,
            labels_enabled=config.node_labels,
        )
        try:
            hygiene.read_back()
        except KubegpuError as exc:
            log.warning("could not read back the node's quarantine", extra={"error": describe(exc)})
        if self._nvml_source is not None and self._driver is None:
            driver, cuda = self._nvml_source.versions()
            self._driver = DriverVersions(driver=driver, cuda=cuda) if driver else None
        hygiene.set_labels(labels_for(node, config, versions=self._driver, timestamp=self._label_timestamp))
        hygiene.start()
        self._hygiene = hygiene
        log.info(
            "node labels and quarantine on",
            extra={"node": name, "labels": config.node_labels, "quarantine": config.quarantine.enabled},
        )

    # -- the MIG manager (kubegpu.node.migmanager) ------------------------------------------------

    def _simulated_mig_backend(self, config: AgentConfig) -> SimulatedMigBackend:
        from kubegpu.sources.migsim import SimulatedMigBackend

        state = config.mig_manager.state_file
        return SimulatedMigBackend(Path(state) if state else None)

    def _restore_mig_layout(self, node: Node, config: AgentConfig) -> Node:
        """Simulated GPUs with the MIG manager's state file: the layout applied before a restart."""
        if not config.mig_manager.enabled or self.options.use_nvml or not config.mig_manager.state_file:
            return node
        return self._simulated_mig_backend(config).restore(node)

    def _follow_mig_settings(self, config: AgentConfig) -> None:
        """Start, re-configure or stop the MIG manager as ``kubegpu.migManager`` says."""
        settings = config.mig_manager
        if self._mig is not None:
            if settings.enabled:
                self._mig.set_settings(settings)
            else:
                self._mig.stop()
                self._mig = None
                log.info("MIG manager off (kubegpu.migManager.enabled: false)")
            return
        node = self.node
        if not settings.enabled or node is None or not node.gpus:
            return
        name = self.options.node_name
        if not name:
            log.warning("MIG manager off: no node name (give --node-name or NODE_NAME)")
            return
        from kubegpu.kubeapi import KubeApi
        from kubegpu.node.migmanager import MigManager
        from kubegpu.podresources.client import PodResourcesClient

        try:
            api = KubeApi(kubeconfig=self.options.kubeconfig)
        except KubegpuError as exc:
            log.warning("MIG manager off: no API server access", extra={"error": str(exc)})
            return
        backend: MigBackend
        device_ids: dict[int, int] | None = None
        if self._nvml_source is not None:
            from kubegpu.sources.nvmlmig import NvmlMigBackend

            backend = NvmlMigBackend(self._nvml_source)
            device_ids = self._nvml_source.device_ids()
        else:
            backend = self._simulated_mig_backend(config)
        pods = PodResourcesClient(
            Path(config.pod_resources_socket or DEFAULT_POD_RESOURCES_SOCKET), wanted=self._served
        )

        def current_node() -> Node:
            assert self.node is not None
            return self.node

        self._mig = MigManager(
            api,
            node_name=name,
            settings=settings,
            backend=backend,
            node=current_node,
            index_of=lambda: self._aliases(current_node()),
            holders=pods.holders,
            on_applied=lambda new: self.reload(node=new),
            can_serve=self._can_serve,
            device_ids=device_ids,
        )
        self._mig.start()
        log.info(
            "MIG manager on",
            extra={"node": name, "configFile": settings.config_file, "drain": settings.drain},
        )

    def _can_serve(self, node: Node) -> str | None:
        """Why the running config could not advertise ``node`` (checked before a repartition), or None."""
        config = self.config
        if config is None:
            return "the agent has no config yet"
        try:
            check_inventory(build_inventory(node, config))
        except KubegpuError as exc:
            return str(exc)
        return None

    def _start_nvml_watch(self) -> None:
        if self._nvml_source is not None and self._nvml_thread is None:
            source = self._nvml_source
            self._nvml_thread = threading.Thread(
                target=source.watch_health, args=(self._nvml_stop, self.apply_event), name="nvml", daemon=True
            )
            self._nvml_thread.start()

    # -- failOnInitError=false: retry reading the GPUs --------------------------------------------

    def _init_failed(self, exc: SourceError) -> None:
        self._init_failures += 1
        self.init_error = str(exc)
        self._next_init_at = self._clock() + self.options.init_retry_s
        log.error(
            "no GPUs readable; serving nothing and retrying (failOnInitError=false)",
            extra={
                "error": str(exc),
                "failures": self._init_failures,
                "retry_in_s": self.options.init_retry_s,
            },
        )

    def _retry_init(self) -> None:
        """Called by the supervisor while ``init_error`` is set: read the GPUs again; serve them if found."""
        if self.init_error is None or self._clock() < self._next_init_at or self._stop.is_set():
            return
        try:
            node = self._load_node()
        except SourceError as exc:
            self._init_failed(exc)
            return
        config = self.config
        assert config is not None
        self._install_sim_tools(node)
        with self._lock:
            self.node = node
            self.tracker = self._tracker(node, config)
            self.init_error = None
        log.info(
            "GPUs readable now; serving them", extra={"gpus": len(node.gpus), "after": self._init_failures}
        )
        self._start_nvml_watch()
        self.reload()

    # -- config file changes ----------------------------------------------------------------------

    def _config_changed(self) -> bool:
        """True when the config file now has other content than the one last loaded, and has kept the
        same identity for two checks in a row: a file being written in place (truncated, then
        filled) is not loaded half-written. kubelet's ConfigMap updates swap a symlink atomically."""
        identity = self._config_identity()
        if identity is None or identity == self._config_seen:
            self._config_pending = None
            return False
        if identity != self._config_pending:
            self._config_pending = identity  # seen once: look again at the next check
            return False
        digest = self._config_content_digest()
        if digest is not None and digest == self._config_digest:
            self._config_seen = identity  # same bytes behind a new symlink or inode
            return False
        return True

    def _watch_inputs(self) -> None:
        self._retry_init()
        if self._stop.is_set():
            return
        if self._config_changed():
            log.info("config file changed; reloading", extra={"file": str(self.options.config_file)})
            if not self.reload():
                self._config_seen = self._config_identity()  # rejected: wait for the next change
        node = self.node
        if node is not None and self._sim_mounts and not Path(self._sim_mounts[0].host_path).exists():
            self._install_sim_tools(node)  # kubelet wiped the plugin dir on restart

    # -- probes -----------------------------------------------------------------------------------

    def healthz(self) -> tuple[bool, dict[str, object]]:
        """Alive: the supervisor (registration, restarts, reloads) is running."""
        alive = self._supervisor is not None and self._supervisor.is_alive() and not self._stop.is_set()
        return alive, {"status": "alive" if alive else "stopping or supervisor dead"}

    def readyz(self) -> tuple[bool, dict[str, object]]:
        """Ready: GPUs read, and every resource's server serving and (when registering) registered."""
        registering = self.options.kubelet_socket_path is not None
        with self._lock:
            if self.init_error is not None:
                return False, {"reason": f"GPUs not readable (retrying): {self.init_error}"}
            resources = {
                str(s.server.plugin.resource.name): {
                    "serving": s.server.serving,
                    "registered": s.registered_with is not None,
                }
                for s in self._slots
            }
        waiting = [
            name
            for name, state in resources.items()
            if not state["serving"] or (registering and not state["registered"])
        ]
        if self._stop.is_set():
            return False, {"reason": "stopping", "resources": resources}
        if waiting:
            reason = f"not serving or not registered: {', '.join(waiting)}"
            kubelet = self.options.kubelet_socket_path
            if kubelet is not None and socket_identity(kubelet) is None:
                reason += f" (no kubelet registration socket at {kubelet})"
            return False, {"reason": reason, "resources": resources}
        return True, {"resources": resources}

    def apply_event(self, observed: GpuEvent) -> None:
        """Hand a source's observation to the health tracker (the two layers meet only here)."""
        tracker = self.tracker
        if tracker is None:
            return
        # file text: it reaches log lines and gRPC errors
        event = dataclasses.replace(observed, detail=clip(observed.detail))
        try:
            transition = tracker.apply(event)
        except UnknownGpuError as exc:
            log.error("health event for an unknown GPU ignored", extra={"error": str(exc)})
            return
        if self._metrics is not None:
            healthy = transition.healthy if transition is not None else None
            self._metrics.observe_event(tracker.resolve(event.gpu), event, healthy)

    # -- registration and kubelet restarts --------------------------------------------------------

    def _restart(self, slot: _Slot, why: str) -> None:
        if self._stop.is_set():
            return
        retrying = slot.restart_backoff is not None and slot.restart_backoff.failures > 0
        if not retrying:
            log.warning(
                "restarting plugin server", extra={"resource": slot.server.plugin.resource.name, "why": why}
            )
        if slot.server.serving:
            slot.server.stop()
        slot.registered_with = None
        slot.server.start()
        slot.next_attempt = 0.0
        slot.backoff_s = 0.1

    def _restart_or_back_off(self, slot: _Slot, why: str, now: float) -> bool:
        """Restart ``slot``'s server; on failure log one line and schedule a retry. True if serving."""
        if slot.restart_backoff is None:
            slot.restart_backoff = Backoff(initial_s=0.1, max_s=self.options.max_backoff_s)
        try:
            self._restart(slot, why)
        except Exception as exc:
            delay = slot.restart_backoff.failed()
            slot.restart_at = now + delay
            log.warning(
                "plugin server restart failed; retrying",
                extra={
                    "resource": slot.server.plugin.resource.name,
                    "why": why,
                    "error": describe(exc),
                    "failures": slot.restart_backoff.failures,
                    "retry_in_s": round(delay, 2),
                },
            )
            log.debug("plugin server restart failure", exc_info=True)
            return False
        slot.restart_backoff.reset()
        return True

    def _supervise(self) -> None:
        kubelet = self.options.kubelet_socket_path
        backoff = Backoff(initial_s=self.options.watch_interval_s, max_s=self.options.max_backoff_s)
        delay = self.options.watch_interval_s
        while not self._stop.wait(delay):
            try:
                self._watch_inputs()
                self._tick(kubelet)
            except Exception as exc:
                delay = max(backoff.failed(), self.options.watch_interval_s)
                log.error(
                    "registration loop failed; retrying",
                    extra={"error": describe(exc), "retry_in_s": round(delay, 2)},
                )
                log.debug("registration loop failure", exc_info=True)
                continue
            backoff.reset()
            delay = self.options.watch_interval_s

    def _tell_kubelet_missing(
        self, kubelet: Path | None, identity: SocketIdentity | None, now: float
    ) -> None:
        """Say that the agent waits for kubelet's socket (at once, then every ``KUBELET_MISSING_EVERY_S``),
        and when it appears: a wrong ``--device-plugin-dir`` otherwise looks like a healthy agent."""
        waiting = kubelet is not None and any(s.registered_with is None for s in self._slots)
        if identity is not None or not waiting:
            if self._kubelet_missing_told is not None and identity is not None:
                log.info(
                    "kubelet's registration socket appeared; registering", extra={"socket": str(kubelet)}
                )
            self._kubelet_missing_told = None
            return
        told = self._kubelet_missing_told
        if told is None or now - told >= KUBELET_MISSING_EVERY_S:
            log.warning(
                "waiting for kubelet's registration socket; the resources are served but kubelet does not "
                "know them yet (is --device-plugin-dir kubelet's <root-dir>/device-plugins?)",
                extra={"socket": str(kubelet)},
            )
            self._kubelet_missing_told = now

    def _tick(self, kubelet: Path | None) -> None:
        with self._lock:
            if self._stop.is_set():
                return
            identity = socket_identity(kubelet)
            now = self._clock()
            due: list[_Slot] = []
            for slot in self._slots:
                why = None
                if not slot.server.socket_alive():
                    why = "plugin socket removed (kubelet restart?)"
                elif (
                    slot.registered_with is not None
                    and identity is not None
                    and identity != slot.registered_with
                ):
                    why = "kubelet.sock recreated (kubelet restart)"
                if why is not None and (
                    now < slot.restart_at or not self._restart_or_back_off(slot, why, now)
                ):
                    continue
                if kubelet is None or slot.registered_with is not None or now < slot.next_attempt:
                    continue
                if identity is None:
                    continue  # kubelet absent: register as soon as its socket appears
                due.append(slot)
            self._tell_kubelet_missing(kubelet, identity, now)
        # Register outside the lock: a kubelet that hangs must delay neither reload() nor stop().
        for slot in due:
            if kubelet is None or self._stop.is_set():
                return
            try:
                register(kubelet, slot.server, timeout_s=self.options.register_timeout_s, cancel=self._stop)
            except RegistrationFailed as exc:
                if self._stop.is_set():
                    return
                if self._metrics is not None:
                    self._metrics.observe_registration(str(slot.server.plugin.resource.name), False)
                with self._lock:
                    slot.next_attempt = now + slot.backoff_s
                    retry_in_s = slot.backoff_s
                    slot.backoff_s = min(slot.backoff_s * 2, self.options.max_backoff_s)
                log.warning(
                    "registration failed; retrying",
                    extra={"error": str(exc), "retry_in_s": round(retry_in_s, 2)},
                )
                continue
            if self._metrics is not None:
                self._metrics.observe_registration(str(slot.server.plugin.resource.name), True)
            with self._lock:
                slot.registered_with = identity
                slot.backoff_s = 0.1

    # -- reload and stop --------------------------------------------------------------------------

    def reload(self, node: Node | None = None) -> bool:
        """Re-read the configuration, or serve a new ``node`` (a MIG repartition) with the running one,
        all or nothing; ``False`` (and why, logged) if not.

        Servers whose resource (name, devices, options kubelet reads at registration) is unchanged
        keep serving on the same socket with their streams open; they answer with the new config from
        the next call. The others are started on fresh sockets *first*; only when all of them serve
        does the agent switch to them and stop the servers they replace (kubelet then reports the
        resources of stopped servers with no allocatable devices). With a new node the health
        tracker's and the quarantine's UUID maps, the simulated nvidia-smi and the labels follow it.
        """
        with self._reload_lock:
            return self._reload(node)

    def _reload(self, new_node: Node | None) -> bool:
        assert self.node is not None and self.tracker is not None
        if self._stop.is_set():
            return False
        node = new_node if new_node is not None else self.node
        try:
            config = self._load_config() if new_node is None else self.config
            assert config is not None
            inventory = build_inventory(node, config, mig_minors=self._mig_minors())
            check_inventory(inventory)
            plans = daemon_plans(inventory, config)
            if plans and self._mps is None:
                find_control(config, self.options.env.get("PATH") or os.environ.get("PATH"))
        except KubegpuError as exc:
            what = "config reload" if new_node is None else "the repartitioned node"
            log.error(f"{what} rejected; keeping the running config", extra={"error": str(exc)})
            return False
        tracker = self.tracker
        with self._lock:
            running = {s.server.plugin.resource.name: s for s in self._slots}
        running_plans = (
            daemon_plans(self.inventory, self.config)
            if self.inventory is not None and self.config is not None
            else ()
        )
        self._mps_daemons(plans, config)  # new MPS resources' daemons run before they are advertised
        plugins = [self._plugin(r, inventory, config, tracker) for r in inventory.resources]
        kept: dict[str, _Slot] = {}
        fresh: dict[str, _Slot] = {}
        for plugin in plugins:
            old = running.get(plugin.resource.name)
            if (
                old is not None
                and old.server.serving
                and old.server.plugin.resource == plugin.resource
                and old.server.plugin.pre_start_required == plugin.pre_start_required
            ):
                kept[plugin.resource.name] = old
            else:
                fresh[plugin.resource.name] = _Slot(server=self._server(plugin))
        try:
            for slot in fresh.values():
                if self._stop.is_set():
                    break
                slot.server.start()
        except Exception as exc:
            self._discard(fresh.values())
            self._restore_mps(running_plans)
            log.error(
                "config reload failed; keeping the running config and servers",
                extra={"error": str(exc), "resource": str(slot.server.plugin.resource.name)},
            )
            return False
        try:
            self._write_cdi_spec(inventory, config)
        except OSError as exc:
            self._discard(fresh.values())
            self._restore_mps(running_plans)
            log.error(
                "config reload failed: cannot write the CDI spec; keeping the running config and servers",
                extra={"error": str(exc.strerror or exc), "dir": config.cdi_spec_dir},
            )
            return False
        with self._lock:
            if self._stop.is_set():  # SIGTERM won: start nothing, change nothing
                self._discard(fresh.values())
                return False  # stop() quits every MPS daemon
            tracker.set_policy(config.health)
            if new_node is not None:
                tracker.set_aliases(self._aliases(node))
            self.node, self.config, self.inventory = node, config, inventory
            for plugin in plugins:
                if plugin.resource.name in kept:
                    kept[plugin.resource.name].server.plugin = plugin
            kept_ids = {id(s) for s in kept.values()}
            replaced = [s for s in self._slots if id(s) not in kept_ids]
            self._slots = [kept.get(p.resource.name) or fresh[p.resource.name] for p in plugins]
        for slot in replaced:
            slot.server.stop()
        if self._mps is not None:
            self._mps.retire(plans)  # a reload that removed MPS resources quits their daemons
        if new_node is not None:
            try:
                self._install_sim_tools(node)
            except OSError as exc:
                log.warning("cannot rewrite the simulated nvidia-smi", extra={"error": str(exc)})
        if self._hygiene is not None:
            labels = labels_for(node, config, versions=self._driver, timestamp=self._label_timestamp)
            self._hygiene.set_index_of(self._aliases(node))
            self._hygiene.set_uuids([str(g.uuid) for g in node.gpus])
            self._hygiene.set_labels(labels)
            self._hygiene.set_quarantine(config.quarantine)
        else:
            self._start_hygiene()
        if new_node is None:
            self._follow_mig_settings(config)
        log.info(
            "config reloaded" if new_node is None else "repartitioned node served",
            extra={
                "resources": [str(r.name) for r in inventory.resources],
                "restarted": sorted(str(n) for n in fresh),
                "kept": sorted(str(n) for n in kept),
            },
        )
        return True

    def _restore_mps(self, plans: tuple[DaemonPlan, ...]) -> None:
        """A reload failed: the running config's daemons run as they did (a changed one restarts)."""
        if self._mps is not None:
            self._mps.apply(plans)
            self._mps.retire(plans)

    @staticmethod
    def _discard(slots: Iterable[_Slot]) -> None:
        for slot in slots:
            if slot.server.serving:
                slot.server.stop(grace_s=0)

    def stop(self) -> None:
        """Stop serving and remove every socket, within ``STOP_BUDGET_S`` whatever kubelet does.

        Setting the stop event first means no server starts from now on (start, reload and the
        supervisor check it before each start) and an in-flight Register is abandoned.
        """
        self._stop.set()
        deadline = time.monotonic() + STOP_BUDGET_S
        if self._probes is not None:
            self._probes.stop()
        if self._metrics is not None:
            self._metrics.stop()
        if self._mig is not None:
            self._mig.stop()
        if self._hygiene is not None:
            self._hygiene.stop()
        if self.tracker is not None:
            self.tracker.wake()
        if self._fault_follower is not None:
            self._fault_follower.stop()
        self._nvml_stop.set()
        # The lock is only held for short steps (never across a kubelet call); don't wait long anyway.
        locked = self._lock.acquire(timeout=1.0)
        try:
            slots = list(self._slots)
        finally:
            if locked:
                self._lock.release()
        # All servers stop in parallel.
        pending = [slot.server.begin_stop(grace_s=0.2) for slot in slots]
        for slot, stopped in zip(slots, pending, strict=True):
            slot.server.finish_stop(stopped, grace_s=0.2)
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join(timeout=max(0.1, deadline - time.monotonic()))
        for slot in list(self._slots):  # a restart that raced with stop() is stopped too
            if slot.server.serving:
                slot.server.stop(grace_s=0)
        self._cdi.remove()
        if self._mps is not None:
            self._mps.stop()  # after the servers: no container is handed a pipe without a daemon
        if self._nvml_source is not None:
            self._nvml_source.close()
        log.info("agent stopped")

    def run_until_signalled(self) -> None:
        """Serve until SIGTERM/SIGINT; SIGHUP reloads the configuration."""
        done = threading.Event()
        reload_wanted = threading.Event()

        def on_term(signum: int, frame: FrameType | None) -> None:
            del frame
            log.info("signal received", extra={"signal": signal.Signals(signum).name})
            self._stop.set()  # at once: a reload or restart in progress starts nothing more
            done.set()

        def on_hup(signum: int, frame: FrameType | None) -> None:
            del signum, frame
            reload_wanted.set()

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)
        signal.signal(signal.SIGHUP, on_hup)
        self.start()
        try:
            while not done.wait(0.1):
                if reload_wanted.is_set() and not self._stop.is_set():
                    reload_wanted.clear()
                    self.reload()
        finally:
            self.stop()


def label_inputs(config: AgentConfig) -> LabelInputs:
    """How ``config`` advertises the GPUs, in the terms of the label computation (kubegpu.node)."""
    sharing = config.sharing
    mig = MigMode(config.mig_strategy.value)
    if sharing is None:
        return LabelInputs(mig=mig)
    mode = SharingMode.TIME_SLICING if sharing.kind is SharingKind.TIME_SLICING else SharingMode.MPS
    replicas = {r.name: r.replicas for r in sharing.resources}
    renamed = frozenset(r.name for r in sharing.resources if r.rename or sharing.rename_by_default)
    return LabelInputs(mig=mig, sharing=mode, replicas=replicas, renamed=renamed)


def labels_for(
    node: Node, config: AgentConfig, *, versions: DriverVersions | None = None, timestamp: int | None = None
) -> dict[str, str]:
    """The node's labels (``kubegpu labels`` prints these; the agent writes them)."""
    return node_labels(node, label_inputs(config), versions=versions, timestamp=timestamp)
