"""The sim's second engine: a seed's arrivals replayed through a real API server and kube-scheduler.

Why: ``kubegpu sim`` predicts what a placement policy allocates; this engine measures what a real
scheduler does with the same arrivals. It creates one fake node per trace node (for kwok, which keeps
them Ready and turns bound pods Running; no kubelet runs), submits the pods of ``arrivals`` for a
seed (the sim's own arrival code) through the API server in arrival order, and records what the
scheduler did with each: the node it bound the pod to and the GPUs the pod got there, or that it
found no room.

* Nodes: cpu, memory, ``pods``, ``nvidia.com/gpu`` = GPUs and ``kubegpu.io/gpu-milli`` = 1000 x GPUs
  as capacity and allocatable; the GPU model as label ``nvidia.com/gpu.product`` and the count as
  ``nvidia.com/gpu.count``; made-up stable GPU UUIDs in ``kubegpu.io/gpu-uuids``; the kwok
  annotation and a NoSchedule taint ``kwok.x-k8s.io/node=fake`` so nothing else lands there.
* Pods: whole-GPU pods ask ``nvidia.com/gpu: k``, shared pods ``kubegpu.io/gpu-milli: m``, all ask
  cpu and memory; ``gpu_spec`` becomes a required node affinity on ``nvidia.com/gpu.product``; each
  tolerates the kwok taint and selects the replay's nodes.
* Order: one thread creates the pods, each create answered before the next is sent, so the API
  server commits them, and the scheduler's queue (sorted by arrival time at equal priority) holds
  them, in arrival order; at most ``window`` pods are unresolved at once.
* GPUs: where the scheduler's binder wrote a ``kubegpu.io/gpu-assignment`` annotation
  (``kubegpu extender``), the pod has those GPUs; the engine checks that they have room. For a stock
  scheduler, which only counts ``nvidia.com/gpu`` and ``kubegpu.io/gpu-milli`` per node, the engine
  plays the node's device plugin: a whole-GPU pod gets the lowest-index fully free GPUs, a shared pod
  the fullest GPU that still has room (best fit). A pod the node-level counts let through but no GPU
  can hold fails admission, as kubelet's ``UnexpectedAdmissionError`` would fail it, and is deleted.
* A pod the scheduler finds no room for (``PodScheduled=False``, reason ``Unschedulable``) is deleted
  at once: the sim drops a pod that fits nowhere, and with no departures it never fits later.

The result has the sim's per-arrival arrays, so allocation curves are computed the same way.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import quote

import numpy as np

from kubegpu.errors import ApiServerError, InputError, PlacementError, ReplayError
from kubegpu.kubeapi import ApiObject, KubeApi
from kubegpu.model.assignment import ANNOTATION, UUIDS_ANNOTATION, assignment_of
from kubegpu.sim.curves import discrete_curve
from kubegpu.sim.scoring import MILLI, BoolArray, IntArray
from kubegpu.sim.trace import NodeRecord, PodRecord, Trace
from kubegpu.sim.workload import Workload, arrivals

__all__ = [
    "ASSIGNMENT_ANNOTATION",
    "GPU_MILLI_RESOURCE",
    "GPU_RESOURCE",
    "KWOK_KEY",
    "MODEL_LABEL",
    "DevicePlugin",
    "KubeReplay",
    "KubeReplayConfig",
    "KubeRun",
    "Outcome",
    "gpu_uuid",
    "node_object",
    "pod_object",
]

log = logging.getLogger(__name__)

GPU_RESOURCE = "nvidia.com/gpu"
GPU_MILLI_RESOURCE = "kubegpu.io/gpu-milli"
MODEL_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"
ASSIGNMENT_ANNOTATION = ANNOTATION  # the extender's format, kubegpu.model.assignment
KWOK_KEY = "kwok.x-k8s.io/node"  # annotation (kwok manages the node) and taint key; value "fake"
REPLAY_LABEL = "kubegpu.io/replay"  # on every node and pod the engine creates
REPLAY_VALUE = "openb"
STEP_ANNOTATION = "kubegpu.io/replay-step"
POD_PREFIX = "replay-"
PODS_PER_NODE = 1000
LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
IMAGE = "registry.invalid/kubegpu-replay:1"  # never pulled: kwok runs no containers


class Outcome(StrEnum):
    PLACED = "placed"
    UNSCHEDULABLE = "unschedulable"  # the scheduler found no node
    ADMISSION = "admission"  # bound, but no GPU on the node could hold it (kubelet would refuse it)


def gpu_uuid(node: str, index: int) -> str:
    """A made-up GPU UUID, stable per (node, index), in NVIDIA's ``GPU-8-4-4-4-12`` form."""
    h = hashlib.sha1(f"{node}/{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def node_object(node: NodeRecord) -> ApiObject:
    """The fake Node for one trace node (status included: the API server stores it at create)."""
    resources = {
        "cpu": f"{node.cpu_milli}m",
        "memory": f"{node.memory_mib}Mi",
        "pods": str(PODS_PER_NODE),
        GPU_RESOURCE: str(node.gpu_count),
        GPU_MILLI_RESOURCE: str(node.gpu_count * MILLI),
    }
    labels = {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "type": "kwok",
        REPLAY_LABEL: REPLAY_VALUE,
        COUNT_LABEL: str(node.gpu_count),
    }
    if node.gpu_model:
        labels[MODEL_LABEL] = node.gpu_model
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": labels,
            "annotations": {
                KWOK_KEY: "fake",
                "node.alpha.kubernetes.io/ttl": "0",
                UUIDS_ANNOTATION: ",".join(gpu_uuid(node.name, i) for i in range(node.gpu_count)),
            },
        },
        "spec": {"taints": [{"key": KWOK_KEY, "value": "fake", "effect": "NoSchedule"}]},
        "status": {"capacity": resources, "allocatable": dict(resources)},
    }


