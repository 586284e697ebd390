"""Cluster checks: does the API server see the GPUs the nodes have, and can pods land on them.

The scheduler link of the chain (seed 000's table: allocatable without nvidia.com/gpu; a GPU that
"disappeared"; taints on GPU nodes; seed 001 §3 and §5.2: the plugin DaemonSet and its log table).
Every read goes through a ``ClusterApi``, live or recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from kubegpu.doctor.chain import Check
from kubegpu.doctor.clusterprobe import ApiObject, ClusterApi, dig
from kubegpu.doctor.finding import CheckId, Layer, Outcome, fail, ok, skip, warn
from kubegpu.echo import clip
from kubegpu.errors import ClusterUnreachable

__all__ = [
    "CLUSTER_CHECKS",
    "ClusterContext",
    "gpu_count",
    "is_gpu_resource",
    "pod_gpu_request",
]

ID_API = CheckId("cluster.api")
ID_PLUGIN_POD = CheckId("plugin.pod")
ID_ALLOCATABLE = CheckId("cluster.allocatable")
ID_CAPACITY = CheckId("cluster.capacity")
ID_NODE_READY = CheckId("cluster.node-ready")
ID_LABELS = CheckId("cluster.labels")
ID_TAINTS = CheckId("cluster.taints")
ID_OPERATOR = CheckId("cluster.gpu-operator")

GPU_LABELS = (
    ("nvidia.com/gpu.present", "true"),
    ("feature.node.kubernetes.io/pci-10de.present", "true"),
)
GPU_LABEL_KEYS = ("nvidia.com/gpu.product", "nvidia.com/gpu.count")
PLUGIN_LABELS = (
    ("app.kubernetes.io/name", "nvidia-device-plugin"),
    ("app.kubernetes.io/name", "kubegpu"),
    ("name", "nvidia-device-plugin-ds"),
    ("app", "nvidia-device-plugin-daemonset"),
)
GPU_OPERATOR_NAMESPACES = ("gpu-operator", "nvidia-gpu-operator")
# Components of the GPU Operator that are links of the chain (a broken one breaks GPU delivery); the
# others (DCGM exporter, feature discovery, validators) only degrade monitoring or labels.
CHAIN_COMPONENTS = ("nvidia-driver-daemonset", "nvidia-container-toolkit-daemonset")
HEALTH_TAINT_HINTS = ("xid", "gpu-error", "gpu-lost", "nvlink-error", "unmonitored")
POD_FAILURE_REASONS = (
    "CrashLoopBackOff",
    "Error",
    "CreateContainerError",
    "RunContainerError",
    "ImagePullBackOff",
)

# Seed 001 §5.2: the device plugin's log lines, their cause and the fix.
PLUGIN_LOG_TABLE: tuple[tuple[str, str, str], ...] = (
    (
        "Failed to initialize NVML",
        "the driver is not installed correctly or the NVML library (libnvidia-ml.so) is missing",
        "on the node: kubegpu doctor node; reinstall the driver and confirm ls /usr/lib/*/libnvidia-ml.so.1; "
        "the plugin pod itself needs the nvidia runtime (or the driver root mounted) to load NVML",
    ),
    (
        "No devices found",
        "the plugin detects no NVIDIA GPU on the node",
        "on the node: lspci | grep -i nvidia; nvidia-smi  # the PCI device or the driver is missing",
    ),
    (
        "Unable to connect to kubelet",
        "the socket path is wrong, or kubelet restarted and the plugin did not re-register",
        "make the DaemonSet's volume mount (/var/lib/kubelet/device-plugins) match kubelet's device-plugin "
        "directory (kubelet --root-dir); kubectl delete pod <plugin-pod> to re-register",
    ),
    (
        "timed out waiting for kubelet",
        "the plugin started before kubelet was ready",
        "add --fail-on-init-error=false to the plugin's args so the pod waits and retries instead of "
        "crash-looping; kubectl delete pod <plugin-pod>",
    ),
)


def is_gpu_resource(name: str) -> bool:
    """``nvidia.com/gpu``, MIG (``nvidia.com/mig-…``) and shared (``nvidia.com/gpu.shared``) resources."""
    return name == "nvidia.com/gpu" or name.startswith(("nvidia.com/mig-", "nvidia.com/gpu."))


def _int(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


_MAX_GPUS = 2**63 - 1  # quantities are int64 in the API server
_WHOLE = re.compile(r"[0-9]+")


def gpu_quantity(value: Any) -> int | None:
    """A GPU resource's value as a whole number of devices, or None when it is not one (``"abc"``,
    ``"-1"``, ``"1.5"``, ``"1e999"``): extended resources are counted in whole devices."""
    if isinstance(value, int) and not isinstance(value, bool):
        count = value
    elif isinstance(value, str) and _WHOLE.fullmatch(value) and len(value) <= 19:
        count = int(value)
    else:
        return None
    return count if 0 <= count <= _MAX_GPUS else None


def gpu_count(resources: dict[str, Any] | None) -> int:
    """Sum of the GPU resources in a ``capacity``/``allocatable``/``limits`` map (malformed ones: 0)."""
    if not isinstance(resources, dict):
        return 0
    return sum(gpu_quantity(v) or 0 for k, v in resources.items() if is_gpu_resource(str(k)))


def malformed_gpu_quantities(node: ApiObject, *keys: str) -> list[str]:
    """``node: status.capacity.nvidia.com/gpu = 'abc'`` for each GPU resource that is not a whole number."""
    bad = []
    for key in keys:
        resources = dig(node, "status", key)
        for name, value in resources.items() if isinstance(resources, dict) else ():
            if is_gpu_resource(str(name)) and gpu_quantity(value) is None:
                bad.append(f"{node_name(node)}: status.{key}.{name} = {clip(json.dumps(value))}")
    return bad


def _malformed(nodes: list[ApiObject], *keys: str) -> Outcome | None:
    bad = [line for node in nodes for line in malformed_gpu_quantities(node, *keys)]
    if not bad:
        return None
    return fail(
        f"GPU count(s) that are not a whole number of devices: {'; '.join(bad[:3])}",
        *bad,
        fix="kubectl get node <node> -o jsonpath='{.status}'  # re-record the node; the device plugin"
        " advertises whole devices, so a value like this is a damaged recording or a broken plugin",
    )


def _containers(pod: ApiObject) -> list[ApiObject]:
    return list(dig(pod, "spec", "containers", default=[]) or [])


def pod_gpu_request(pod: ApiObject) -> int:
    """GPUs a pod holds: the sum over app containers, or the largest init container's, whichever is more."""
    app = sum(
        gpu_count(dig(c, "resources", "limits")) or gpu_count(dig(c, "resources", "requests"))
        for c in _containers(pod)
    )
    init = max(
        (
            gpu_count(dig(c, "resources", "limits"))
            for c in dig(pod, "spec", "initContainers", default=[]) or []
        ),
        default=0,
    )
    return max(app, init)


