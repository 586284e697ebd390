"""Latency of `kubegpu extender`'s filter call on the openb cluster (1,213 nodes), as kube-scheduler sees it.

The real extender stack (ledger, handlers, HTTP server on 127.0.0.1) is started with the openb GPU
nodes and the openb pods' popular shapes; then one seed's arrivals of the FGD replay protocol
(``--inflate`` x the cluster's GPUs, default 1.3) are scheduled one by one as kube-scheduler would:
a filter POST carrying the pod and all 1,213 node names (``nodeCacheCapable: true``; the worst
case: kube-scheduler sends only the nodes that passed its own filters), then a bind POST for the
chosen node (the Binding itself goes to a binder that does nothing: no API server here). Each
filter call is timed on the client (JSON encoding, one keep-alive HTTP round trip, decoding) and,
separately, the ledger's decision alone. Prints Markdown tables of p50/p99/max per stretch of
arrived demand, and checks that every pod went where `kubegpu sim` (same seed) puts it.
Target: p50 and p99 <= 20 ms. Without the trace it prints why and exits 0; it never fails on time.

    python bench/extender_filter.py [--data DIR] [--policy kubegpu-plan] [--seed 42] [--inflate 1.3]
"""

from __future__ import annotations

import argparse
import http.client
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import benchcli
import numpy as np
from openb import NODES, PODS, default_data_dir, trace_missing

from kubegpu.extender.handlers import Extender
from kubegpu.extender.ledger import Ledger
from kubegpu.extender.node import gpu_node_of
from kubegpu.extender.server import ExtenderServer
from kubegpu.extender.workload import typical_of
from kubegpu.sim.kube import node_object
from kubegpu.sim.policy import get_policy
from kubegpu.sim.replay import replay
from kubegpu.sim.scoring import MILLI, Policy
from kubegpu.sim.trace import load_trace
from kubegpu.sim.workload import arrivals, prepare


class NoApi:
    """Bind's API calls, answered at once (the bench measures the extender, not an API server)."""

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def bind(self, namespace: str, name: str, *, uid: str, node: str, annotations: Mapping[str, str]) -> None:
        del namespace, name, uid, node, annotations


def pod_json(name: str, cpu_milli: int, memory_mib: int, num_gpu: int, gpu_milli: int) -> dict[str, Any]:
    requests = {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi"}
    if num_gpu == 1 and gpu_milli < MILLI:
        requests["kubegpu.io/gpu-milli"] = str(gpu_milli)
    elif num_gpu:
        requests["nvidia.com/gpu"] = str(num_gpu)
    return {
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}", "labels": {"app": "openb"}},
        "spec": {
            "schedulerName": "kubegpu",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/train:1",
                    "resources": {"requests": requests, "limits": requests},
                }
            ],
        },
        "status": {"phase": "Pending"},
    }


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q)) if values else float("nan")


