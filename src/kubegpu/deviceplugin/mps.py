"""What the MPS control daemons must be: one per MPS resource, its directories, environment and limits.

A pure plan (no processes, no files): ``daemon_plans`` turns the inventory and the configuration into
one ``DaemonPlan`` per resource that needs NVIDIA's MPS control daemon, and ``share_limits`` gives a
``kubegpu.io/gpu-milli`` share its per-client limits. ``deviceplugin/mps_daemon.py`` runs the plans.

As NVIDIA's ``mps-control-daemon`` does (reference/nvidia-compat.md, section 3):

* one daemon per shared resource, over the GPUs that resource covers, with its own pipe and log
  directories ``<mpsRoot>/<resource>/pipe`` and ``<mpsRoot>/<resource>/log`` (the pipe directory is
  what Allocate mounts at ``/mps/<resource>/pipe``, ``response.py``);
* the replicas' shares set through the control interface as defaults for the servers the daemon
  starts: ``set_default_active_thread_percentage <100 / replicas>`` and, per GPU,
  ``set_default_device_pinned_mem_limit <dev> <memory / replicas>M``.

kubegpu differs in three documented ways (docs/agent.md, "MPS"): the daemon is started with
``CUDA_VISIBLE_DEVICES`` set to the resource's GPU UUIDs (NVIDIA leaves a TODO there), so ``<dev>`` is
the GPU's position in that list, the ordinal the daemon sees; with per-GPU replica counts
(``kubegpu.sharing.replicas``) the one thread percentage a daemon has is that of the GPU with the most
replicas, so no replica gets more than its share; and ``kubegpu.mps.shares`` adds a daemon over the
GPUs of ``kubegpu.io/gpu-milli`` that sets no defaults, since MPS lets a client's environment only
lower the daemon's limits and unequal shares are set per client (``share_limits``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from kubegpu.deviceplugin.config import AgentConfig, SharingKind
from kubegpu.deviceplugin.inventory import Inventory, Resource, ResourceKind

__all__ = [
    "CLIENT_ENVS",
    "CONTROL_BINARY",
    "CONTROL_LOG",
    "PID_FILE",
    "DaemonPlan",
    "MpsGate",
    "MpsGpu",
    "ShareLimits",
    "container_pipe_dir",
    "daemon_plans",
    "host_log_dir",
    "host_pipe_dir",
    "replica_commands",
    "share_limits",
]

CONTROL_BINARY = "nvidia-cuda-mps-control"
PID_FILE = "nvidia-cuda-mps-control.pid"  # the control daemon writes it into its pipe directory
CONTROL_LOG = "control.log"  # the control daemon's log in its log directory
CONTAINER_ROOT = "/mps"  # where Allocate mounts a resource's pipe directory in the container
MILLI_PER_PERCENT = 10

# The MPS client variables Allocate sets for a share (and the doctor looks for in pod specs).
ACTIVE_THREAD_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
PINNED_MEM_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
CLIENT_ENVS = (PIPE_ENV, ACTIVE_THREAD_ENV, PINNED_MEM_ENV)


def host_pipe_dir(mps_root: str, resource: str) -> str:
    return f"{mps_root.rstrip('/')}/{resource}/pipe"


def host_log_dir(mps_root: str, resource: str) -> str:
    return f"{mps_root.rstrip('/')}/{resource}/log"


def container_pipe_dir(resource: str) -> str:
    return f"{CONTAINER_ROOT}/{resource}/pipe"


@dataclass(frozen=True, kw_only=True)
class MpsGpu:
    """One GPU a daemon covers: its index on the node, UUID, memory and replicas there."""

    index: int
    uuid: str
    memory_mib: int
    replicas: int


@dataclass(frozen=True, kw_only=True)
class DaemonPlan:
    """One control daemon: for ``resource``, over ``gpus``, and the control commands that set its limits
    (sent in order once it runs). Two equal plans are the same daemon: a reload keeps it running."""

    resource: str
    gpus: tuple[MpsGpu, ...]
    pipe_dir: str
    log_dir: str
    commands: tuple[str, ...]

    @property
    def env(self) -> dict[str, str]:
        """The environment of the daemon and of every control command sent to it."""
        return {
            "CUDA_VISIBLE_DEVICES": ",".join(g.uuid for g in self.gpus),
            PIPE_ENV: self.pipe_dir,
            LOG_ENV: self.log_dir,
        }

    @property
    def gpu_indexes(self) -> frozenset[int]:
        return frozenset(g.index for g in self.gpus)


def _gpus(resource: Resource, memory: Mapping[int, int], uuids: Mapping[int, str]) -> tuple[MpsGpu, ...]:
    return tuple(
        MpsGpu(index=gpu, uuid=uuids[gpu], memory_mib=memory[gpu], replicas=n)
        for gpu, n in sorted(resource.replicas_per_gpu.items())
    )


def replica_commands(gpus: tuple[MpsGpu, ...]) -> tuple[str, ...]:
    """NVIDIA's limits for equal replicas: the thread percentage of the GPU with the most replicas, then
    each GPU's memory split by its replicas (in MiB, ``<n>M``), ``<dev>`` its position in ``gpus``."""
    if not gpus:
        return ()
    commands = [f"set_default_active_thread_percentage {100 // max(g.replicas for g in gpus)}"]
    commands += [
        f"set_default_device_pinned_mem_limit {dev} {g.memory_mib // g.replicas}M"
        for dev, g in enumerate(gpus)
        if g.memory_mib > 0  # NVIDIA skips a device whose memory is unknown
    ]
    return tuple(commands)


