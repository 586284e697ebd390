"""The extender and the DRA driver at the sizes real GPU fleets run (issue 57): cold start, memory and
API traffic against a stub API server, one table.

Synthetic clusters of 1k, 5k and 15k nodes (``--nodes``; 50k on request), 8 GPUs and 30 pods a node,
with realistic objects: pods of about 5.8 KB of JSON (managedFields, status with conditions, volumes,
env), nodes of about 10 KB (images, conditions, GFD labels). A stub API server on 127.0.0.1
(``tests/stub_apiserver.py``: paginated lists with ``limit``/``continue``, watch streams, every request
and byte counted) renders them on demand. Each size runs in a fresh child process, whose own peak RSS
(``getrusage(RUSAGE_SELF).ru_maxrss``) is reported:

* ``extender``: the real ``ClusterSync`` (paginated lists, page by page into the ledger's compact
  records) and ``Ledger`` with policy ``kubegpu-plan``, ``on_synced=ledger.warm_up`` as
  ``kubegpu extender`` runs it; wall time from start to ready, then the first filter (every node a
  candidate, a pod shape not scored yet), ``--repeat`` filters of one shape (every node a
  candidate; each reserves, so each rescores the row it took), ``--repeat`` times a node change
  followed by a filter (issue 57 item 2: the ledger makes that node's row again), and a pod that fits
  nowhere (the answer's size in JSON, bounded by ``FAILED_NODES_LISTED``);
* ``dra``: the DRA driver's ``ClaimWatch`` for one node (8 claims a node in the cluster, ~1 KB each):
  one paginated list, then ``--quiet`` seconds (default 10, the old resync period) on the watch.

Today's figures (issue 57, measured before this change on the same machine) are printed beside the
new ones. Only 127.0.0.1 traffic; every loop is bounded; Ctrl-C stops at once.

    .venv/bin/python bench/scale.py [--nodes 1000,5000,15000] [--quiet 10] [--skip-dra] [--repeat 50]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchcli
from tests.stub_apiserver import StubApiServer, kubeconfig

GPUS, PODS_PER_NODE, CLAIMS_PER_NODE = 8, 30, 8
NODES_PATH, PODS_PATH = "/api/v1/nodes", "/api/v1/pods"
CLAIMS_PATH = "/apis/resource.k8s.io/v1/resourceclaims"
DRIVER = "gpu.kubegpu.io"
CHILD_TIMEOUT_S = 1800  # one size's child at most (50k nodes on 2 cores takes minutes)
# issue 57's figures for today's code: extender (wall, peak RSS) with realistic pods; DRA driver
TODAY = {
    1000: ("3.7 s*", "881 MiB", "102 MiB", "1 LIST/10 s, 8.2 MiB"),
    5000: ("17 s*", "4.2 GiB", "349 MiB", "1 LIST/10 s, 41 MiB"),
    15000: ("57 s*", "≈12.5 GiB", "964 MiB", "1 LIST/10 s, 124 MiB"),
    50000: ("180 s*", "–", "–", "16.7 s CPU/10 s"),
}


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


# -- realistic objects, rendered from templates -------------------------------------------------


def _template(doc: dict[str, Any]) -> list[str]:
    """``doc`` as JSON split at its ``~~KEY~~`` placeholders: literal, key, literal, key, ..."""
    return json.dumps(doc, separators=(",", ":")).split("~~")


def _fill(parts: list[str], values: dict[str, str]) -> bytes:
    return "".join(p if i % 2 == 0 else values[p] for i, p in enumerate(parts)).encode()


def _managed(manager: str, fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2026-12-01T10:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }


def pod_template(requests: dict[str, str], annotated: bool) -> list[str]:
    env = [{"name": f"SETTING_{k}", "value": f"value-of-setting-{k}-for-the-training-job"} for k in range(30)]
    container = {
        "name": "main",
        "image": "registry.example.com/ml/trainer:2026.11.3",
        "command": ["python", "-m", "trainer", "--config", "/etc/trainer/config.yaml"],
        "env": env,
        "resources": {"requests": requests, "limits": requests},
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/trainer"},
            {"name": "data", "mountPath": "/data"},
            {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
        ],
        "terminationMessagePath": "/dev/termination-log",
        "imagePullPolicy": "IfNotPresent",
    }
    conditions = [
        {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": "2026-12-01T10:00:05Z"}
        for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    annotations = {"kubegpu.io/gpu-assignment": "~~ASSIGN~~"} if annotated else {}
    doc = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": "~~NAME~~",
            "namespace": "team-~~NS~~",
            "uid": "~~UID~~",
            "resourceVersion": "1",
            "creationTimestamp": "2026-12-01T10:00:00Z",
            "labels": {"app": "trainer", "job-name": "~~NAME~~", "team": "team-~~NS~~"},
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "~~NAME~~",
                    "uid": "~~UID~~",
                    "controller": True,
                }
            ],
            "managedFields": [
                _managed("kube-controller-manager", {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}),
                _managed("kubelet", {"f:status": {"f:conditions": {".": {}}, "f:containerStatuses": {}}}),
                _managed(
                    "kubectl-client-side-apply",
                    {
                        "f:spec": {
                            "f:containers": {'k:{"name":"main"}': {f"f:{k}": {} for k in container}},
                            "f:volumes": {
                                f'k:{{"name":"{v}"}}': {".": {}, "f:name": {}}
                                for v in ("config", "data", "scratch", "cache")
                            },
                        }
                    },
                ),
            ],
        },
        "spec": {
            "nodeName": "~~NODE~~",
            "schedulerName": "kubegpu",
            "restartPolicy": "Never",
            "serviceAccountName": "default",
            "containers": [container],
            "volumes": [
                {"name": "config", "configMap": {"name": "trainer-config", "defaultMode": 420}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "dataset-~~NS~~"}},
                {
                    "name": "kube-api-access",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                        ]
                    },
                },
            ],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
            ],
        },
        "status": {
            "phase": "~~PHASE~~",
            "conditions": conditions,
            "hostIP": "10.1.2.3",
            "podIP": "10.200.3.4",
            "podIPs": [{"ip": "10.200.3.4"}],
            "startTime": "2026-12-01T10:00:01Z",
            "qosClass": "Guaranteed",
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": True,
                    "restartCount": 0,
                    "image": "registry.example.com/ml/trainer:2026.11.3",
                    "imageID": "registry.example.com/ml/trainer@sha256:" + "0" * 64,
                    "containerID": "containerd://" + "1" * 64,
                    "started": True,
                    "state": {"running": {"startedAt": "2026-12-01T10:00:04Z"}},
                }
            ],
        },
    }
    return _template(doc)


# the 30 pods of a node: (requests, GPUs recorded, milli); 8 GPUs: four 1-GPU pods (0-3), one 2-GPU
# pod (4, 5), four 250m shares of GPU 6, two 500m shares of GPU 7; the rest CPU only
def _node_pods() -> list[tuple[list[str], tuple[int, ...], int]]:
    base = {"cpu": "2", "memory": "8Gi"}
    out: list[tuple[list[str], tuple[int, ...], int]] = []
    whole = {**base, "nvidia.com/gpu": "1"}
    for g in range(4):
        out.append((pod_template(whole, True), (g,), 1000))
    out.append((pod_template({**base, "nvidia.com/gpu": "2"}, True), (4, 5), 1000))
    for _ in range(4):
        out.append((pod_template({**base, "kubegpu.io/gpu-milli": "250"}, True), (6,), 250))
    for _ in range(2):
        out.append((pod_template({**base, "kubegpu.io/gpu-milli": "500"}, True), (7,), 500))
    cpu = pod_template({"cpu": "500m", "memory": "1Gi"}, False)
    out.extend((cpu, (), 0) for _ in range(PODS_PER_NODE - len(out)))
    return out


def node_template() -> list[str]:
    images = [
        {
            "names": [
                f"registry.example.com/team/image-{k}@sha256:{k:064d}",
                f"registry.example.com/team/image-{k}:v1",
            ],
            "sizeBytes": 1_234_567_890 + k,
        }
        for k in range(44)
    ]
    conditions = [
        {
            "type": t,
            "status": "False",
            "lastHeartbeatTime": "2026-12-01T10:00:00Z",
            "lastTransitionTime": "2026-11-01T10:00:00Z",
            "reason": f"Kubelet{t}",
            "message": f"kubelet has no {t}",
        }
        for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
    ]
    labels = {
        "kubernetes.io/hostname": "~~NAME~~",
        "nvidia.com/gpu.count": str(GPUS),
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.runtime.major": "12",
        "topology.kubernetes.io/zone": "zone-a",
        "node.kubernetes.io/instance-type": "p5.48xlarge",
    }
    doc = {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": "~~NAME~~",
            "uid": "~~UID~~",
            "resourceVersion": "1",
            "labels": labels,
            "annotations": {"kubegpu.io/gpu-uuids": "~~UUIDS~~", "node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": [_managed("kubelet", {"f:status": {"f:images": {}, "f:conditions": {}}})],
        },
        "spec": {"podCIDR": "10.200.3.0/24", "providerID": "aws:///zone-a/i-0123456789abcdef0"},
        "status": {
            "capacity": {"cpu": "192", "memory": "2097152Mi", "nvidia.com/gpu": str(GPUS), "pods": "250"},
            "allocatable": {"cpu": "190", "memory": "2000000Mi", "nvidia.com/gpu": str(GPUS), "pods": "250"},
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": "10.1.2.3"},
                {"type": "Hostname", "address": "~~NAME~~"},
            ],
            "images": images,
            "nodeInfo": {
                "kubeletVersion": "v1.34.4",
                "containerRuntimeVersion": "containerd://2.1.0",
                "kernelVersion": "6.8.0",
                "osImage": "Ubuntu 24.04",
                "architecture": "amd64",
            },
        },
    }
    return _template(doc)


def claim_template() -> list[str]:
    results = [{"request": "gpu", "driver": DRIVER, "pool": "~~POOL~~", "device": "~~DEVICE~~"}]
    doc = {
        "kind": "ResourceClaim",
        "apiVersion": "resource.k8s.io/v1",
        "metadata": {
            "name": "~~NAME~~",
            "namespace": "team-~~NS~~",
            "uid": "~~UID~~",
            "resourceVersion": "1",
            "labels": {"app": "trainer", "job-name": "~~NAME~~"},
            "creationTimestamp": "2026-12-01T10:00:00Z",
            "managedFields": [
                _managed("kube-scheduler", {"f:status": {"f:allocation": {}, "f:reservedFor": {}}})
            ],
        },
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.kubegpu.io"}}]}
        },
        "status": {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["~~POOL~~"]}]}
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": "~~NAME~~", "uid": "~~UID~~"}],
        },
    }
    return _template(doc)


def _uuid(node: int, gpu: int) -> str:
    return f"GPU-{node:08x}-{gpu:04x}-4000-8000-{node * GPUS + gpu:012x}"


class Cluster:
    """Renders the i-th node, pod and claim of a synthetic cluster of ``nodes`` nodes."""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self._node = node_template()
        self._pods = _node_pods()
        self._claim = claim_template()

    def node(self, i: int) -> bytes:
        name = f"gpu-node-{i:05d}"
        uuids = ",".join(_uuid(i, g) for g in range(GPUS))
        return _fill(self._node, {"NAME": name, "UID": f"node-uid-{i:08d}", "UUIDS": uuids})

    def pod(self, i: int) -> bytes:
        n, k = divmod(i, PODS_PER_NODE)
        parts, gpus, milli = self._pods[k]
        node = f"gpu-node-{n:05d}"
        phase = "Succeeded" if k == PODS_PER_NODE - 1 else "Running"
        values = {
            "NAME": f"job-{i:07d}",
            "NS": str(i % 50),
            "UID": f"pod-uid-{i:012d}",
            "NODE": node,
            "PHASE": phase,
        }
        if gpus:
            assign = {
                "gpus": list(gpus),
                "milli": milli,
                "node": node,
                "uuids": [_uuid(n, g) for g in gpus],
                "version": 1,
            }
            values["ASSIGN"] = json.dumps(json.dumps(assign, sort_keys=True, separators=(",", ":")))[1:-1]
        return _fill(parts, values)

    def claim(self, i: int) -> bytes:
        n, g = divmod(i, CLAIMS_PER_NODE)
        values = {
            "NAME": f"claim-{i:07d}",
            "NS": str(i % 50),
            "UID": f"claim-uid-{i:012d}",
            "POOL": f"gpu-node-{n:05d}",
            "DEVICE": f"gpu-{g}",
        }
        return _fill(self._claim, values)


# -- the child: one component, one size ---------------------------------------------------------


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def child_extender(url: str, nodes: int, repeat: int) -> dict[str, Any]:
    import logging

    from kubegpu.extender.cluster import ClusterSync
    from kubegpu.extender.ledger import Ledger
    from kubegpu.extender.workload import default_typical
    from kubegpu.kubeapi import KubeApi
    from kubegpu.sim.policy import get_policy

    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        api = KubeApi(kubeconfig=str(kubeconfig(Path(tmp) / "kubeconfig", url)))
    book = Ledger(policy=get_policy("kubegpu-plan"), typical=default_typical())
    synced = threading.Event()

    def on_synced() -> None:
        book.warm_up()
        synced.set()

    sync = ClusterSync(api, book, on_synced=on_synced)
    start = time.perf_counter()
    sync.start()
    if not synced.wait(CHILD_TIMEOUT_S):
        raise SystemExit("the extender did not sync")
    ready_s = time.perf_counter() - start
    names = [f"gpu-node-{i:05d}" for i in range(nodes)]
    pod = {
        "metadata": {"name": "probe", "namespace": "default", "uid": "probe-uid"},
        "spec": {"containers": [{"resources": {"requests": {"cpu": "1", "kubegpu.io/gpu-milli": "250"}}}]},
    }
    t = time.perf_counter()
    decision = book.decide(pod, names)
    first_filter_s = time.perf_counter() - t
    # filters of one shape, every node a candidate (each reserves GPUs: the next rescores that row)
    filters = []
    for i in range(repeat):
        probe = pod | {"metadata": {"name": f"probe-{i}", "namespace": "default", "uid": f"probe-f{i}"}}
        t = time.perf_counter()
        book.decide(probe, names)
        filters.append(time.perf_counter() - t)
    # a node changes (as a watch event would apply it), then a filter: the lock is held for both
    from dataclasses import replace

    from kubegpu.extender.node import GpuNode

    changes = []
    for i in range(repeat):
        name = names[(i * 7919) % nodes]
        changed: GpuNode = replace(book._nodes[name], cpu_milli=book._nodes[name].cpu_milli + 1000)
        probe = pod | {"metadata": {"name": f"probe-{i}", "namespace": "default", "uid": f"probe-c{i}"}}
        t = time.perf_counter()
        book.upsert_node(changed)
        book.decide(probe, names)
        changes.append(time.perf_counter() - t)
    # a pod that fits nowhere: every node answers why (bounded)
    huge = {
        "metadata": {"name": "huge", "namespace": "default", "uid": "huge-uid"},
        "spec": {"containers": [{"resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "9"}}}]},
    }
    t = time.perf_counter()
    refused = book.decide(huge, names)
    nowhere_s = time.perf_counter() - t
    answer = json.dumps({"FailedNodes": dict(refused.failed)})
    sync.stop()
    return {
        "ready_s": ready_s,
        "first_filter_s": first_filter_s,
        "after_node_change_s": changes[0],
        "filter_p50_s": percentile(filters, 0.5),
        "filter_p99_s": percentile(filters, 0.99),
        "change_p50_s": percentile(changes, 0.5),
        "change_p99_s": percentile(changes, 0.99),
        "nowhere_s": nowhere_s,
        "nowhere_bytes": len(answer),
        "nowhere_reasons": len(refused.failed),
        "placed": decision.node is not None,
        "nodes": book.node_count(),
        "rss_mib": peak_rss_mib(),
        "cpu_s": cpu_s(),
    }


def child_dra(url: str, nodes: int, quiet_s: float) -> dict[str, Any]:
    from kubegpu.dra.claimwatch import ClaimWatch
    from kubegpu.kubeapi import KubeApi

    with tempfile.TemporaryDirectory() as tmp:
        api = KubeApi(kubeconfig=str(kubeconfig(Path(tmp) / "kubeconfig", url)))
    watch = ClaimWatch(api, pool=f"gpu-node-{nodes // 2:05d}", driver=DRIVER)
    start = time.perf_counter()
    watch.start()
    if not watch.synced.wait(CHILD_TIMEOUT_S):
        raise SystemExit("the claim watch did not sync")
    ready_s = time.perf_counter() - start
    print(json.dumps({"synced": True}), flush=True)
    time.sleep(quiet_s)
    watch.stop()
    return {
        "ready_s": ready_s,
        "held": len(watch.allocated()),
        "lists": watch.lists,
        "rss_mib": peak_rss_mib(),
    }


# -- the parent ----------------------------------------------------------------------------------


def run_child(
    args: list[str], stub: StubApiServer, on_synced: Any = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run one child; its result and the API traffic (requests and bytes, at start and after)."""
    before_requests, before_bytes = len(stub.requests), stub.bytes_sent
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", *args],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=False,
    )
    traffic: dict[str, Any] = {}
    result: dict[str, Any] = {}
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            doc = json.loads(line)
            if doc.get("synced"):
                traffic["start_requests"] = len(stub.requests) - before_requests
                traffic["start_bytes"] = stub.bytes_sent - before_bytes
                traffic["synced_at"] = len(stub.requests)
            else:
                result = doc
        proc.wait(CHILD_TIMEOUT_S)
    except BaseException:
        proc.kill()  # by its PID
        proc.wait()
        raise
    if proc.returncode != 0 or not result:
        raise SystemExit(f"scale.py: child {args} failed (exit {proc.returncode})")
    traffic["requests"] = len(stub.requests) - before_requests
    traffic["bytes"] = stub.bytes_sent - before_bytes
    traffic["lists"] = sum(1 for r in stub.requests[before_requests:] if not r.watch)
    after = stub.requests[traffic.get("synced_at", len(stub.requests)) :]
    traffic["lists_after"] = sum(1 for r in after if not r.watch)
    return result, traffic


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB" if n < 2**30 else f"{n / 2**30:.2f} GiB"


