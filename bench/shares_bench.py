"""What 8,000 kubegpu.io/gpu-milli devices cost kubelet's side of the socket (kubegpu.fractional).

Serves the seed machine (8 GPUs) with shares on, over the real gRPC unix socket, and measures as
kubelet would call it: the ListAndWatch snapshot (bytes, time to receive), GetPreferredAllocation with
every free share device offered (kubelet sends all of them), and Allocate of a 500m share, whose
pod is found among ``--pods`` pods bound to the node (an in-memory list standing in for the API
server's LIST; the LIST's own round trip is in the agent's ``share handed out`` log line, ``list_ms``).
Run: ``.venv/bin/python bench/shares_bench.py [--rounds 200] [--pods 110]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import benchcli
import grpc

from kubegpu.deviceplugin.api import v1beta1_pb2 as pb
from kubegpu.deviceplugin.api import v1beta1_pb2_grpc as pb_grpc
from kubegpu.deviceplugin.config import AgentConfig
from kubegpu.deviceplugin.inventory import MILLI_RESOURCE, build_inventory
from kubegpu.deviceplugin.plugin import ResourcePlugin
from kubegpu.deviceplugin.server import PluginServer
from kubegpu.deviceplugin.shares import ShareBroker, ShareLedger
from kubegpu.health.policy import HealthPolicy
from kubegpu.health.tracker import HealthTracker
from kubegpu.sources.spec import load_node

NODE = load_node("builtin:seed-8gpu")
SIZE = 500


def pod(i: int) -> dict[str, Any]:
    gpu = i % len(NODE.gpus)
    doc = {"gpus": [gpu], "milli": SIZE, "node": "n0", "uuids": [NODE.gpus[gpu].uuid], "version": 1}
    return {
        "metadata": {
            "name": f"p{i}",
            "namespace": "bench",
            "uid": f"uid-{i}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"kubegpu.io/gpu-assignment": json.dumps(doc)},
        },
        "spec": {"containers": [{"name": "main", "resources": {"limits": {MILLI_RESOURCE: str(SIZE)}}}]},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "lastTransitionTime": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z"}
            ],
        },
    }


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=benchcli.count, default=200)
    parser.add_argument(
        "--pods", type=benchcli.count, default=110, help="pods bound to the node (kubelet's default max)"
    )
    args = parser.parse_args()
    config = AgentConfig(fractional=True)
    resource = build_inventory(NODE, config).resource(MILLI_RESOURCE)
    assert resource is not None
    tracker = HealthTracker(gpu_count=8, aliases={g.uuid: g.index for g in NODE.gpus}, policy=HealthPolicy())
    with tempfile.TemporaryDirectory() as tmp:
        pods = [pod(i) for i in range(args.pods)]
        ledger = ShareLedger(Path(tmp) / "state" / "shares.json")

        def listed() -> list[dict[str, Any]]:
            return pods

        broker = ShareBroker(node_name="n0", list_pods=listed, ledger=ledger, node=lambda: NODE)
        plugin = ResourcePlugin(
            resource=resource, topology=NODE.topology, config=config, tracker=tracker, shares=broker
        )
        server = PluginServer(plugin, Path(tmp))
        server.start()
        assert server.socket_path is not None
        channel = grpc.insecure_channel(f"unix://{server.socket_path}")
        stub = pb_grpc.DevicePluginStub(channel)
        try:
            law: list[float] = []
            size = 0
            for _ in range(20):
                t0 = time.perf_counter()
                first = next(iter(stub.ListAndWatch(pb.Empty())))
                law.append((time.perf_counter() - t0) * 1000)
                size = first.ByteSize()
            ids = [d.ID for d in first.devices]
            pref: list[float] = []
            alloc: list[float] = []
            for r in range(args.rounds):
                if r and r % args.pods == 0:  # every pod served: start again
                    ledger.keep_only(frozenset())
                request = pb.PreferredAllocationRequest(
                    container_requests=[
                        pb.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=SIZE)
                    ]
                )
                t0 = time.perf_counter()
                chosen = stub.GetPreferredAllocation(request, timeout=30).container_responses[0].deviceIDs
                t1 = time.perf_counter()
                stub.Allocate(
                    pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=chosen)]),
                    timeout=30,
                )
                t2 = time.perf_counter()
                pref.append((t1 - t0) * 1000)
                alloc.append((t2 - t1) * 1000)
        finally:
            channel.close()
            server.stop()
    print(
        f"kubegpu.io/gpu-milli on seed-8gpu: {len(ids)} devices, {args.pods} pods, {args.rounds} admissions"
    )
    rows = [
        ("ListAndWatch first snapshot", law, f"{size / 1024:.0f} KiB (gRPC limit 4 MiB)"),
        ("GetPreferredAllocation (8,000 offered, 500 asked)", pref, "finds the pod, prefers its GPU"),
        ("Allocate (500 IDs)", alloc, "finds the pod, records the hand-out (fsync)"),
    ]
    print("| call | p50 ms | p99 ms | note |")
    print("|---|---:|---:|---|")
    for name, samples, note in rows:
        print(f"| {name} | {statistics.median(samples):.1f} | {pct(samples, 0.99):.1f} | {note} |")


if __name__ == "__main__":
    benchcli.run_main(main)
