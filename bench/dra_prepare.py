"""NodePrepareResources / NodeUnprepareResources latency of kubegpu's DRA driver, over its real socket.

The driver's kubelet plugin (``DraServer`` over ``DraDriver``, as ``kubegpu dra serve`` builds it) is
started in a temporary kubelet directory for a simulated ``seed-8gpu`` node. The client calls it as
kubelet does, one claim of ``--gpus`` devices per call, for ``--claims`` distinct claims, then prepares
every claim again (the idempotent path, answered from the checkpoint) and unprepares them all. Claims
are read from an in-memory stand-in for the API server, so the table shows the driver's own cost: the
claim checks, the CDI spec and checkpoint writes (fsync'ed), and gRPC. On a cluster add one GET of the
ResourceClaim (kubelet's own call timeout is 45 s).

Run: ``.venv/bin/python bench/dra_prepare.py [--claims 200] [--gpus 2]``. Numbers depend on the disk
and the machine's load; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import benchcli
import grpc

from kubegpu.dra.api import dra_v1_pb2 as pb
from kubegpu.dra.api import dra_v1_pb2_grpc as pb_grpc
from kubegpu.dra.checkpoint import CdiStore, Checkpoint
from kubegpu.dra.driver import DraDriver
from kubegpu.dra.server import DraServer
from kubegpu.model.dra import CDI_KIND, DRIVER_NAME, dra_devices
from kubegpu.sources.spec import load_node

NODE = "bench-node"


class Claims:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((namespace, name))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=benchcli.count, default=200)
    parser.add_argument("--gpus", type=int, choices=range(1, 9), default=2, help="devices per claim (1-8)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kgdra-", dir="/tmp"))
    try:
        node = load_node("builtin:seed-8gpu")
        devices = dra_devices(node)
        claims = Claims()
        for i in range(args.claims):
            results = [
                {"request": "gpus", "driver": DRIVER_NAME, "pool": NODE, "device": devices[(i + k) % 8].name}
                for k in range(args.gpus)
            ]
            claims.objects[("bench", f"c{i}")] = {
                "metadata": {"uid": f"uid-{i}"},
                "status": {"allocation": {"devices": {"results": results}}},
            }
        driver = DraDriver(
            node_name=NODE,
            devices=devices,
            claims=claims,
            checkpoint=Checkpoint(root / "plugins" / DRIVER_NAME / "checkpoint.json"),
            cdi=CdiStore(root / "cdi", kind=CDI_KIND),
        )
        server = DraServer(
            driver,
            plugin_dir=root / "plugins" / DRIVER_NAME,
            registry_dir=root / "plugins_registry",
            driver_name=DRIVER_NAME,
        )
        server.start()
        timings: dict[str, list[float]] = {"prepare": [], "prepare again": [], "unprepare": []}
        with grpc.insecure_channel(f"unix://{server.socket}") as channel:
            stub = pb_grpc.DRAPluginStub(channel)
            refs = [pb.Claim(namespace="bench", uid=f"uid-{i}", name=f"c{i}") for i in range(args.claims)]
            stub.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(claims=[]), timeout=45)  # connect

            def prepare(ref: Any) -> Any:
                return stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[ref]), timeout=45)

            def unprepare(ref: Any) -> Any:
                return stub.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(claims=[ref]), timeout=45)

            for phase, call in (("prepare", prepare), ("prepare again", prepare), ("unprepare", unprepare)):
                for ref in refs:
                    t0 = time.perf_counter()
                    answer = call(ref)
                    timings[phase].append((time.perf_counter() - t0) * 1000)
                    assert not answer.claims[ref.uid].error, answer.claims[ref.uid].error
        server.stop()
        print(
            f"kubegpu DRA driver, seed-8gpu, {args.claims} claims of {args.gpus} GPU(s), one claim per call"
        )
        print()
        print("| call | n | p50 ms | p99 ms | max ms | mean ms |")
        print("|---|---|---|---|---|---|")
        for phase, values in timings.items():
            print(
                f"| {phase} | {len(values)} | {percentile(values, 0.5):.2f} | {percentile(values, 0.99):.2f} "
                f"| {max(values):.2f} | {statistics.fmean(values):.2f} |"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    benchcli.run_main(main)
