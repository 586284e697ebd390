"""What Allocate tells kubelet to put into a container, per NVIDIA's device-list strategies.

Given the devices one container was granted, builds environment variables, mounts, device nodes,
annotations and CDI device names, exactly in the shapes NVIDIA's plugin uses (see
reference/nvidia-compat.md, section 5), so the NVIDIA container toolkit and CDI runtimes understand
them. Replica IDs are mapped back to their GPU (or MIG instance) and de-duplicated, so two replicas of
one GPU show up as one visible GPU. Kept free of gRPC: the servicer only copies this into protobuf.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kubegpu.deviceplugin.config import AgentConfig, DeviceListStrategy, SharingKind
from kubegpu.deviceplugin.inventory import Device, Resource
from kubegpu.deviceplugin.mps import PIPE_ENV, ShareLimits, container_pipe_dir, host_pipe_dir
from kubegpu.model.cdi import CONTROL_DEVICE_PATHS

__all__ = [
    "CONTROL_DEVICE_PATHS",
    "VOLUME_MOUNT_ROOT",
    "ContainerAllocation",
    "DeviceNode",
    "MountSpec",
    "build_allocation",
]

VOLUME_MOUNT_ROOT = "/var/run/nvidia-container-devices"
CDI_ANNOTATION_NAME = "nvidia-device-plugin_"
_CDI_ONLY = {DeviceListStrategy.CDI_ANNOTATIONS, DeviceListStrategy.CDI_CRI}


@dataclass(frozen=True, kw_only=True)
class MountSpec:
    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True, kw_only=True)
class DeviceNode:
    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(frozen=True, kw_only=True)
class ContainerAllocation:
    """One ``ContainerAllocateResponse`` as plain data."""

    envs: dict[str, str] = field(default_factory=dict)
    mounts: tuple[MountSpec, ...] = ()
    devices: tuple[DeviceNode, ...] = ()
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()


def _visible(devices: Sequence[Device], config: AgentConfig) -> list[str]:
    return list(dict.fromkeys(d.visible_id(config.device_id_strategy) for d in devices))


def _device_nodes(devices: Sequence[Device], config: AgentConfig) -> tuple[DeviceNode, ...]:
    """NVIDIA's passDeviceSpecs: the control nodes present, then each device's nodes (a MIG device's
    parent GPU and its nvidia-caps GPU- and compute-instance nodes, see inventory)."""
    root = config.nvidia_dev_root.rstrip("/")
    paths = [p for p in CONTROL_DEVICE_PATHS if os.path.exists(root + p)]
    for d in devices:
        paths.extend(d.paths)
    return tuple(DeviceNode(container_path=p, host_path=root + p) for p in dict.fromkeys(paths))


def build_allocation(
    resource: Resource,
    devices: Sequence[Device],
    config: AgentConfig,
    *,
    annotation_id: Callable[[], str] = lambda: str(uuid.uuid4()),
    extra_mounts: Sequence[MountSpec] = (),
    mps_limits: ShareLimits | None = None,
) -> ContainerAllocation:
    """The container response for ``devices`` of ``resource`` (already validated by the caller).

    ``extra_mounts`` (simulated mode only: the stand-in ``nvidia-smi``) are added to every strategy's
    answer, CDI-only included, since no runtime hook will provide a tool for simulated GPUs.
    ``mps_limits`` (a ``kubegpu.io/gpu-milli`` share under ``kubegpu.mps.shares``): the container gets
    the resource's MPS pipe, as an MPS resource's replicas do, and its share's MPS client limits."""
    visible = _visible(devices, config)
    strategies = config.device_list_strategies
    envs: dict[str, str] = {}
    mounts: list[MountSpec] = list(extra_mounts)
    annotations: dict[str, str] = {}
    cdi: list[str] = []
    cdi_names = [f"{config.cdi_kind}={v}" for v in visible]
    if DeviceListStrategy.CDI_ANNOTATIONS in strategies:
        key = f"{config.cdi_annotation_prefix}{CDI_ANNOTATION_NAME}{annotation_id()}"
        annotations[key] = ",".join(cdi_names)
    if DeviceListStrategy.CDI_CRI in strategies:
        cdi.extend(cdi_names)
    if resource.sharing is SharingKind.MPS or mps_limits is not None:
        pipe = container_pipe_dir(resource.name)
        root = config.mps_root.rstrip("/")
        envs[PIPE_ENV] = pipe
        mounts.append(MountSpec(container_path=pipe, host_path=host_pipe_dir(root, resource.name)))
        mounts.append(MountSpec(container_path="/mps/shm", host_path=f"{root}/shm"))
        if mps_limits is not None:
            envs.update(mps_limits.envs())
    for enabled, name in (
        (config.gdrcopy_enabled, "NVIDIA_GDRCOPY"),
        (config.gds_enabled, "NVIDIA_GDS"),
        (config.mofed_enabled, "NVIDIA_MOFED"),
    ):
        if enabled:
            envs[name] = "enabled"
    if set(strategies) <= _CDI_ONLY:
        # NVIDIA: with only CDI strategies the runtime injects everything from the CDI spec.
        return ContainerAllocation(
            envs=envs, mounts=tuple(mounts), annotations=annotations, cdi_devices=tuple(cdi)
        )
    if DeviceListStrategy.ENVVAR in strategies:
        envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(visible)
    if DeviceListStrategy.VOLUME_MOUNTS in strategies:
        envs["NVIDIA_VISIBLE_DEVICES"] = VOLUME_MOUNT_ROOT
        mounts.extend(
            MountSpec(container_path=f"{VOLUME_MOUNT_ROOT}/{v}", host_path="/dev/null") for v in visible
        )
    nodes = _device_nodes(devices, config) if config.pass_device_specs else ()
    return ContainerAllocation(
        envs=envs, mounts=tuple(mounts), devices=nodes, annotations=annotations, cdi_devices=tuple(cdi)
    )