def pod_name(pod: ApiObject) -> str:
    return f"{dig(pod, 'metadata', 'namespace')}/{dig(pod, 'metadata', 'name')}"


def pod_terminated(pod: ApiObject) -> bool:
    return dig(pod, "status", "phase") in ("Succeeded", "Failed")


def node_name(node: ApiObject) -> str:
    return str(dig(node, "metadata", "name", default="?"))


@dataclass(kw_only=True)
class ClusterContext:
    """What the cluster checks run against.

    ``unreachable_is_skip`` is for bare ``kubegpu doctor``, which must work on a host without a cluster.
    """

    connect: Callable[[], ClusterApi]
    node: str | None = None
    node_is_hint: bool = False  # the host's own name: narrow to it only when the cluster has that node
    unreachable_is_skip: bool = False
    error: str | None = None
    _api: ClusterApi | None = field(default=None, repr=False)

    @property
    def api(self) -> ClusterApi:
        if self._api is None:
            self._api = self.connect()
        return self._api

    @cached_property
    def nodes(self) -> list[ApiObject]:
        return self.api.list_nodes()

    @cached_property
    def scope(self) -> list[ApiObject]:
        """The nodes this report is about: the named node, or every GPU node."""
        if self.node is not None:
            named = [n for n in self.nodes if node_name(n) == self.node]
            if named or not self.node_is_hint:
                return named
        return [n for n in self.nodes if is_gpu_node(n)]

    def events(self, kind: str, namespace: str, name: str) -> list[ApiObject]:
        return sorted(
            self.api.list_events(namespace=namespace, kind=kind, name=name),
            key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""),
        )

    @cached_property
    def pods(self) -> list[ApiObject]:
        """Every pod in the cluster, read once (one API call, however many GPU nodes there are)."""
        return self.api.list_pods()

    @cached_property
    def plugin_pods(self) -> list[ApiObject]:
        return [p for p in self.pods if is_plugin_pod(p)]