def run(data: Path, policy: str, seed: int, inflate: float) -> int:
    trace = load_trace(data / NODES, data / PODS)
    workload = prepare(trace)
    seq = arrivals(workload, seed, inflate)
    book = Ledger(policy=get_policy(policy), typical=typical_of(trace.pods))
    book.replace_nodes(gpu_node_of(node_object(n)) for n in trace.nodes)  # as it reads kwok's nodes
    book.warm_up()  # as `kubegpu extender` does once its first lists are in
    front = Extender(book, NoApi())
    server = ExtenderServer(front, "127.0.0.1:0")
    server.start()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    names = list(workload.node_names)
    model_of = {n.name: n.gpu_model for n in trace.nodes}
    by_name = {p.name: p for p in trace.pods}
    total = workload.total_gpu_milli
    stretches = [(0.0, 0.5), (0.5, 1.0), (1.0, 9.9)]
    http_ms: dict[int, list[float]] = {i: [] for i in range(len(stretches))}
    decide_ms: dict[int, list[float]] = {i: [] for i in range(len(stretches))}
    chosen: list[str | None] = []
    arrived = 0
    original = book.decide

    def timed_decide(pod: Mapping[str, Any], candidates: Any) -> Any:
        t = time.perf_counter()
        out = original(pod, candidates)
        timed_decide.last = (time.perf_counter() - t) * 1000  # type: ignore[attr-defined]
        return out

    book.decide = timed_decide  # type: ignore[method-assign]
    started = time.perf_counter()
    try:
        for step, index in enumerate(seq):
            rec = by_name[workload.pod_names[int(index)]]
            which = next(i for i, (lo, hi) in enumerate(stretches) if lo <= arrived / total < hi)
            arrived += rec.num_gpu * rec.gpu_milli
            pod = pod_json(f"p{step}", rec.cpu_milli, rec.memory_mib, rec.num_gpu, rec.gpu_milli)
            t = time.perf_counter()
            # the nodes kube-scheduler's filters leave: a model-pinned pod's affinity keeps its models
            allowed = names if not rec.gpu_spec else [n for n in names if model_of[n] in rec.gpu_spec]
            body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": allowed})
            conn.request("POST", "/kubegpu/filter", body=body, headers={"Content-Type": "application/json"})
            reply = json.loads(conn.getresponse().read())
            http_ms[which].append((time.perf_counter() - t) * 1000)
            decide_ms[which].append(timed_decide.last)  # type: ignore[attr-defined]
            node = reply["NodeNames"][0] if reply["NodeNames"] else None
            chosen.append(node)
            if node is not None:
                bind = {
                    "PodName": f"p{step}",
                    "PodNamespace": "bench",
                    "PodUID": f"uid-p{step}",
                    "Node": node,
                }
                conn.request(
                    "POST",
                    "/kubegpu/bind",
                    body=json.dumps(bind),
                    headers={"Content-Type": "application/json"},
                )
                assert json.loads(conn.getresponse().read()) == {"Error": ""}
    finally:
        conn.close()
        server.stop()
    wall = time.perf_counter() - started
    sim = replay(workload, Policy(policy), seed, inflate=inflate)
    expected = [workload.node_names[n] if ok else None for n, ok in zip(sim.node, sim.placed, strict=True)]
    differ = sum(a != b for a, b in zip(chosen, expected, strict=True))
    placed = sum(n is not None for n in chosen)
    milli = np.array([by_name[workload.pod_names[int(i)]].total_gpu_milli for i in seq])
    ours = float(milli[[n is not None for n in chosen]].sum()) / total * 100
    theirs = float(sim.allocated_milli[-1]) / total * 100

    print(f"### `kubegpu extender` filter latency, policy `{policy}`, {len(names)} nodes, seed {seed}\n")
    print(f"{len(seq)} pods (inflate {inflate}), {placed} placed, {wall:.1f} s in all; ", end="")
    print(
        f"placements different from `kubegpu sim`: {differ}; GPU allocated at the end: {ours:.2f} % ", end=""
    )
    print(f"(`kubegpu sim`: {theirs:.2f} %)\n")
    head = ["arrived GPU demand", "filter calls", "HTTP p50 ms", "HTTP p99 ms", "HTTP max ms"]
    head += ["decision p50 ms", "decision p99 ms"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    labels = ["0-50 %", "50-100 %", f"100-{inflate * 100:.0f} %"]
    rows = [(label, http_ms[i], decide_ms[i]) for i, label in enumerate(labels) if http_ms[i]]
    rows.append(("all", [x for v in http_ms.values() for x in v], [x for v in decide_ms.values() for x in v]))
    for label, h, d in rows:
        cells = [
            label,
            str(len(h)),
            *(f"{x:.2f}" for x in (pct(h, 50), pct(h, 99), max(h), pct(d, 50), pct(d, 99))),
        ]
        print("| " + " | ".join(cells) + " |")
    print()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=default_data_dir())
    parser.add_argument(
        "--policy",
        action="append",
        choices=[p.value for p in Policy],
        help="kubegpu-plan (default), kubegpu, fgd, ... (repeatable)",
    )
    parser.add_argument("--seed", type=benchcli.seed, default=42)
    parser.add_argument("--inflate", type=benchcli.inflate, default=1.3)
    args = parser.parse_args()
    if trace_missing(args.data, "extender_filter"):
        return 0
    for policy in args.policy or ["kubegpu-plan"]:
        run(args.data, policy, args.seed, args.inflate)
    return 0


if __name__ == "__main__":
    benchcli.run_main(main)