def measure(nodes: int, quiet_s: float, skip_dra: bool, repeat: int) -> dict[str, Any]:
    cluster = Cluster(nodes)
    stub = StubApiServer()
    stub.serve(NODES_PATH, count=nodes, render=cluster.node)
    stub.serve(PODS_PATH, count=nodes * PODS_PER_NODE, render=cluster.pod)
    stub.serve(CLAIMS_PATH, count=nodes * CLAIMS_PER_NODE, render=cluster.claim)
    url = stub.start()
    try:
        say(f"{nodes:,} nodes, {nodes * PODS_PER_NODE:,} pods: extender cold start (fresh process)")
        ext, ext_traffic = run_child(["extender", url, str(nodes), str(repeat)], stub)
        say(
            f"  ready in {ext['ready_s']:.1f} s ({ext['cpu_s']:.1f} s CPU), peak RSS "
            f"{ext['rss_mib']:,.0f} MiB, {ext_traffic['requests']} requests, {mib(ext_traffic['bytes'])}"
        )
        dra: dict[str, Any] = {}
        dra_traffic: dict[str, Any] = {}
        if not skip_dra:
            say(f"  DRA claim watch: {nodes * CLAIMS_PER_NODE:,} claims, then {quiet_s:g} s on the watch")
            dra, dra_traffic = run_child(["dra", url, str(nodes), str(quiet_s)], stub)
            say(f"  synced in {dra['ready_s']:.1f} s, peak RSS {dra['rss_mib']:,.0f} MiB")
    finally:
        stub.stop()
    return {"nodes": nodes, "ext": ext, "ext_traffic": ext_traffic, "dra": dra, "dra_traffic": dra_traffic}