def is_gpu_node(node: ApiObject) -> bool:
    labels = dig(node, "metadata", "labels", default={}) or {}
    return (
        gpu_count(dig(node, "status", "capacity")) > 0
        or any(labels.get(k) == v for k, v in GPU_LABELS)
        or any(k in labels for k in GPU_LABEL_KEYS)
    )


def is_plugin_pod(pod: ApiObject) -> bool:
    labels = dig(pod, "metadata", "labels", default={}) or {}
    name = str(dig(pod, "metadata", "name", default=""))
    return (
        any(labels.get(k) == v for k, v in PLUGIN_LABELS)
        or "device-plugin" in name
        or name.startswith("kubegpu-agent")
    )


def check_api(ctx: ClusterContext) -> Outcome:
    try:
        nodes = ctx.nodes
    except ClusterUnreachable as exc:
        ctx.error = str(exc)
        if ctx.unreachable_is_skip:
            return skip(f"no cluster reachable, cluster checks skipped: {exc}")
        return fail(
            f"cannot reach the Kubernetes API: {exc}",
            fix="kubectl cluster-info  # check KUBECONFIG / --kubeconfig / --context, "
            "or run inside the cluster",
        )
    if ctx.node is not None and not ctx.node_is_hint and not ctx.scope:
        return fail(
            f"no node named {ctx.node!r} in the cluster",
            f"nodes: {', '.join(node_name(n) for n in nodes) or '(none)'}",
            fix="kubectl get nodes  # use the NAME column with --node",
        )
    gpu_nodes = [node_name(n) for n in ctx.scope]
    return ok(
        f"API reachable: {len(nodes)} node(s), {len(gpu_nodes)} in scope",
        f"in scope: {', '.join(gpu_nodes) or '(none)'}",
    )


def _plugin_log_findings(ctx: ClusterContext, pod: ApiObject) -> list[tuple[str, str, str, str]]:
    """(pod, log line, cause, fix) for every row of the seed's table found in the plugin's logs."""
    ns = str(dig(pod, "metadata", "namespace"))
    name = str(dig(pod, "metadata", "name"))
    hits: list[tuple[str, str, str, str]] = []
    for status in dig(pod, "status", "containerStatuses", default=[]) or []:
        texts = [ctx.api.read_log(ns, name, status.get("name", ""))]
        if _int(status.get("restartCount", 0)) > 0:
            texts.append(ctx.api.read_log(ns, name, status.get("name", ""), previous=True))
        for text in texts:
            for line in (text or "").splitlines():
                for needle, cause, fix in PLUGIN_LOG_TABLE:
                    if needle.lower() in line.lower() and not any(h[2] == cause for h in hits):
                        hits.append((f"{ns}/{name}", line.strip(), cause, fix))
    return hits