def daemon_plans(inventory: Inventory, config: AgentConfig) -> tuple[DaemonPlan, ...]:
    """The daemons ``config`` asks for on this inventory: none unless ``kubegpu.mps.daemon`` (and
    ``flags.mpsRoot``); one per MPS resource; one for ``kubegpu.io/gpu-milli`` under
    ``kubegpu.mps.shares`` (no default limits: each share's container carries its own)."""
    if not config.mps_daemon or not config.mps_root:
        return ()
    memory = {g.index: g.memory_mib for g in inventory.node.gpus}
    uuids = {g.index: str(g.uuid) for g in inventory.node.gpus}
    plans: list[DaemonPlan] = []
    for resource in inventory.resources:
        if resource.sharing is SharingKind.MPS:
            gpus = _gpus(resource, memory, uuids)
            commands = replica_commands(gpus)
        elif resource.kind is ResourceKind.MILLI and config.mps_shares:
            gpus = tuple(replace(g, replicas=1) for g in _gpus(resource, memory, uuids))
            commands = ()
        else:
            continue
        if not gpus:
            continue
        name = str(resource.name)
        plans.append(
            DaemonPlan(
                resource=name,
                gpus=gpus,
                pipe_dir=host_pipe_dir(config.mps_root, name),
                log_dir=host_log_dir(config.mps_root, name),
                commands=commands,
            )
        )
    return tuple(plans)


@dataclass(frozen=True, kw_only=True)
class ShareLimits:
    """A share's MPS client limits: a percentage of the GPU's threads and a pinned-memory cap (MiB)."""

    active_thread_percentage: int
    pinned_mem_mib: int

    def envs(self) -> dict[str, str]:
        """The container's MPS client variables; its one GPU is device 0 in the container."""
        return {
            ACTIVE_THREAD_ENV: str(self.active_thread_percentage),
            PINNED_MEM_ENV: f"0={self.pinned_mem_mib}M",
        }


def share_limits(milli: int, memory_mib: int) -> ShareLimits:
    """``milli`` thousandths of a GPU of ``memory_mib``: ``milli / 10`` percent of its threads (rounded
    down, at least 1) and ``milli / 1000`` of its memory (MiB, rounded down, at least 1); a share is
    never more than the whole GPU."""
    if milli <= 0:
        raise ValueError(f"a share is a positive number of thousandths of a GPU, not {milli}")
    milli = min(milli, 1000)
    return ShareLimits(
        active_thread_percentage=max(1, milli // MILLI_PER_PERCENT),
        pinned_mem_mib=max(1, memory_mib * milli // 1000),
    )


class MpsGate(Protocol):
    """Whether a resource's daemon serves a GPU now; ``version`` changes whenever an answer does."""

    @property
    def version(self) -> int: ...

    def unavailable(self, resource: str, gpu: int) -> str | None:
        """Why ``resource``'s devices on ``gpu`` cannot be used (its daemon is down), or None."""
        ...