def pod_object(
    name: str, pod: PodRecord, *, step: int, scheduler_name: str, milli_on_whole: bool = False
) -> ApiObject:
    """The Pod for one arrival of ``pod`` (the ``step``-th arrival). ``milli_on_whole``: whole-GPU
    pods ask ``kubegpu.io/gpu-milli: 1000 x k`` too, so a stock scheduler's two node-level counts agree."""
    requests = {"cpu": f"{max(pod.cpu_milli, 1)}m", "memory": f"{max(pod.memory_mib, 1)}Mi"}
    if pod.num_gpu == 1 and pod.gpu_milli < MILLI:
        requests[GPU_MILLI_RESOURCE] = str(pod.gpu_milli)
    elif pod.num_gpu:
        requests[GPU_RESOURCE] = str(pod.num_gpu)
        if milli_on_whole:
            requests[GPU_MILLI_RESOURCE] = str(pod.num_gpu * MILLI)
    terms: list[dict[str, Any]] = [{"key": REPLAY_LABEL, "operator": "In", "values": [REPLAY_VALUE]}]
    if pod.gpu_spec:
        terms.append({"key": MODEL_LABEL, "operator": "In", "values": list(pod.gpu_spec)})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {REPLAY_LABEL: REPLAY_VALUE},
            "annotations": {STEP_ANNOTATION: str(step), "kubegpu.io/trace-pod": pod.name},
        },
        "spec": {
            "schedulerName": scheduler_name,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "enableServiceLinks": False,
            # the kwok taint; and the node-lifecycle taints, which a fake node's heartbeat lagging under
            # load would bring for a while: they must not change where the scheduler puts a pod
            "tolerations": [
                {"key": KWOK_KEY, "operator": "Exists", "effect": "NoSchedule"},
                *({"key": key, "operator": "Exists"} for key in LIFECYCLE_TAINTS),
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": terms}]
                    }
                }
            },
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE,
                    "resources": {"requests": requests, "limits": dict(requests)},
                }
            ],
        },
    }