def check_plugin_pod(ctx: ClusterContext) -> Outcome:
    scope = {node_name(n) for n in ctx.scope}
    pods = [p for p in ctx.plugin_pods if dig(p, "spec", "nodeName") in scope or not scope]
    by_node = {str(dig(p, "spec", "nodeName")): p for p in pods}
    missing = sorted(scope - set(by_node))
    evidence = []
    for pod in pods:
        restarts = sum(
            _int(s.get("restartCount", 0)) for s in dig(pod, "status", "containerStatuses", default=[]) or []
        )
        evidence.append(
            f"{pod_name(pod)} on {dig(pod, 'spec', 'nodeName')}: "
            f"{dig(pod, 'status', 'phase')}, restarts {restarts}"
        )
    log_hits = [hit for pod in pods for hit in _plugin_log_findings(ctx, pod)]
    broken = []
    for pod in pods:
        waiting = [
            str(dig(s, "state", "waiting", "reason"))
            for s in dig(pod, "status", "containerStatuses", default=[]) or []
            if dig(s, "state", "waiting", "reason") in POD_FAILURE_REASONS
        ]
        if dig(pod, "status", "phase") != "Running" or waiting:
            broken.append(f"{pod_name(pod)} ({', '.join(waiting) or dig(pod, 'status', 'phase')})")
    if log_hits:
        first = log_hits[0]
        lines = [f"{pod}: {line}  →  {cause}" for pod, line, cause, _ in log_hits]
        fix = "\n".join(dict.fromkeys(h[3] for h in log_hits))
        # A plugin that logged an init error but whose node now advertises GPUs recovered (it retried).
        node_of = {pod_name(p): str(dig(p, "spec", "nodeName")) for p in pods}
        alloc = {node_name(n): gpu_count(dig(n, "status", "allocatable")) for n in ctx.nodes}
        if all(alloc.get(node_of.get(h[0], ""), 0) > 0 for h in log_hits):
            return warn(
                f"device plugin log says {first[1]!r} ({first[2]}), but its node advertises GPUs now: "
                "the plugin recovered; watch for a recurrence",
                *evidence,
                *lines,
                fix=fix,
            )
        return fail(f"device plugin log says {first[1]!r}: {first[2]}", *evidence, *lines, fix=fix)
    if not pods:
        return fail(
            "no device plugin pod runs"
            + (f" on GPU node(s) {', '.join(missing)}" if missing else " in the cluster"),
            fix="kubectl get ds -A | grep -iE 'device-plugin|kubegpu'  # is the DaemonSet installed?\n"
            "its nodeAffinity needs the label: kubectl label nodes <node> nvidia.com/gpu.present=true\n"
            "and a toleration for GPU taints (operator: Exists, effect: NoSchedule)",
        )
    if broken:
        return fail(
            f"device plugin pod(s) not running: {', '.join(broken)}",
            *evidence,
            fix="kubectl -n <ns> describe pod <plugin-pod>; kubectl -n <ns> logs <plugin-pod> --previous",
        )
    if missing:
        return fail(
            f"no device plugin pod on GPU node(s) {', '.join(missing)}",
            *evidence,
            fix="kubectl label nodes <node> nvidia.com/gpu.present=true  # the DaemonSet's nodeAffinity\n"
            "kubectl describe ds <plugin-daemonset>  # tolerations, nodeSelector",
        )
    restarted = [e for e in evidence if not e.endswith("restarts 0")]
    if restarted:
        return warn(
            "device plugin pod(s) restarted",
            *evidence,
            fix="kubectl -n <ns> logs <plugin-pod> --previous  # why it exited",
        )
    return ok(f"device plugin running on {len(pods)} node(s), no restarts", *evidence)


def _node_events(ctx: ClusterContext, node: ApiObject, pattern: str) -> list[str]:
    regex = re.compile(pattern, re.IGNORECASE)
    return [
        f"event {e.get('reason')}: {e.get('message')}"
        for e in ctx.events("Node", "default", node_name(node))
        if regex.search(f"{e.get('reason')} {e.get('message')}")
    ][-3:]


def check_allocatable(ctx: ClusterContext) -> Outcome:
    if not ctx.scope:
        return fail(
            "no node advertises nvidia.com/gpu or carries a GPU label",
            f"nodes: {', '.join(node_name(n) for n in ctx.nodes) or '(none)'}",
            fix="kubectl label nodes <gpu-node> nvidia.com/gpu.present=true; install the device plugin "
            "DaemonSet; kubectl get nodes -o custom-columns='NODE:.metadata.name,"
            "GPU:.status.allocatable.nvidia\\.com/gpu'",
        )
    malformed = _malformed(ctx.scope, "allocatable")
    if malformed is not None:
        return malformed
    empty = [n for n in ctx.scope if gpu_count(dig(n, "status", "allocatable")) == 0]
    evidence = [
        f"{node_name(n)}: allocatable {gpu_count(dig(n, 'status', 'allocatable'))}, "
        f"capacity {gpu_count(dig(n, 'status', 'capacity'))}"
        for n in ctx.scope
    ]
    if empty:
        return fail(
            f"node(s) {', '.join(node_name(n) for n in empty)} have no nvidia.com/gpu in allocatable: the "
            "device plugin is not up, or the driver is broken",
            *evidence,
            fix="kubectl -n kube-system get pods -o wide | grep nvidia-device-plugin; "
            "kubectl logs <plugin-pod>\n"
            "on the node: kubegpu doctor node\n"
            "if the plugin is Running and its socket is in /var/lib/kubelet/device-plugins: "
            "systemctl restart kubelet",
        )
    total = sum(gpu_count(dig(n, "status", "allocatable")) for n in ctx.scope)
    return ok(f"{total} GPU(s) allocatable on {len(ctx.scope)} node(s)", *evidence)


