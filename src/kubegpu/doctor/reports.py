"""The doctor's reports: which checks make up ``node``, ``cluster``, ``pod`` and the combined run.

This is the doctor's library entry point; the CLI only parses flags and renders a ``Report``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from kubegpu.doctor.chain import Check, Report, run_checks
from kubegpu.doctor.claims import CLAIM_CHECKS
from kubegpu.doctor.cluster import CLUSTER_CHECKS, ClusterContext
from kubegpu.doctor.clusterprobe import ClusterApi
from kubegpu.doctor.host import HOST_CHECKS, HostFacts, NodeContext, NvmlReader
from kubegpu.doctor.hostprobe import HostProbe
from kubegpu.doctor.plugin import PLUGIN_NODE_CHECKS
from kubegpu.doctor.pod import POD_CHECKS, PodContext
from kubegpu.doctor.runtime import RUNTIME_CHECKS
from kubegpu.health.xid import XidPolicy

__all__ = ["NODE_CHECKS", "cluster_report", "full_report", "node_report", "pod_report"]

NODE_CHECKS: tuple[Check[NodeContext], ...] = HOST_CHECKS + RUNTIME_CHECKS + PLUGIN_NODE_CHECKS


def node_report(
    root: Path | str = "/",
    *,
    command_timeout_s: float = 5.0,
    xid_policy: XidPolicy | None = None,
    nvml: NvmlReader | None = None,
) -> Report:
    """Host, runtime and plugin-socket checks of the host under ``root`` (``nvml``: how to read the
    GPUs through the agent's NVML; by default the live library on the live host, none elsewhere)."""
    probe = HostProbe(root, command_timeout_s=command_timeout_s)
    ctx = NodeContext(facts=HostFacts(probe, nvml=nvml), xid_policy=xid_policy or XidPolicy())
    return run_checks(NODE_CHECKS, ctx)


def cluster_report(
    connect: Callable[[], ClusterApi],
    *,
    node: str | None = None,
    node_is_hint: bool = False,
    unreachable_is_skip: bool = False,
) -> Report:
    """Device plugin pods and GPU nodes as the API server sees them (one node, or every GPU node)."""
    ctx = ClusterContext(
        connect=connect, node=node, node_is_hint=node_is_hint, unreachable_is_skip=unreachable_is_skip
    )
    return run_checks(CLUSTER_CHECKS, ctx)


def pod_report(
    connect: Callable[[], ClusterApi],
    namespace: str,
    name: str,
    *,
    now: Callable[[], datetime] | None = None,
) -> Report:
    """Why one pod has no working GPU: the API check, then the pod's own checks (``now``: the wall clock
    that event ages are measured against, injectable for tests)."""
    cluster = ClusterContext(connect=connect)
    api_check = run_checks(CLUSTER_CHECKS[:1], cluster)
    ctx = PodContext(cluster=cluster, namespace=namespace, name=name)
    if now is not None:
        ctx = PodContext(cluster=cluster, namespace=namespace, name=name, now=now)
    return api_check + run_checks(POD_CHECKS + CLAIM_CHECKS, ctx, prior=api_check.findings)


def host_node_name(root: Path | str) -> str | None:
    """The host's name, as kubelet registers it by default (``/etc/hostname``, else the live hostname)."""
    probe = HostProbe(root)
    text = (probe.read_text("etc/hostname") or "").strip()
    if text:
        return text.split()[0].lower()
    return socket.gethostname().lower() if probe.is_live else None


def full_report(
    root: Path | str,
    connect: Callable[[], ClusterApi],
    *,
    node: str | None = None,
    command_timeout_s: float = 5.0,
) -> Report:
    """``kubegpu doctor``: the node checks, then the cluster checks where a cluster is reachable."""
    local = node_report(root, command_timeout_s=command_timeout_s)
    hint = node is None
    name = node if node is not None else host_node_name(root)
    return local + cluster_report(connect, node=name, node_is_hint=hint, unreachable_is_skip=True)
