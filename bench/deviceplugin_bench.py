"""Device plugin latency, fault-to-snapshot latency and memory, measured against the real agent process.

For each node (``seed-8gpu``, ``hgx-16``, and ``seed-8gpu`` time-sliced into 8 GPUs x 10 replicas) it
starts ``kubegpu agent`` (no kubelet registration), dials its socket and measures, client side,
GetPreferredAllocation and Allocate latency with 1 and 32 concurrent callers (random available sets,
4 devices per request). Then: fault-to-snapshot latency (a line appended to ``--fault-file`` until a
ListAndWatch snapshot shows the GPU Unhealthy, and back), the agent's RSS after start, and, side by
side, GetPreferredAllocation's choice on 16 GPUs against an exhaustive partition search written the
go-gpuallocator way (the baseline NVIDIA's plugin uses), timed once per size.

Run: ``.venv/bin/python bench/deviceplugin_bench.py [--quick]``. Numbers depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import combinations
from pathlib import Path

import grpc

from kubegpu.deviceplugin.api import v1beta1_pb2 as pb
from kubegpu.deviceplugin.api import v1beta1_pb2_grpc as pb_grpc
from kubegpu.model.topology import LinkKind, Topology
from kubegpu.sources.spec import load_node

TIME_SLICED = (
    "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 10\n"
)
REQUEST = 4


@contextmanager
def agent(spec: str, config: str | None = None) -> Iterator[tuple[subprocess.Popen[bytes], Path, Path]]:
    """The real agent as a child process; yields (process, its socket, its fault file)."""
    work = Path(tempfile.mkdtemp(prefix="kgb-", dir="/tmp"))
    faults = work / "faults.jsonl"
    faults.write_text("")
    args = [sys.executable, "-m", "kubegpu", "agent", "--node-spec", spec, "--device-plugin-dir", str(work)]
    args += ["--kubelet-socket", "", "--fault-file", str(faults), "--log-level", "warning"]
    if config is not None:
        (work / "config.yaml").write_text(config)
        args += ["--config", str(work / "config.yaml")]
    proc = subprocess.Popen(args, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            sockets = [p for p in work.iterdir() if p.suffix == ".sock"]
            if sockets:
                break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"agent for {spec} did not start")
            time.sleep(0.02)
        yield proc, sockets[0], faults
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)


def stub(socket: Path) -> tuple[grpc.Channel, pb_grpc.DevicePluginStub]:
    channel = grpc.insecure_channel(f"unix://{socket}")
    grpc.channel_ready_future(channel).result(timeout=10)
    return channel, pb_grpc.DevicePluginStub(channel)


def device_ids(socket: Path) -> list[str]:
    channel, s = stub(socket)
    with channel:
        first = next(iter(s.ListAndWatch(pb.Empty())))
        return [d.ID for d in first.devices]


def pct(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def latency(socket: Path, ids: list[str], callers: int, per_caller: int) -> dict[str, list[float]]:
    """Client-side milliseconds of GetPreferredAllocation and Allocate from ``callers`` threads."""
    results: dict[str, list[float]] = {"pref": [], "alloc": []}
    lock = threading.Lock()
    barrier = threading.Barrier(callers)

    def run(seed: int) -> None:
        rng = random.Random(seed)
        channel, s = stub(socket)
        pref_ms, alloc_ms = [], []
        with channel:
            barrier.wait()
            for _ in range(per_caller):
                available = rng.sample(ids, max(REQUEST, (len(ids) * 3) // 4))
                request = pb.PreferredAllocationRequest(
                    container_requests=[
                        pb.ContainerPreferredAllocationRequest(
                            available_deviceIDs=available, allocation_size=REQUEST
                        )
                    ]
                )
                t0 = time.perf_counter()
                chosen = s.GetPreferredAllocation(request, timeout=30).container_responses[0].deviceIDs
                t1 = time.perf_counter()
                s.Allocate(
                    pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=chosen)]),
                    timeout=30,
                )
                t2 = time.perf_counter()
                pref_ms.append((t1 - t0) * 1000)
                alloc_ms.append((t2 - t1) * 1000)
        with lock:
            results["pref"] += pref_ms
            results["alloc"] += alloc_ms

    threads = [threading.Thread(target=run, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def fault_to_snapshot(socket: Path, faults: Path, ids: list[str], rounds: int) -> list[float]:
    """Milliseconds from appending a fault (or recovery) line to the snapshot that shows it."""
    channel, s = stub(socket)
    snapshots: list[tuple[float, dict[str, str]]] = []
    cond = threading.Condition()
    stream = s.ListAndWatch(pb.Empty())

    def read() -> None:
        try:
            for response in stream:
                with cond:
                    snapshots.append((time.perf_counter(), {d.ID: d.health for d in response.devices}))
                    cond.notify_all()
        except grpc.RpcError:
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    samples: list[float] = []
    target = ids[0].split("::")[0]
    for i in range(rounds):
        healthy = i % 2 == 1
        want = "Healthy" if healthy else "Unhealthy"
        with cond:
            start_count = len(snapshots)
        line = {"gpu": target, "healthy": True} if healthy else {"gpu": target, "xid": 79}
        t0 = time.perf_counter()
        with faults.open("a") as f:
            f.write(json.dumps(line) + "\n")
        with cond:
            while True:
                fresh = [(t, h) for t, h in snapshots[start_count:] if h[ids[0]] == want]
                if fresh:
                    samples.append((fresh[0][0] - t0) * 1000)
                    break
                if not cond.wait(5):
                    raise SystemExit("no snapshot within 5 s of a fault")
    stream.cancel()
    channel.close()
    return samples


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# --- the go-gpuallocator baseline --------------------------------------------------------------

_POINTS = {LinkKind.SYS: 10, LinkKind.NODE: 20, LinkKind.PHB: 30, LinkKind.PXB: 40, LinkKind.PIX: 50}


def _pair_score(topo: Topology, a: int, b: int) -> int:
    link = topo.links[a][b]
    if link.kind is LinkKind.NVLINK:
        return 100 * link.nvlinks
    return _POINTS.get(link.kind, 0)


def partitions(items: list[int | None], size: int) -> Iterator[list[tuple[int | None, ...]]]:
    """Every partition of ``items`` into sets of ``size`` (first element fixed, as go-gpuallocator)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for others in combinations(range(len(rest)), size - 1):
        chosen = (first, *(rest[i] for i in others))
        # a set holds all padding or none
        if any(x is None for x in chosen) and not all(x is None for x in chosen):
            continue
        remaining = [x for i, x in enumerate(rest) if i not in others]
        for tail in partitions(remaining, size):
            yield [chosen, *tail]