def table(rows: list[dict[str, Any]], quiet_s: float) -> str:
    out = [
        "| nodes | extender: today (wall, RSS) | new: ready, RSS | new: API |",
        "|---|---|---|---|",
    ]
    for r in rows:
        today = TODAY.get(r["nodes"], ("–", "–", "–", "–"))
        e, t = r["ext"], r["ext_traffic"]
        out.append(
            f"| {r['nodes']:,} | {today[0]}, {today[1]} | {e['ready_s']:.1f} s, {e['rss_mib']:,.0f} MiB "
            f"| {t['requests']} req, {mib(t['bytes'])} |"
        )
    out += [
        "",
        "| nodes | first filter (new shape) | filter p50 / p99 | node change + filter p50 / p99 "
        "| fits nowhere: reasons, JSON, time |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        e = r["ext"]
        out.append(
            f"| {r['nodes']:,} | {ms(e['first_filter_s'])} "
            f"| {ms(e['filter_p50_s'])} / {ms(e['filter_p99_s'])} "
            f"| {ms(e['change_p50_s'])} / {ms(e['change_p99_s'])} "
            f"| {e['nowhere_reasons']:,}, {e['nowhere_bytes'] / 1024:,.0f} KiB, {ms(e['nowhere_s'])} |"
        )
    if any(r["dra"] for r in rows):
        out += [
            "",
            f"| nodes | DRA today (RSS; API) | new: RSS | new: start | LISTs in {quiet_s:g} s |",
            "|---|---|---|---|---|",
        ]
        for r in rows:
            if not r["dra"]:
                continue
            today = TODAY.get(r["nodes"], ("–", "–", "–", "–"))
            d, t = r["dra"], r["dra_traffic"]
            out.append(
                f"| {r['nodes']:,} | {today[2]}; {today[3]} | {d['rss_mib']:,.0f} MiB "
                f"| {t['start_requests']} req, {mib(t['start_bytes'])} | {t['lists_after']} |"
            )
    out.append("")
    out.append("* today's wall: slim pods (realistic ones were OOM-killed at 1 GiB)")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--nodes", type=benchcli.counts, default=(1000, 5000, 15000), help="sizes, e.g. 1000,5000"
    )
    parser.add_argument("--quiet", type=benchcli.positive, default=10.0, help="seconds on the claim watch")
    parser.add_argument("--skip-dra", action="store_true", help="measure the extender only")
    parser.add_argument(
        "--repeat", type=int, default=50, help="filters, and node changes, timed per size (p50, p99)"
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, url, nodes = args.child[0], args.child[1], int(args.child[2])
        result = (
            child_extender(url, nodes, int(args.child[3]))
            if kind == "extender"
            else child_dra(url, nodes, float(args.child[3]))
        )
        print(json.dumps(result), flush=True)
        return 0
    if max(args.nodes) > 60_000:
        parser.error(f"--nodes: at most 60000 nodes, got {max(args.nodes)}")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    rows = []
    try:
        for nodes in args.nodes:
            rows.append(measure(nodes, args.quiet, args.skip_dra, args.repeat))
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    print(table(rows, args.quiet))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    benchcli.run_main(main)