class DevicePlugin:
    """Per-GPU free milli of every node, as the nodes' device plugins would hand GPUs out."""

    def __init__(self, nodes: Iterable[NodeRecord]) -> None:
        self._free = {n.name: np.full(n.gpu_count, MILLI, dtype=np.int64) for n in nodes}

    def assign(self, node: str, num_gpu: int, milli: int) -> tuple[int, ...] | None:
        """The GPUs a stock node would give a pod: the lowest-index fully free GPUs for whole GPUs, the
        fullest GPU with room for a share; ``None`` when none can hold it. Takes them."""
        free = self._free.get(node)
        if num_gpu == 0:
            return ()
        if free is None:
            return None
        if milli >= MILLI:
            idle = np.flatnonzero(free == MILLI)
            if idle.size < num_gpu:
                return None
            gpus = tuple(int(g) for g in idle[:num_gpu])
        else:
            room = np.flatnonzero(free >= milli)
            if room.size == 0:
                return None
            gpus = (int(room[np.argmin(free[room])]),)
        free[list(gpus)] -= milli
        return gpus

    def take(self, node: str, gpus: Sequence[int], milli: int) -> bool:
        """Take GPUs someone else chose (the extender); ``False`` (nothing taken) if they lack room."""
        free = self._free.get(node)
        if not gpus:
            return True
        if free is None or any(g >= free.size for g in gpus) or (free[list(gpus)] < milli).any():
            return False
        free[list(gpus)] -= milli
        return True


@dataclass(frozen=True, kw_only=True)
class KubeReplayConfig:
    """One replay: the seed (and inflation) of the sim's arrivals, which scheduler, and pacing.

    ``limit``: only the first ``limit`` arrivals (a short run). ``window``: pods created but not yet
    bound or refused, at most. ``stall_s``: no pod resolved for this long stops the replay."""

    scheduler_name: str
    seed: int = 42
    inflate: float = 1.3
    namespace: str = "kubegpu-replay"
    window: int = 32
    limit: int | None = None
    stall_s: float = 120.0
    milli_on_whole: bool = False  # whole-GPU pods also ask kubegpu.io/gpu-milli (see ``pod_object``)