def exhaustive(topo: Topology, available: list[int], size: int) -> tuple[tuple[int, ...], int]:
    """go-gpuallocator's best-effort policy: best-scoring partition, then its best real set."""
    padded: list[int | None] = list(available) + [None] * ((-len(available)) % size)
    best_total, best_set, count = -1, (), 0
    for partition in partitions(padded, size):
        count += 1
        total, local_best, local_score = 0, (), -1
        for s in partition:
            if s[0] is None:
                continue
            score = sum(_pair_score(topo, a, b) for a, b in combinations(s, 2))  # type: ignore[arg-type]
            total += score
            if score > local_score:
                local_best, local_score = s, score
        if total > best_total:
            best_total, best_set = total, local_best
    return tuple(sorted(x for x in best_set if x is not None)), count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (CI smoke)")
    args = parser.parse_args()
    per_single, per_multi, rounds = (50, 3, 10) if args.quick else (400, 25, 60)
    baseline_sizes = (8,) if args.quick else (8, 4)

    print(f"# deviceplugin bench ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}); request = {REQUEST}")
    print(
        f"{'node':<22}{'callers':>8}{'pref p50':>10}{'pref p99':>10}{'alloc p50':>11}{'alloc p99':>11}  (ms)"
    )
    scenarios = [("seed-8gpu", None), ("hgx-16", None), ("seed-8gpu x10 replicas", TIME_SLICED)]
    fault_samples: list[float] = []
    rss = 0.0
    for name, config in scenarios:
        spec = "builtin:" + name.split()[0]
        with agent(spec, config) as (proc, socket, faults):
            if name == "seed-8gpu":
                time.sleep(1.0)
                rss = rss_mib(proc.pid)
            ids = device_ids(socket)
            for callers, per in ((1, per_single), (32, per_multi)):
                r = latency(socket, ids, callers, per)
                pref, alloc = r["pref"], r["alloc"]
                print(
                    f"{name:<22}{callers:>8}{statistics.median(pref):>10.2f}{pct(pref, 0.99):>10.2f}"
                    f"{statistics.median(alloc):>11.2f}{pct(alloc, 0.99):>11.2f}"
                )
            if name.startswith("seed-8gpu x10"):
                fault_samples = fault_to_snapshot(socket, faults, ids, rounds)
    print()
    p50, p99 = statistics.median(fault_samples), pct(fault_samples, 0.99)
    print(
        f"fault-to-snapshot ({len(fault_samples)} transitions, 80 replicas): "
        f"p50 {p50:.1f} ms, p99 {p99:.1f} ms (target < 200 ms)"
    )
    print(f"agent RSS after start (seed-8gpu): {rss:.1f} MiB (target < 80 MB)")
    print()
    node = load_node("builtin:hgx-16")
    topo = node.topology
    assert topo is not None
    uuids = [g.uuid for g in node.gpus]
    print("GetPreferredAllocation on 16 free GPUs: kubegpu (exact, via the agent) vs exhaustive search")
    header = ("size", "kubegpu ms", "kubegpu cost", "partitions", "exhaustive ms", "its cost")
    print(f"{header[0]:>5}{header[1]:>12}{header[2]:>14}{header[3]:>12}{header[4]:>15}{header[5]:>10}")
    with agent("builtin:hgx-16") as (_proc, socket, _faults):
        channel, s = stub(socket)
        with channel:
            for size in baseline_sizes:
                request = pb.PreferredAllocationRequest(
                    container_requests=[
                        pb.ContainerPreferredAllocationRequest(
                            available_deviceIDs=uuids, allocation_size=size
                        )
                    ]
                )
                t0 = time.perf_counter()
                ours = s.GetPreferredAllocation(request, timeout=60).container_responses[0].deviceIDs
                ours_ms = (time.perf_counter() - t0) * 1000
                ours_set = sorted(uuids.index(u) for u in ours)
                t0 = time.perf_counter()
                theirs, count = exhaustive(topo, list(range(16)), size)
                theirs_ms = (time.perf_counter() - t0) * 1000
                print(
                    f"{size:>5}{ours_ms:>12.2f}{topo.set_cost(ours_set):>14.3f}{count:>12,}"
                    f"{theirs_ms:>15.0f}{topo.set_cost(theirs):>10.3f}"
                )


if __name__ == "__main__":
    main()
