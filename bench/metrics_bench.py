"""The agent's /metrics: scrape size and latency for 8 GPUs and for 8 x 10 replicas held by 80 pods; RSS.

Runs the real agent (``kubegpu agent --node-spec builtin:seed-8gpu --kubelet-socket ""``) with
``--metrics-address`` and its pod labels from the PodResources double of the integration tests (real
gRPC on a unix socket, kubelet's rate limit):

* ``8 GPUs``: no sharing, one pod per GPU (8 holders);
* ``8 x 10 replicas``: time-slicing with 10 replicas, 80 pods each holding one replica (10 per GPU),
  so every GPU has 10 series per field;

and scrapes ``/metrics`` ``--scrapes`` times (default 200, 20 ms apart, so the 1 s PodResources cache
is refilled about every 50 scrapes). It prints one table: bytes and series per scrape (all, and the
``DCGM_FI_*`` ones), scrape latency p50 / p95 / max, and the agent's RSS after the scrapes, next to the
same agent without ``--metrics-address`` (metrics off: prometheus-client is not even imported).

Run: ``.venv/bin/python bench/metrics_bench.py [--scrapes 200]``.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchcli
from tests.integration.podresources_double import FakeContainer, FakePod, PodResourcesDouble

from kubegpu.sources.spec import load_node

SPEC = "builtin:seed-8gpu"
RESOURCE = "nvidia.com/gpu"


def time_sliced(replicas: int) -> str:
    return (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        f"    - name: {RESOURCE}\n      replicas: {replicas}\n"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def scrape(port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return bytes(reply.read())


class Agent:
    def __init__(self, work: Path, *, replicas: int, metrics_port: int | None, pod_resources: Path) -> None:
        config = work / f"config-{replicas}.yaml"
        config.write_text(time_sliced(replicas) if replicas > 1 else "version: v1\n")
        argv = [sys.executable, "-m", "kubegpu", "agent", "--node-spec", SPEC, "--kubelet-socket", ""]
        argv += ["--device-plugin-dir", str(work / f"dp-{replicas}-{metrics_port}"), "--config", str(config)]
        if metrics_port is not None:
            argv += [
                "--metrics-address",
                f"127.0.0.1:{metrics_port}",
                "--pod-resources-socket",
                str(pod_resources),
            ]
        self.log = (work / f"agent-{replicas}-{metrics_port}.log").open("wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(10)
        self.log.close()


def holders(replicas: int) -> list[FakePod]:
    node = load_node(SPEC)
    pods = []
    for gpu in node.gpus:
        for k in range(replicas):
            device = f"{gpu.uuid}::{k}" if replicas > 1 else str(gpu.uuid)
            name = f"pod-{gpu.index}-{k}"
            pods.append(
                FakePod(
                    namespace="bench",
                    name=name,
                    containers=(FakeContainer(name="main", devices={RESOURCE: (device,)}),),
                )
            )
    return pods


def wait_up(port: int, agent: Agent, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if agent.proc.poll() is not None:
            raise SystemExit(f"the agent exited ({agent.proc.returncode}); see {agent.log.name}")
        try:
            if b"DCGM_FI_DEV_FB_USED{" in scrape(port):
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("the agent's /metrics did not come up")


def measure(work: Path, double: PodResourcesDouble, replicas: int, scrapes: int) -> dict[str, float]:
    double.pods = holders(replicas)
    port = free_port()
    agent = Agent(work, replicas=replicas, metrics_port=port, pod_resources=double.socket_path)
    try:
        wait_up(port, agent)
        latencies, body = [], b""
        for _ in range(scrapes):
            t0 = time.perf_counter()
            body = scrape(port)
            latencies.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.02)
        lines = [line for line in body.decode().splitlines() if line and not line.startswith("#")]
        latencies.sort()
        return {
            "bytes": len(body),
            "series": len(lines),
            "dcgm": sum(1 for line in lines if line.startswith("DCGM_FI_")),
            "p50": statistics.median(latencies),
            "p95": latencies[int(0.95 * (len(latencies) - 1))],
            "max": latencies[-1],
            "rss": rss_mb(agent.proc.pid),
        }
    finally:
        agent.stop()


def rss_without_metrics(work: Path, replicas: int) -> float:
    agent = Agent(work, replicas=replicas, metrics_port=None, pod_resources=work / "unused")
    try:
        time.sleep(4)  # started and serving (no endpoint to poll)
        if agent.proc.poll() is not None:
            raise SystemExit(f"the agent exited ({agent.proc.returncode}); see {agent.log.name}")
        return rss_mb(agent.proc.pid)
    finally:
        agent.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scrapes", type=benchcli.count, default=200)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kg-mb-", dir="/tmp"))
    double = PodResourcesDouble(work / "pod-resources" / "kubelet.sock").start()
    try:
        rows = []
        for label, replicas in (("8 GPUs, 8 pods", 1), ("8 x 10 replicas, 80 pods", 10)):
            on = measure(work, double, replicas, args.scrapes)
            off = rss_without_metrics(work, replicas)
            rows.append((label, on, off))
    finally:
        double.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"/metrics of `kubegpu agent --node-spec {SPEC}` ({args.scrapes} scrapes each, 20 ms apart)\n")
    print(
        "| case | bytes/scrape | series (DCGM_FI_*) | scrape p50 / p95 / max (ms) "
        "| RSS metrics on | RSS metrics off |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for label, on, off in rows:
        print(
            f"| {label} | {on['bytes']:,.0f} | {on['series']:.0f} ({on['dcgm']:.0f}) | "
            f"{on['p50']:.1f} / {on['p95']:.1f} / {on['max']:.1f} | {on['rss']:.1f} MB | {off:.1f} MB |"
        )


if __name__ == "__main__":
    benchcli.run_main(main)