def check_capacity(ctx: ClusterContext) -> Outcome:
    malformed = _malformed(ctx.scope, "capacity", "allocatable")
    if malformed is not None:
        return malformed
    lost = []
    for node in ctx.scope:
        cap = gpu_count(dig(node, "status", "capacity"))
        alloc = gpu_count(dig(node, "status", "allocatable"))
        if alloc < cap:
            lost.append((node, cap, alloc))
    if lost:
        evidence = []
        for node, cap, alloc in lost:
            evidence.append(f"{node_name(node)}: capacity {cap}, allocatable {alloc}")
            evidence += _node_events(ctx, node, r"xid|ecc|gpu|unhealthy|nvidia")
        return fail(
            "GPU(s) disappeared: "
            + ", ".join(f"{node_name(n)} has {c - a} of {c} unhealthy" for n, c, a in lost)
            + " (the device plugin reported them unhealthy: XID error or ECC fault)",
            *evidence,
            fix="kubectl describe node <node>  # events; on the node: dmesg | grep -i xid; "
            "kubegpu doctor node\n"
            "kubectl drain <node>, reset the GPU or reboot; the plugin re-advertises it after a restart",
        )
    return ok("capacity equals allocatable on every GPU node (no GPU marked unhealthy)")


def check_node_ready(ctx: ClusterContext) -> Outcome:
    not_ready, cordoned = [], []
    for node in ctx.scope:
        ready: dict[str, Any] = next(
            (c for c in dig(node, "status", "conditions", default=[]) or [] if c.get("type") == "Ready"), {}
        )
        if ready.get("status") != "True":
            not_ready.append(
                f"{node_name(node)}: Ready={ready.get('status', 'Unknown')} {ready.get('message', '')}"
            )
        if dig(node, "spec", "unschedulable"):
            cordoned.append(node_name(node))
    if not_ready:
        return fail(
            f"GPU node(s) not Ready: {', '.join(s.split(':')[0] for s in not_ready)}",
            *not_ready,
            fix="kubectl describe node <node>; on the node: systemctl status kubelet containerd",
        )
    if cordoned:
        return warn(
            f"GPU node(s) cordoned (unschedulable): {', '.join(cordoned)}",
            fix="kubectl uncordon <node>  # once the reason for cordoning is fixed",
        )
    return ok(f"{len(ctx.scope)} GPU node(s) Ready and schedulable")


def check_labels(ctx: ClusterContext) -> Outcome:
    unlabelled = []
    evidence = []
    for node in ctx.scope:
        labels = dig(node, "metadata", "labels", default={}) or {}
        gpu_labels = [f"{k}={v}" for k, v in sorted(labels.items()) if k.startswith("nvidia.com/")]
        evidence.append(f"{node_name(node)}: {', '.join(gpu_labels) or 'no nvidia.com/ labels'}")
        if labels.get("nvidia.com/gpu.present") != "true":
            unlabelled.append(node_name(node))
    if unlabelled:
        return warn(
            f"GPU node(s) without nvidia.com/gpu.present=true: {', '.join(unlabelled)}; the device plugin "
            "DaemonSet's nodeAffinity and GPU pods' nodeSelector look for it",
            *evidence,
            fix="\n".join(f"kubectl label nodes {n} nvidia.com/gpu.present=true" for n in unlabelled),
        )
    return ok("every GPU node carries nvidia.com/gpu.present=true", *evidence)


def check_taints(ctx: ClusterContext) -> Outcome:
    untainted, health = [], []
    evidence = []
    for node in ctx.scope:
        taints = dig(node, "spec", "taints", default=[]) or []
        shown = [f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}" for t in taints]
        evidence.append(f"{node_name(node)}: taints {', '.join(shown) or '(none)'}")
        if not any(t.get("key") == "nvidia.com/gpu" and t.get("effect") == "NoSchedule" for t in taints):
            untainted.append(node_name(node))
        health += [
            f"{node_name(node)}: {s}"
            for t, s in zip(taints, shown, strict=True)
            if any(h in str(t.get("key", "")) for h in HEALTH_TAINT_HINTS)
        ]
    if health:
        return warn(
            f"GPU health tooling tainted node(s): {'; '.join(health)}",
            *evidence,
            fix="find the GPU fault first (kubegpu doctor node on that node, dmesg | grep -i xid); "
            "remove the taint only after the GPU is reset or replaced",
        )
    if untainted:
        return warn(
            f"GPU node(s) without the nvidia.com/gpu NoSchedule taint: {', '.join(untainted)}; "
            "pods that need "
            "no GPU can fill their CPU and memory",
            *evidence,
            fix="\n".join(f"kubectl taint nodes {n} nvidia.com/gpu=present:NoSchedule" for n in untainted)
            + "\nand give GPU pods: "
            "tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]",
        )
    return ok("every GPU node carries the nvidia.com/gpu NoSchedule taint", *evidence)


