"""Pod checks: why does this pod not get a GPU, or not get one that works.

The last links of the chain, from the pod's side: its GPU request (seed 001 §4.1), why it is Pending
(seed 001 §5.3: GPUs taken, CPU/memory short, labels or taints), what its spec does to the devices it
gets (``NVIDIA_VISIBLE_DEVICES``, ``/dev/shm``), and what its logs say (seed 001 §5.4-5.5, and
exercise 4 of seed 000: "Failed to initialize NVML: Unknown Error" and its four causes, in order).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from kubegpu.doctor.chain import Check
from kubegpu.doctor.cluster import (
    ID_API,
    ClusterContext,
    is_gpu_resource,
    node_name,
    pod_gpu_request,
    pod_name,
    pod_terminated,
)
from kubegpu.doctor.clusterprobe import ApiObject, dig
from kubegpu.doctor.finding import CheckId, Layer, Outcome, fail, ok, skip, warn
from kubegpu.errors import PlacementError
from kubegpu.model.assignment import ANNOTATION, assignment_of

__all__ = ["POD_CHECKS", "PodContext"]

ID_FOUND = CheckId("pod.found")
ID_REQUESTS = CheckId("pod.requests")
ID_PENDING = CheckId("pod.pending")
ID_VISIBLE = CheckId("pod.visible-devices")
ID_SHM = CheckId("pod.shm")
ID_LOGS = CheckId("pod.logs")
ID_PULL = CheckId("pod.image-pull")
ID_SHARE = CheckId("pod.gpu-share")
ID_MPS_ENV = CheckId("pod.mps-env")
MILLI_RESOURCE = "kubegpu.io/gpu-milli"

# A GPU pod whose image has been pulling this long is worth pre-pulling (GPU images are often >10 GB).
SLOW_PULL_S = 120.0
PREPULL_VALUE = "prepull.images"

GPU_IMAGE_HINT = re.compile(
    r"cuda|pytorch|tensorflow|nvcr\.io|nvidia|triton|vllm|tensorrt|sglang|cudnn", re.I
)
GPU_ENV_HINT = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")
TOLERATION = "tolerations: [{{key: {key}, operator: Exists, effect: NoSchedule}}]"
SHM_YAML = (
    "volumes: [{name: dshm, emptyDir: {medium: Memory, sizeLimit: 8Gi}}]\n"
    "containers[].volumeMounts: [{name: dshm, mountPath: /dev/shm}]"
)


@dataclass(kw_only=True)
class PodContext:
    """The pod under examination, read once, and the cluster it lives in."""

    cluster: ClusterContext
    namespace: str
    name: str
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    @cached_property
    def pod(self) -> ApiObject | None:
        return self.cluster.api.get_pod(self.namespace, self.name)

    @property
    def spec_pod(self) -> ApiObject:
        return self.pod or {}

    @cached_property
    def events(self) -> list[ApiObject]:
        return self.cluster.events("Pod", self.namespace, self.name)

    @property
    def containers(self) -> list[ApiObject]:
        return list(dig(self.spec_pod, "spec", "containers", default=[]) or [])

    @property
    def gpus(self) -> int:
        return pod_gpu_request(self.spec_pod)

    @cached_property
    def node(self) -> ApiObject | None:
        name = dig(self.spec_pod, "spec", "nodeName")
        return next((n for n in self.cluster.nodes if node_name(n) == name), None) if name else None


def check_found(ctx: PodContext) -> Outcome:
    pod = ctx.pod
    if pod is None:
        return fail(
            f"pod {ctx.namespace}/{ctx.name} not found",
            fix=f"kubectl -n {ctx.namespace} get pods  # the name, or the namespace, is different",
        )
    return ok(
        f"pod {ctx.namespace}/{ctx.name}: {dig(pod, 'status', 'phase')}"
        + (f" on {dig(pod, 'spec', 'nodeName')}" if dig(pod, "spec", "nodeName") else ""),
        f"GPUs requested: {ctx.gpus}",
    )


def check_requests(ctx: PodContext) -> Outcome:
    problems, evidence = [], []
    for c in [*ctx.containers, *(dig(ctx.spec_pod, "spec", "initContainers", default=[]) or [])]:
        limits = dig(c, "resources", "limits", default={}) or {}
        requests = dig(c, "resources", "requests", default={}) or {}
        for res in sorted({*limits, *requests}):
            if not is_gpu_resource(res):
                continue
            lim, req = limits.get(res), requests.get(res)
            evidence.append(f"container {c.get('name')}: {res} requests={req} limits={lim}")
            if lim is None:
                problems.append(f"container {c.get('name')}: {res} in requests ({req}) but not in limits")
            elif req is not None and str(req) != str(lim):
                problems.append(f"container {c.get('name')}: {res} requests {req} ≠ limits {lim}")
    if problems:
        return fail(
            "GPU requests differ from limits: extended resources cannot be overcommitted, so Kubernetes "
            "rejects the pod (" + "; ".join(problems) + ")",
            *evidence,
            fix='write only limits (requests default to them): resources: {limits: {"nvidia.com/gpu": 1}}',
        )
    if ctx.gpus > 0:
        return ok(f"requests {ctx.gpus} GPU(s), requests equal limits", *evidence)
    hints = []
    for c in ctx.containers:
        image = str(c.get("image", ""))
        if GPU_IMAGE_HINT.search(image):
            hints.append(f"container {c.get('name')}: image {image}")
        hints += [
            f"container {c.get('name')}: env {e.get('name')}={e.get('value', '')}"
            for e in c.get("env") or []
            if e.get("name") in GPU_ENV_HINT
        ]
        command = " ".join(str(x) for x in [*(c.get("command") or []), *(c.get("args") or [])])
        if "nvidia-smi" in command:
            hints.append(f"container {c.get('name')}: runs {command}")
    if hints:
        return warn(
            "the pod requests no nvidia.com/gpu, but its containers look like they need one: without a "
            "request the device plugin injects no device, so the container sees no GPU",
            *hints,
            fix='resources: {limits: {"nvidia.com/gpu": 1}}  # in the container that uses the GPU',
        )
    return ok("the pod requests no GPU and nothing in it suggests it needs one")


_CLAUSE_RE = re.compile(r"(\d+) ([^,]+?(?:\{[^}]*\}[^,]*)?)(?:,|$)")


def scheduling_clauses(message: str) -> list[str]:
    """The reasons of a FailedScheduling message, e.g. ``1 Insufficient nvidia.com/gpu``."""
    text = message.split(" preemption:", 1)[0]
    if "available:" in text:
        text = text.split("available:", 1)[1]
    return [f"{m.group(1)} {m.group(2).strip().rstrip('.')}" for m in _CLAUSE_RE.finditer(text.strip())]


def _resource_request(pod: ApiObject, resource: str) -> int:
    return sum(
        _count(dig(c, "resources", "limits", resource) or dig(c, "resources", "requests", resource))
        for c in dig(pod, "spec", "containers", default=[]) or []
    )


def _count(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _gpu_holders(ctx: PodContext, resource: str) -> list[str]:
    """Per GPU node: how many of ``resource`` are allocatable, allocated, and to which pods."""
    lines = []
    for node in ctx.cluster.scope:
        alloc = _count(dig(node, "status", "allocatable", resource, default=0))
        holders = [
            (pod_name(p), _resource_request(p, resource))
            for p in ctx.cluster.pods
            if dig(p, "spec", "nodeName") == node_name(node)
            and not pod_terminated(p)
            and _resource_request(p, resource) > 0
        ]
        used = sum(n for _, n in holders)
        who = ", ".join(f"{name} ({n})" for name, n in holders) or "nobody"
        lines.append(f"{node_name(node)}: {used}/{alloc} {resource} allocated, held by {who}")
    return lines


def _explain_clause(ctx: PodContext, clause: str) -> tuple[int, str, list[str], str]:
    """(priority, cause, evidence, fix) for one FailedScheduling reason; lower priority is reported first."""
    low = clause.lower()
    spec = ctx.spec_pod.get("spec", {})
    insufficient = re.match(r"\d+ Insufficient (\S+)", clause)
    if insufficient and is_gpu_resource(insufficient.group(1)):
        resource = insufficient.group(1)
        asked_for = _resource_request(ctx.spec_pod, resource)
        advertised = [n for n in ctx.cluster.nodes if _count(dig(n, "status", "allocatable", resource)) > 0]
        if not advertised:
            others = sorted(
                {k for n in ctx.cluster.nodes for k in dig(n, "status", "allocatable", default={}) or {}}
            )
            gpu_kinds = [k for k in others if is_gpu_resource(k)]
            return (
                0,
                f"no node advertises {resource} at all ({clause})",
                [f"resources advertised in the cluster: {', '.join(gpu_kinds) or 'none'}"],
                "MIG resources (nvidia.com/mig-<profile>) exist only with the device plugin's mixed MIG "
                "strategy on MIG-partitioned GPUs "
                "(kubectl label nodes <node> nvidia.com/mig.config=<config>); "
                "otherwise request nvidia.com/gpu",
            )
        largest = max(_count(dig(n, "status", "allocatable", resource)) for n in advertised)
        if asked_for > largest:
            # no amount of freeing helps: the pod asks for more than any one node has
            sizes = [
                f"{node_name(n)}: {_count(dig(n, 'status', 'allocatable', resource))}" for n in advertised
            ]
            return (
                0,
                f"the pod asks for {asked_for} {resource} and the largest node has {largest}; a pod's "
                f"GPUs all come from one node ({clause})",
                [f"{resource} allocatable per node: {', '.join(sizes[:10])}"]
                + ([f"... and {len(sizes) - 10} more nodes"] if len(sizes) > 10 else []),
                f"ask for at most {largest} {resource} per pod (split the job across pods, e.g. one "
                f"worker per node), or add a node with {asked_for} or more GPUs",
            )
        return (
            0,
            f"not enough free {resource} for {asked_for} ({clause})",
            _gpu_holders(ctx, resource),
            "free GPUs (scale down or delete a holder listed above), add GPU nodes, or make the pod's "
            "nodeSelector/tolerations match the GPU nodes that have free GPUs",
        )
    if "taint" in low:
        taint = re.search(r"\{([^:}]+):?\s*([^}]*)\}", clause)
        key = taint.group(1).strip() if taint else "<key>"
        return (
            1,
            f"a node taint the pod does not tolerate ({clause})",
            [f"pod tolerations: {spec.get('tolerations') or '(none)'}"],
            TOLERATION.format(key=key) + "  # in the pod spec",
        )
    if "affinity" in low or "selector" in low:
        evidence = [f"pod nodeSelector: {spec.get('nodeSelector') or '(none)'}"]
        for node in ctx.cluster.scope:
            labels = dig(node, "metadata", "labels", default={}) or {}
            wanted = spec.get("nodeSelector") or {}
            lacking = [f"{k}={v}" for k, v in wanted.items() if labels.get(k) != v]
            evidence.append(f"GPU node {node_name(node)} lacks: {', '.join(lacking) or '(nothing)'}")
        return (
            2,
            f"the pod's nodeSelector/affinity matches no node with a free GPU ({clause})",
            evidence,
            "fix the pod's nodeSelector/affinity, or label the GPU node: "
            "kubectl label nodes <node> <key>=<value>",
        )
    if "insufficient cpu" in low or "insufficient memory" in low:
        asked = [
            f"container {c.get('name')}: requests {dig(c, 'resources', 'requests', default={})}"
            for c in ctx.containers
        ]
        nodes = [
            f"{node_name(n)} allocatable cpu={dig(n, 'status', 'allocatable', 'cpu')} "
            f"memory={dig(n, 'status', 'allocatable', 'memory')}"
            for n in ctx.cluster.scope
        ]
        return (
            3,
            f"a GPU may be free but the node's CPU or memory is not ({clause})",
            asked + nodes,
            "lower the pod's cpu/memory requests, move CPU-only pods off GPU nodes (taint them), or add "
            "capacity: kubectl describe node <node> | grep -A 8 'Allocated resources'",
        )
    if "unschedulable" in low:
        return (4, f"the node is cordoned ({clause})", [], "kubectl uncordon <node>  # once it is healthy")
    return (5, clause, [], "kubectl describe pod  # read the scheduler's message")


SANDBOX_TABLE: tuple[tuple[str, str, str], ...] = (
    (
        r'no runtime for "?nvidia"? is configured|RuntimeHandler "?nvidia"? not supported',
        "the pod asks for RuntimeClass nvidia but containerd on its node has no nvidia runtime",
        "on the node: nvidia-ctk runtime configure --runtime=containerd && systemctl restart containerd",
    ),
    (
        r"UnexpectedAdmissionError|Allocate failed|failed to allocate",
        "kubelet admitted the pod but the device plugin's Allocate failed (GPU unhealthy, plugin restarted)",
        "kubectl delete pod <pod>  # reschedule; kubectl logs <plugin-pod> for the Allocate error",
    ),
    (
        r"nvidia-container-cli|nvidia-container-runtime",
        "the NVIDIA runtime hook failed while creating the container "
        "(driver not loaded or libraries missing)",
        "on the node: kubegpu doctor node  # host.driver-loaded, host.nvml, runtime.*",
    ),
    (
        r"ErrImagePull|ImagePullBackOff|Failed to pull image",
        "the image cannot be pulled (name, registry credentials, or size: GPU images are often >10 GB)",
        "kubectl describe pod <pod>; pre-pull large images with the chart's prepull.images (docs/deploy.md)",
    ),
)


def check_pending(ctx: PodContext) -> Outcome:
    pod = ctx.spec_pod
    phase = dig(pod, "status", "phase")
    node = dig(pod, "spec", "nodeName")
    if phase != "Pending":
        return ok(f"the pod is {phase}" + (f" on {node}" if node else ""))
    if not node:
        messages = [str(e.get("message", "")) for e in ctx.events if e.get("reason") == "FailedScheduling"]
        condition: dict[str, Any] = next(
            (
                c
                for c in dig(pod, "status", "conditions", default=[]) or []
                if c.get("type") == "PodScheduled"
            ),
            {},
        )
        if not messages and condition.get("message"):
            messages = [str(condition["message"])]
        if not messages:
            return warn(
                "the pod is Pending and not scheduled, with no scheduling event yet",
                fix=f"kubectl -n {ctx.namespace} describe pod {ctx.name} | grep -A 5 Events",
            )
        clauses = scheduling_clauses(messages[-1]) or [messages[-1]]
        explained = sorted((_explain_clause(ctx, c) for c in clauses), key=lambda x: x[0])
        evidence = [f"event FailedScheduling: {messages[-1]}"]
        for _, _, ev, _ in explained:
            evidence += ev
        return fail(
            "the scheduler cannot place the pod: " + "; ".join(e[1] for e in explained),
            *evidence,
            fix="\n".join(dict.fromkeys(e[3] for e in explained)),
        )
    texts = [f"event {e.get('reason')}: {e.get('message')}" for e in ctx.events if e.get("type") == "Warning"]
    texts += [
        f"container {s.get('name')}: {dig(s, 'state', 'waiting', 'reason')}: "
        f"{dig(s, 'state', 'waiting', 'message', default='')}"
        for s in dig(pod, "status", "containerStatuses", default=[]) or []
        if dig(s, "state", "waiting")
    ]
    for pattern, cause, fix in SANDBOX_TABLE:
        hits = [t for t in texts if re.search(pattern, t, re.IGNORECASE)]
        if hits:
            return fail(f"scheduled on {node} but not started: {cause}", *hits, fix=fix)
    return warn(
        f"scheduled on {node}, containers not started yet",
        *texts,
        fix=f"kubectl -n {ctx.namespace} describe pod {ctx.name}",
    )


def check_visible_devices(ctx: PodContext) -> Outcome:
    settings = [
        (str(c.get("name")), str(e.get("value", "")))
        for c in ctx.containers
        for e in c.get("env") or []
        if e.get("name") == "NVIDIA_VISIBLE_DEVICES"
    ]
    if not settings:
        return ok("NVIDIA_VISIBLE_DEVICES is left to the device plugin")
    evidence = [f"container {name}: env NVIDIA_VISIBLE_DEVICES={value!r}" for name, value in settings]
    fix = (
        "remove NVIDIA_VISIBLE_DEVICES from the pod spec: the device plugin sets it to the GPUs it assigned; "
        "to pick among those inside the container use CUDA_VISIBLE_DEVICES (indices count from 0 in the "
        "container)"
    )
    if ctx.gpus > 0 and any(v.strip().lower() in ("", "void", "none") for _, v in settings):
        return fail(
            "the pod spec sets NVIDIA_VISIBLE_DEVICES to none/void/empty: the container hides the GPU it was "
            "given",
            *evidence,
            fix=fix,
        )
    if ctx.gpus == 0:
        return warn(
            "the pod sets NVIDIA_VISIBLE_DEVICES without requesting a GPU: with a runtime that honours the "
            "variable it sees GPUs the scheduler gave to other pods; otherwise it sees none",
            *evidence,
            fix='request the GPU instead: resources: {limits: {"nvidia.com/gpu": 1}}; ' + fix,
        )
    return warn(
        "the pod spec overrides NVIDIA_VISIBLE_DEVICES: the container may see GPUs other than the ones the "
        "device plugin assigned (and held by other pods), or fewer",
        *evidence,
        fix=fix,
    )


def check_shm(ctx: PodContext) -> Outcome:
    if ctx.gpus == 0:
        return skip("the pod requests no GPU")
    spec = ctx.spec_pod.get("spec", {})
    if spec.get("hostIPC"):
        return ok("the pod uses the host's IPC namespace (hostIPC: true), so the host's /dev/shm")
    memory_volumes = {
        str(v.get("name")): dig(v, "emptyDir", "sizeLimit", default="node memory")
        for v in spec.get("volumes") or []
        if dig(v, "emptyDir", "medium") == "Memory"
    }
    lacking, evidence = [], []
    for c in ctx.containers:
        if pod_gpu_request({"spec": {"containers": [c]}}) == 0:
            continue
        mounts = {str(m.get("mountPath")): str(m.get("name")) for m in c.get("volumeMounts") or []}
        vol = mounts.get("/dev/shm")
        if vol in memory_volumes:
            evidence.append(
                f"container {c.get('name')}: /dev/shm from emptyDir Memory ({memory_volumes[vol]})"
            )
        else:
            lacking.append(str(c.get("name")))
    if lacking:
        return warn(
            f"/dev/shm is the container default 64 MB in {', '.join(lacking)}: multi-process inference and "
            "training (NCCL, DataLoader workers, tensor parallel) fail or slow down",
            *evidence,
            fix=SHM_YAML,
        )
    return ok("/dev/shm is memory-backed in every GPU container", *evidence)


NVML_UNKNOWN = "failed to initialize nvml: unknown error"
LOG_TABLE: tuple[tuple[str, str, str], ...] = (
    (
        r"Driver/library version mismatch",
        "the host's driver was upgraded but its old kernel module is still loaded",
        "on the node: reboot (drain first) or reload the nvidia modules; kubegpu doctor node",
    ),
    (
        r"no kernel image is available for execution on the device",
        "the image's CUDA build has no code for this GPU's compute capability (CUDA too old for the "
        "architecture, or too new and dropped it)",
        "use an image built for the GPU's compute capability "
        "(node label nvidia.com/gpu.compute.major/minor): "
        "a newer CUDA base for Ampere/Hopper, or one that still supports older GPUs; or build with "
        "TORCH_CUDA_ARCH_LIST / -gencode for it",
    ),
    (
        r"CUDA driver version is insufficient for CUDA runtime version",
        "the host driver is older than the CUDA version in the image",
        "upgrade the host driver, or use an image built for an older CUDA (nvidia-smi shows the highest "
        "CUDA version the driver supports)",
    ),
    (
        r"nvidia-smi: (command )?not found|\"nvidia-smi\": executable file not found",
        "the image has no nvidia-smi: the device may be injected fine, the tool is missing from the image",
        "use an NVIDIA CUDA base image (nvidia/cuda:<version>-base-…) or install nvidia-utils-<branch> "
        "matching the host driver's branch (a different branch gives NVML version mismatches)",
    ),
    (
        r"lib(nvidia-ml|cuda)\.so(\.1)?: cannot open shared object file",
        "the driver libraries were not injected: the container did not run under the NVIDIA runtime, or "
        "NVIDIA_DRIVER_CAPABILITIES lacks compute,utility",
        "on the node: kubegpu doctor node (runtime.containerd); or set runtimeClassName: nvidia",
    ),
    (
        r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError|cudaErrorMemoryAllocation",
        "GPU memory ran out (the process crashed; the container is not OOM-killed like for host memory)",
        "lower the batch size, use gradient accumulation, enable mixed precision (torch.cuda.amp: often "
        "30-50% less memory); watch DCGM_FI_DEV_FB_USED or nvidia-smi for who holds the memory; on a "
        "time-sliced GPU the neighbours share it (vLLM: --gpu-memory-utilization)",
    ),
    (
        r"no CUDA-capable device is detected|CUDA driver initialization failed|Found no NVIDIA driver",
        "the container sees no GPU",
        "request nvidia.com/gpu in limits; do not override NVIDIA_VISIBLE_DEVICES; check the node's runtime "
        "(kubegpu doctor node)",
    ),
)


def _nvml_unknown_error(ctx: PodContext, line: str) -> tuple[str, list[str], str]:
    spec = ctx.spec_pod.get("spec", {})
    labels = dig(ctx.node, "metadata", "labels", default={}) or {}
    images = ", ".join(str(c.get("image")) for c in ctx.containers)
    cuda = re.search(r"cuda[:\-_]?v?(\d+\.\d+)", images, re.IGNORECASE)
    driver = labels.get("nvidia.com/cuda.driver-version.full") or labels.get("nvidia.com/cuda.driver.major")
    causes = [
        "(1) the container runtime is not the nvidia runtime (no RuntimeClass, or containerd's "
        f"default_runtime_name is not nvidia), so no device nodes were injected; runtimeClassName: "
        f"{spec.get('runtimeClassName') or '(none)'}; check runtime.containerd with kubegpu doctor node",
        "(2) the pod requests no GPU, so the device plugin injected none: "
        + (f"ruled out, it requests {ctx.gpus}" if ctx.gpus else "APPLIES: no nvidia.com/gpu in limits"),
        "(3) the driver and the container's CUDA are incompatible: "
        f"image CUDA {cuda.group(1) if cuda else 'unknown'}, "
        f"node driver {driver or 'unknown (no GFD label)'}",
        "(4) cgroup v2: the device cgroup was rewritten after the container started "
        "(systemctl daemon-reload, "
        "container update); NVIDIA's fix: CDI device injection (nvidia-ctk cdi generate, plugin "
        "deviceListStrategy cdi-cri) or nvidia-ctk system create-dev-char-symlinks --create-all",
    ]
    likely = causes[1] if not ctx.gpus else causes[0]
    summary = (
        f"'Failed to initialize NVML: Unknown Error' in the container; most likely {likely.split(',')[0]}"
    )
    fix = (
        f"kubectl -n {ctx.namespace} describe pod {ctx.name}  "
        "# 1. requests/limits really hold nvidia.com/gpu\n"
        f"kubectl -n {ctx.namespace} exec {ctx.name} -- ls -l /dev/nvidia*  "
        "# 2. the devices reached the container\n"
        "on the node: nvidia-smi, and kubectl logs <device-plugin-pod>  # 3. host driver and plugin"
    )
    return summary, [f"log: {line}", *causes], fix


def check_logs(ctx: PodContext) -> Outcome:
    statuses = dig(ctx.spec_pod, "status", "containerStatuses", default=[]) or []
    started = [
        s
        for s in statuses
        if dig(s, "state", "running") or dig(s, "state", "terminated") or s.get("restartCount")
    ]
    if not started:
        return skip("no container has started, so there are no logs")
    crash = []
    for s in started:
        name = str(s.get("name"))
        texts = [ctx.cluster.api.read_log(ctx.namespace, ctx.name, name)]
        if s.get("restartCount"):
            texts.append(ctx.cluster.api.read_log(ctx.namespace, ctx.name, name, previous=True))
        lines = [line.strip() for text in texts for line in (text or "").splitlines()]
        for line in lines:
            if NVML_UNKNOWN in line.lower():
                summary, evidence, fix = _nvml_unknown_error(ctx, line)
                return fail(summary, f"container {name}", *evidence, fix=fix)
        for pattern, cause, fix in LOG_TABLE:
            hit = next((line for line in lines if re.search(pattern, line, re.IGNORECASE)), None)
            if hit is not None:
                return fail(f"container {name}: {cause}", f"log: {hit}", fix=fix)
        if dig(s, "state", "waiting", "reason") == "CrashLoopBackOff":
            crash.append((name, s.get("restartCount"), lines[-5:]))
    if crash:
        name, restarts, tail = crash[0]
        return fail(
            f"container {name} crash-loops (restarts {restarts}) with no known GPU message in its log",
            *(f"log: {line}" for line in tail),
            fix="kubectl logs <pod> --previous; if the device plugin is installed but the node's container "
            "runtime is not configured for NVIDIA, GPU containers cannot start: kubegpu doctor node",
        )
    return ok(f"no known GPU error in the logs of {len(started)} container(s)")


_PULLING_RE = re.compile(r'[Pp]ulling image "([^"]+)"')
_PULLED_RE = re.compile(
    r'(?:[Ss]uccessfully pulled|already present on machine).*?image "([^"]+)"|image "([^"]+)" already'
)


def _event_time(event: ApiObject) -> datetime | None:
    for key in ("firstTimestamp", "eventTime", "lastTimestamp"):
        text = event.get(key)
        if text:
            try:
                return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
            except ValueError:
                continue
    return None


def _age(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def check_image_pull(ctx: PodContext) -> Outcome:
    """A GPU pod scheduled but not started because kubelet is still pulling a (large) image."""
    pod = ctx.spec_pod
    if ctx.gpus == 0:
        return skip("the pod requests no GPU")
    if dig(pod, "status", "phase") != "Pending" or not dig(pod, "spec", "nodeName"):
        return ok("no image pull in progress (the pod is not waiting on its node)")
    started: dict[str, datetime | None] = {}
    for e in ctx.events:
        message = str(e.get("message", ""))
        if e.get("reason") == "Pulling" and (m := _PULLING_RE.search(message)):
            started.setdefault(m.group(1), _event_time(e))
        elif e.get("reason") == "Pulled" and (m := _PULLED_RE.search(message)):
            started.pop(m.group(1) or m.group(2), None)
    now = ctx.now()
    slow = [
        (image, (now - at).total_seconds())
        for image, at in started.items()
        if at is not None and (now - at).total_seconds() >= SLOW_PULL_S
    ]
    if not slow:
        if started:
            return ok(f"pulling {', '.join(started)} for under {_age(SLOW_PULL_S)}")
        return ok("no image pull in progress")
    images = [image for image, _ in slow]
    return warn(
        f"the GPU pod is waiting in ContainerCreating while its node pulls {', '.join(images)} "
        f"(for {_age(max(age for _, age in slow))}): its GPU is reserved but idle until the pull ends",
        *(
            f"event Pulling: image {image} started {_age(age)} ago, no Pulled event yet"
            for image, age in slow
        ),
        fix="pre-pull large images on GPU nodes with kubegpu's chart: helm upgrade kubegpu "
        f"deploy/helm/kubegpu --reuse-values --set '{PREPULL_VALUE}={{{','.join(images)}}}' "
        "(docs/deploy.md, Pre-pulling images)",
    )


def check_share(ctx: PodContext) -> Outcome:
    """A share of one GPU (``kubegpu.io/gpu-milli``) needs kubegpu extender's assignment on the pod and a
    node whose agent serves the resource (``kubegpu.fractional``)."""
    asks = [
        f"container {c.get('name')}: {MILLI_RESOURCE} {v}"
        for c in [*(dig(ctx.spec_pod, "spec", "initContainers", default=[]) or []), *ctx.containers]
        for v in [(dig(c, "resources", "limits", default={}) or {}).get(MILLI_RESOURCE)]
        if v is not None
    ]
    if not asks:
        return ok(f"no share of one GPU ({MILLI_RESOURCE}) asked")
    where = dig(ctx.spec_pod, "spec", "nodeName")
    if not where:
        scheduler = dig(ctx.spec_pod, "spec", "schedulerName") or "default-scheduler"
        if scheduler == "default-scheduler":
            return warn(
                f"a share of one GPU, but the pod is left to the default scheduler, which does not place "
                f"{MILLI_RESOURCE}",
                *asks,
                fix="spec: {schedulerName: kubegpu}  # kubegpu extender's profile (docs/extender.md)",
            )
        return ok(f"a share of one GPU, not bound yet (scheduler {scheduler})", *asks)
    try:
        assignment = assignment_of(ctx.spec_pod)
    except PlacementError as exc:
        return fail(f"{exc}", *asks, fix="delete the pod; kubegpu extender writes the annotation at bind")
    if assignment is None:
        return fail(
            f"bound to {where} without the {ANNOTATION} annotation: the node agent cannot tell which GPU "
            "the share is on, and kubelet refuses the pod",
            *asks,
            fix="spec: {schedulerName: kubegpu}  # let kubegpu extender place (and annotate) the pod",
        )
    served = dig(ctx.node or {}, "status", "allocatable", default={}) or {}
    if str(served.get(MILLI_RESOURCE, "0")) in ("0", ""):
        return fail(
            f"node {where} does not advertise {MILLI_RESOURCE}: its agent does not serve shares",
            *asks,
            f"assignment: GPU {list(assignment.gpus)} {list(assignment.uuids)}",
            fix="helm upgrade ... --set fractional.enabled=true  # kubegpu.fractional on the node's agent",
        )
    return ok(
        f"a share of GPU {assignment.gpus[0]} on {where} ({assignment.milli}m)",
        *asks,
        f"{ANNOTATION}: uuids {list(assignment.uuids)}",
    )


MPS_ENV_PREFIX = "CUDA_MPS_"


def _milli_of(container: ApiObject) -> float | None:
    for section in ("limits", "requests"):
        value = (dig(container, "resources", section, default={}) or {}).get(MILLI_RESOURCE)
        if value is not None:
            try:
                return float(str(value).removesuffix("k")) * (1000 if str(value).endswith("k") else 1)
            except ValueError:
                return None
    return None


def check_mps_env(ctx: PodContext) -> Outcome:
    """A share's MPS limits reach its container as environment variables from Allocate; kubelet puts the
    pod spec's own variables after them, so a spec that sets ``CUDA_MPS_*`` wins over the agent
    (``kubegpu.mps.shares``, docs/agent.md "What a container can override")."""
    containers = [*(dig(ctx.spec_pod, "spec", "initContainers", default=[]) or []), *ctx.containers]
    shares = [(c, m) for c in containers for m in [_milli_of(c)] if m is not None]
    if not shares:
        return ok(f"no share of one GPU ({MILLI_RESOURCE}) asked: no MPS limits to keep")
    failing, evidence = False, []
    for c, milli in shares:
        name = c.get("name")
        for e in c.get("env") or []:
            var = str(e.get("name", ""))
            if not var.startswith(MPS_ENV_PREFIX):
                continue
            value = e.get("value")
            evidence.append(
                f"container {name} ({milli:g}m): env {var}={value!r}"
                if value is not None
                else f"container {name} ({milli:g}m): env {var} from valueFrom"
            )
            if var == "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" and value is not None:
                try:
                    failing |= float(str(value)) > milli / 10
                except ValueError:
                    failing = True
            else:
                failing = True  # another pipe, a memory cap we cannot compare, or a value we cannot see
        if c.get("envFrom"):
            evidence.append(f"container {name}: envFrom may set {MPS_ENV_PREFIX}* too (not read here)")
    if not evidence:
        return ok(f"{MPS_ENV_PREFIX}* is left to the device plugin (the share's MPS limits)")
    fix = (
        f"remove {MPS_ENV_PREFIX}* from the pod spec: the agent sets the MPS pipe and the share's limits "
        "(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = milli/10, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT = its milli of "
        "the GPU's memory); a lower thread percentage may stay"
    )
    if failing:
        return fail(
            "the pod spec sets MPS client variables that override its share's limits: the spec's env wins "
            "over the device plugin's, so the container may take more of the GPU than its share, or leave "
            "the node's MPS daemon",
            *evidence,
            fix=fix,
        )
    return warn("the pod spec sets MPS client variables next to its share's", *evidence, fix=fix)


POD_CHECKS: tuple[Check[PodContext], ...] = (
    Check(id=ID_FOUND, layer=Layer.POD, needs=(ID_API,), run=check_found),
    Check(id=ID_REQUESTS, layer=Layer.POD, needs=(ID_FOUND,), run=check_requests),
    Check(id=ID_PENDING, layer=Layer.POD, needs=(ID_FOUND,), run=check_pending),
    Check(id=ID_VISIBLE, layer=Layer.POD, needs=(ID_FOUND,), run=check_visible_devices),
    Check(id=ID_SHM, layer=Layer.POD, needs=(ID_FOUND,), run=check_shm),
    Check(id=ID_LOGS, layer=Layer.POD, needs=(ID_FOUND,), run=check_logs),
    Check(id=ID_PULL, layer=Layer.POD, needs=(ID_FOUND,), run=check_image_pull),
    Check(id=ID_SHARE, layer=Layer.POD, needs=(ID_FOUND,), run=check_share),
    Check(id=ID_MPS_ENV, layer=Layer.POD, needs=(ID_FOUND,), run=check_mps_env),
)