@dataclass(frozen=True, kw_only=True, eq=False)
class KubeRun:
    """What the scheduler did with each arrival (arrays in arrival order, like the sim's ``SeedRun``)."""

    scheduler_name: str
    seed: int
    total_gpu_milli: int
    pods: tuple[str, ...]  # trace pod name of each arrival
    arrived_milli: IntArray
    allocated_milli: IntArray
    placed: BoolArray
    outcome: tuple[Outcome, ...]
    node: tuple[str | None, ...]
    gpus: tuple[tuple[int, ...], ...]
    seconds: float  # first create to last pod resolved
    running: int = 0  # pods seen Running (kwok's pod-ready) before the end

    @property
    def count(self) -> int:
        return len(self.outcome)

    @property
    def placed_count(self) -> int:
        return int(self.placed.sum())

    def failed(self, outcome: Outcome) -> int:
        return sum(o is outcome for o in self.outcome)

    @property
    def pods_per_second(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0

    def curve(self, points: int = 131) -> np.ndarray:
        """Allocated GPU % per arrived GPU % (0..points-1), the sim's curve definition."""
        total = self.total_gpu_milli
        return discrete_curve(self.arrived_milli / total * 100, self.allocated_milli / total * 100, points)

    @property
    def allocated_pct(self) -> float:
        """Allocated GPU % after the last arrival."""
        return float(self.allocated_milli[-1]) / self.total_gpu_milli * 100 if self.count else 0.0


@dataclass(kw_only=True)
class _Pending:
    step: int
    record: PodRecord
    created_s: float


@dataclass(kw_only=True)
class _Tracker:
    """Results the pod watch reports, by step; filled by the watch thread, read by the replay."""

    results: queue.Queue[tuple[int, str | None, str | None]] = field(default_factory=queue.Queue)
    seen: set[int] = field(default_factory=set)
    running: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _step_of(pod: Mapping[str, Any]) -> int | None:
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(STEP_ANNOTATION)
    return int(text) if text is not None and str(text).isdigit() else None


def _unschedulable(pod: Mapping[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return bool(cond.get("reason") == "Unschedulable")
    return False


def _assigned_gpus(pod: Mapping[str, Any]) -> tuple[str | None, tuple[int, ...]] | None:
    """(node, GPUs) from the extender's assignment annotation, ``None`` without a readable one."""
    try:
        found = assignment_of(pod)
    except PlacementError:
        return None
    return None if found is None else (found.node or None, found.gpus)


class KubeReplay:
    """The replay over one API server: nodes up, runs (one per scheduler), clean-up."""

    def __init__(
        self,
        api: KubeApi,
        trace: Trace,
        workload: Workload,
        *,
        say: Callable[[str], None] = lambda line: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.trace, self.workload = api, trace, workload
        self.say, self.clock = say, clock
        self._pods = {p.name: p for p in trace.pods}

    # -- nodes -------------------------------------------------------------------------------------

    def gpu_nodes(self) -> list[NodeRecord]:
        return [n for n in self.trace.nodes if n.gpu_count > 0 or n.cpu_milli > 0]

    def create_nodes(self, *, ready_timeout_s: float = 600.0) -> float:
        """Create the fake nodes (replacing any left from an earlier run) and wait until kwok has made
        every one Ready without the not-ready taint; returns the seconds it took."""
        t0 = self.clock()
        self.delete_nodes()
        nodes = self.gpu_nodes()
        for i, node in enumerate(nodes, 1):
            self.api.request("POST", "/api/v1/nodes", body=node_object(node))
            if i % 200 == 0 or i == len(nodes):
                self.say(f"[replay] {i}/{len(nodes)} nodes created")
        deadline = self.clock() + ready_timeout_s
        while True:
            items = self.api.list_nodes(label_selector=f"{REPLAY_LABEL}={REPLAY_VALUE}")
            self._untaint(items)
            ready = sum(_node_ready(n) for n in items)
            if ready == len(nodes):
                break
            if self.clock() > deadline:
                raise ReplayError(
                    f"{ready} of {len(nodes)} replay nodes Ready after {ready_timeout_s:.0f} s: "
                    f"is kwok running and managing nodes annotated {KWOK_KEY}=fake?"
                )
            self.say(f"[replay] {ready}/{len(nodes)} nodes Ready")
            time.sleep(2.0)
        seconds = self.clock() - t0
        self.say(f"[replay] {len(nodes)} nodes Ready in {seconds:.1f} s")
        return seconds

    def _untaint(self, items: Iterable[Mapping[str, Any]]) -> None:
        """Drop the ``not-ready`` taint the API server's admission puts on every new node from nodes kwok
        has made Ready: the node-lifecycle controller would too, but at its default 20 API calls a
        second it takes minutes for a thousand nodes."""
        for node in items:
            taints = (node.get("spec") or {}).get("taints") or []
            if not _condition_ready(node) or not any(t.get("key") == NOT_READY_TAINT for t in taints):
                continue
            meta = node.get("metadata") or {}
            patch = {
                "metadata": {"resourceVersion": meta.get("resourceVersion")},
                "spec": {"taints": [t for t in taints if t.get("key") != NOT_READY_TAINT]},
            }
            try:
                self.api.request(
                    "PATCH",
                    f"/api/v1/nodes/{quote(str(meta.get('name', '')), safe='')}",
                    body=patch,
                    content_type="application/merge-patch+json",
                )
            except ApiServerError as exc:
                if exc.status != 409:  # changed meanwhile (the controller was quicker): next round
                    raise

    def delete_nodes(self) -> None:
        self.api.request(
            "DELETE",
            "/api/v1/nodes",
            query={"labelSelector": f"{REPLAY_LABEL}={REPLAY_VALUE}"},
            idempotent=True,
        )

    # -- pods --------------------------------------------------------------------------------------

    def _pods_path(self, namespace: str) -> str:
        return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods"

    def ensure_namespace(self, namespace: str, timeout_s: float = 60.0) -> None:
        try:
            self.api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
        except ApiServerError as exc:
            if exc.status != 409:
                raise
        deadline = self.clock() + timeout_s
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/serviceaccounts/default"
        while self.api.request("GET", path, idempotent=True) is None:  # pods need it to be admitted
            if self.clock() > deadline:
                raise ReplayError(
                    f"namespace {namespace} got no default service account in {timeout_s:.0f} s"
                )
            time.sleep(0.5)

    def clear_pods(self, namespace: str, timeout_s: float = 900.0) -> None:
        """Delete every replay pod in ``namespace`` at once (grace 0) and wait until they are gone."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        query = {"labelSelector": f"{REPLAY_LABEL}={REPLAY_VALUE}"}
        deadline = self.clock() + timeout_s
        while True:
            doc = self.api.request(
                "GET", self._pods_path(namespace), query={**query, "limit": "1"}, idempotent=True
            )
            if not (doc or {}).get("items"):
                return
            try:  # thousands of pods take the API server longer than one call's read timeout: go on
                self.api.request("DELETE", self._pods_path(namespace), body=body, query=query)
            except ApiServerError as exc:
                if exc.status not in (0, 500, 503, 504):
                    raise
                log.info("deleting the replay's pods goes on: %s", exc)
            if self.clock() > deadline:
                raise ReplayError(
                    f"replay pods in {namespace} still there {timeout_s:.0f} s after their deletion"
                )
            time.sleep(1.0)

    def _delete_pod(self, namespace: str, name: str) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        self.api.request("DELETE", f"{self._pods_path(namespace)}/{quote(name)}", body=body, idempotent=True)

    def _watch(self, namespace: str, tracker: _Tracker, stop: threading.Event) -> None:
        """List, then watch, the replay's pods; report each step's first bind or Unschedulable."""
        path = self._pods_path(namespace)

        def seen(pod: Mapping[str, Any]) -> None:
            step = _step_of(pod)
            if step is None:
                return
            if (pod.get("status") or {}).get("phase") == "Running":
                tracker.running.add(step)
            with tracker.lock:
                if step in tracker.seen:
                    return
                node = (pod.get("spec") or {}).get("nodeName")
                if node:
                    tracker.seen.add(step)
                    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(ASSIGNMENT_ANNOTATION)
                    tracker.results.put((step, str(node), text))
                elif _unschedulable(pod):
                    tracker.seen.add(step)
                    tracker.results.put((step, None, None))

        while not stop.is_set():
            try:
                items, version = self.api.list_objects(path)
                for item in items:
                    seen(item)
                while not stop.is_set():
                    for event in self.api.watch(path, resource_version=version, timeout_s=60):
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            raise ApiServerError(f"watch of {path}: {obj.get('message', 'error')}")
                        version = str((obj.get("metadata") or {}).get("resourceVersion", version))
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            seen(obj)
                        if stop.is_set():
                            return
            except ApiServerError as exc:
                log.warning("pod watch restarts: %s", exc)
                time.sleep(0.5)

    def run(self, config: KubeReplayConfig, *, extender: bool) -> KubeRun:
        """Replay ``config.seed``'s arrivals through the scheduler ``config.scheduler_name``.

        ``extender``: GPUs come from the extender's assignment annotation (checked for room); else
        the engine plays the nodes' device plugins. Pods are left in place (``clear_pods`` removes
        them)."""
        if config.window < 1:
            raise InputError(f"--window must be at least 1, got {config.window}")
        workload = self.workload
        seq = arrivals(workload, config.seed, config.inflate)
        if config.limit is not None:
            seq = seq[: config.limit]
        records = [self._pods[workload.pod_names[int(i)]] for i in seq]
        count = len(records)
        ns = config.namespace
        self.ensure_namespace(ns)
        self.clear_pods(ns)
        devices = DevicePlugin(self.gpu_nodes())
        outcome: list[Outcome | None] = [None] * count
        node_of: list[str | None] = [None] * count
        gpus_of: list[tuple[int, ...]] = [()] * count
        tracker = _Tracker()
        stop = threading.Event()
        watcher = threading.Thread(
            target=self._watch, args=(ns, tracker, stop), name="replay-watch", daemon=True
        )
        watcher.start()
        deletions: queue.Queue[str | None] = queue.Queue()

        def deleter() -> None:
            while (name := deletions.get()) is not None:
                try:
                    self._delete_pod(ns, name)
                except ApiServerError as exc:
                    log.warning("deleting %s: %s", name, exc)

        remover = threading.Thread(target=deleter, name="replay-delete", daemon=True)
        remover.start()
        resolved = 0
        placed = failed = 0
        last_progress_s = started_s = self.clock()
        last_resolved_s = started_s
        report_every = max(1, count // 20)

        def name_of(step: int) -> str:
            return f"{POD_PREFIX}{step:05d}"

        def resolve(block: bool) -> bool:
            nonlocal resolved, placed, failed, last_resolved_s, last_progress_s
            try:
                step, node, text = tracker.results.get(timeout=1.0 if block else 0)
            except queue.Empty:
                if block and self.clock() - last_resolved_s > config.stall_s:
                    raise ReplayError(
                        f"no replay pod bound or refused for {config.stall_s:.0f} s "
                        f"({resolved}/{count} done): is a scheduler serving schedulerName "
                        f"{config.scheduler_name!r}?"
                    ) from None
                return False
            rec = records[step]
            milli = rec.gpu_milli if rec.num_gpu else 0
            if node is None:
                outcome[step] = Outcome.UNSCHEDULABLE
                deletions.put(name_of(step))
                failed += 1
            else:
                chosen = (
                    _assigned_gpus({"metadata": {"annotations": {ASSIGNMENT_ANNOTATION: text}}})
                    if text
                    else None
                )
                if extender and chosen is not None and rec.num_gpu:
                    gpus: tuple[int, ...] | None = chosen[1] if devices.take(node, chosen[1], milli) else None
                else:
                    gpus = devices.assign(node, rec.num_gpu, milli)
                if gpus is None:
                    outcome[step] = Outcome.ADMISSION
                    deletions.put(name_of(step))
                    failed += 1
                else:
                    outcome[step], node_of[step], gpus_of[step] = Outcome.PLACED, node, gpus
                    placed += 1
            resolved += 1
            last_resolved_s = now = self.clock()
            if resolved % report_every == 0 or resolved == count or now - last_progress_s > 15:
                last_progress_s = now
                rate = resolved / max(now - started_s, 1e-9)
                self.say(
                    f"[replay] {config.scheduler_name}: {resolved}/{count} pods, {placed} placed, "
                    f"{failed} failed, {rate:.1f} pods/s"
                )
            return True

        try:
            for step, rec in enumerate(records):
                while step - resolved >= config.window:
                    resolve(block=True)
                while resolve(block=False):
                    pass
                body = pod_object(
                    name_of(step),
                    rec,
                    step=step,
                    scheduler_name=config.scheduler_name,
                    milli_on_whole=config.milli_on_whole,
                )
                self.api.request("POST", self._pods_path(ns), body=body)
            while resolved < count:
                resolve(block=True)
            seconds = self.clock() - started_s
            time.sleep(1.0)  # let kwok's last pod-ready patches arrive
        finally:
            stop.set()
            deletions.put(None)
            remover.join(timeout=120)
        totals = np.array([r.num_gpu * r.gpu_milli for r in records], dtype=np.int64)
        ok = np.array([o is Outcome.PLACED for o in outcome], dtype=bool)
        return KubeRun(
            scheduler_name=config.scheduler_name,
            seed=config.seed,
            total_gpu_milli=workload.total_gpu_milli,
            pods=tuple(r.name for r in records),
            arrived_milli=np.cumsum(totals),
            allocated_milli=np.cumsum(np.where(ok, totals, 0)),
            placed=ok,
            outcome=tuple(o if o is not None else Outcome.UNSCHEDULABLE for o in outcome),
            node=tuple(node_of),
            gpus=tuple(gpus_of),
            seconds=seconds,
            running=len(tracker.running),
        )


NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def _condition_ready(node: Mapping[str, Any]) -> bool:
    conds = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _node_ready(node: Mapping[str, Any]) -> bool:
    taints = (node.get("spec") or {}).get("taints") or []
    return _condition_ready(node) and not any(t.get("key") == NOT_READY_TAINT for t in taints)


def differences(
    run: KubeRun, expected_nodes: Sequence[str | None], expected_gpus: Sequence[tuple[int, ...]]
) -> int:
    """Arrivals whose node or GPUs differ from ``expected_*`` (the sim's, same policy and seed)."""
    return sum(
        (n, g) != (en, eg)
        for n, g, en, eg in zip(run.node, run.gpus, expected_nodes, expected_gpus, strict=True)
    )