def _pod_problem(pod: ApiObject) -> str | None:
    phase = dig(pod, "status", "phase")
    if phase == "Succeeded":
        return None
    waiting = [
        str(dig(s, "state", "waiting", "reason"))
        for s in dig(pod, "status", "containerStatuses", default=[]) or []
        if dig(s, "state", "waiting", "reason")
    ]
    if phase != "Running" or waiting:
        return ", ".join(waiting) or str(phase)
    return None


def check_gpu_operator(ctx: ClusterContext) -> Outcome:
    scope = {node_name(n) for n in ctx.scope}
    stack = [
        p
        for p in ctx.pods
        if dig(p, "metadata", "namespace") in GPU_OPERATOR_NAMESPACES
        and (dig(p, "spec", "nodeName") in scope or not dig(p, "spec", "nodeName"))
    ]
    mig_states = [
        (node_name(n), str(dig(n, "metadata", "labels", "nvidia.com/mig.config.state")))
        for n in ctx.scope
        if dig(n, "metadata", "labels", "nvidia.com/mig.config.state") not in (None, "success")
    ]
    if not stack and not mig_states:
        return skip("no GPU Operator pods (namespace gpu-operator or nvidia-gpu-operator) on the GPU nodes")
    broken = [(pod_name(p), problem) for p in stack if (problem := _pod_problem(p)) is not None]
    evidence = [f"{pod_name(p)} on {dig(p, 'spec', 'nodeName')}: {dig(p, 'status', 'phase')}" for p in stack]
    evidence += [f"{n}: nvidia.com/mig.config.state={state}" for n, state in mig_states]
    chain = [(name, problem) for name, problem in broken if any(c in name for c in CHAIN_COMPONENTS)]
    failed_mig = [n for n, state in mig_states if state == "failed"]
    if chain or failed_mig:
        return fail(
            "GPU Operator component(s) that deliver the GPU are broken: "
            + ", ".join(
                [f"{n} ({p})" for n, p in chain] + [f"MIG reconfiguration failed on {n}" for n in failed_mig]
            ),
            *evidence,
            fix="kubectl -n gpu-operator describe pod <pod>; "
            "kubectl -n gpu-operator logs <pod> --all-containers\n"
            "MIG: kubectl -n gpu-operator logs -l app=nvidia-mig-manager; "
            "check the nvidia.com/mig.config label",
        )
    if broken or mig_states:
        return warn(
            "GPU Operator pod(s) not running: "
            + ", ".join(
                [f"{n} ({p})" for n, p in broken] + [f"MIG config {s} on {n}" for n, s in mig_states]
            ),
            *evidence,
            fix="kubectl -n gpu-operator get pods -o wide  "
            "# device plugin, DCGM, MIG manager should be Running",
        )
    return ok(f"{len(stack)} GPU Operator pod(s) running on the GPU nodes", *evidence)


CLUSTER_CHECKS: tuple[Check[ClusterContext], ...] = (
    Check(id=ID_API, layer=Layer.CLUSTER, needs=(), run=check_api),
    Check(id=ID_PLUGIN_POD, layer=Layer.PLUGIN, needs=(ID_API,), run=check_plugin_pod),
    Check(id=ID_OPERATOR, layer=Layer.CLUSTER, needs=(ID_API,), run=check_gpu_operator),
    Check(id=ID_ALLOCATABLE, layer=Layer.CLUSTER, needs=(ID_API,), run=check_allocatable),
    Check(id=ID_CAPACITY, layer=Layer.CLUSTER, needs=(ID_API,), run=check_capacity),
    Check(id=ID_NODE_READY, layer=Layer.CLUSTER, needs=(ID_API,), run=check_node_ready),
    Check(id=ID_LABELS, layer=Layer.CLUSTER, needs=(ID_API,), run=check_labels),
    Check(id=ID_TAINTS, layer=Layer.CLUSTER, needs=(ID_API,), run=check_taints),
)
