"""Soak the real agent: 64 callers, faults toggling, kubelet restarts, for a minute; errors, RSS, threads.

The agent (``kubegpu agent --node-spec builtin:seed-8gpu``, time-sliced 8 x 4 so two resources are
served) registers with the kubelet double of the integration tests over real unix sockets. For
``--seconds`` (default 60):

* ``--callers`` threads (default 64) call GetPreferredAllocation then Allocate on the socket the
  agent registered, with random available sets, each call with a 5 s deadline;
* a fault thread appends an XID 79 for a random GPU to ``--fault-file`` and, 0.5 s later, the
  GPU's recovery, over and over (once a hostile line too: 100,000 ``[`` and a 5,000-digit number);
* every ``--restart-every`` seconds (default 10) the kubelet double restarts (sockets deleted,
  ``kubelet.sock`` recreated), as kubelet does.

It prints one table: calls made and failed by status code (UNAVAILABLE while kubelet restarts and the
agent re-creates its socket and server, UNAVAILABLE or CANCELLED, and FAILED_PRECONDITION for a device
that failed between the two calls, are expected; anything else is an error), re-registrations, whether the
final health seen by the kubelet double matches the last fault written (no health state lost), and the
agent's RSS and thread count before and after. Target: RSS after the soak <= 80 MB.

Run: ``.venv/bin/python bench/agent_soak.py [--seconds 60] [--callers 64]``.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchcli
from tests.integration.kubelet_double import KubeletDouble

from kubegpu.deviceplugin.api import v1beta1_pb2 as pb
from kubegpu.deviceplugin.api import v1beta1_pb2_grpc as pb_grpc

CONFIG = (
    "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"
)
RESOURCE = "nvidia.com/gpu"
RSS_TARGET_MB = 80.0


def proc_status(pid: int) -> tuple[float, int]:
    """(RSS in MB, threads) of a process."""
    rss, threads = float("nan"), -1
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    return rss, threads


class Soak:
    def __init__(self, work: Path, seconds: float, callers: int, restart_every: float) -> None:
        self.work = work
        self.seconds = seconds
        self.callers = callers
        self.restart_every = restart_every
        self.plugins = work / "plugins"
        self.faults = work / "faults.jsonl"
        self.kubelet = KubeletDouble(self.plugins)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.last_fault: dict[int, bool] = {}
        self.restarts = 0

    def socket(self) -> Path | None:
        ep = self.kubelet.endpoints.get(RESOURCE)
        return ep.socket if ep is not None else None

    def device_ids(self) -> list[str]:
        """The healthy devices: all kubelet ever offers to GetPreferredAllocation."""
        ep = self.kubelet.endpoints.get(RESOURCE)
        return [d.ID for d in ep.devices.values() if d.health == "Healthy"] if ep is not None else []

    def caller(self, seed: int) -> None:
        rng = random.Random(seed)
        channel: grpc.Channel | None = None
        dialled: Path | None = None
        while not self.stop.is_set():
            sock, ids = self.socket(), self.device_ids()
            if sock is None or len(ids) < 4:
                time.sleep(0.05)
                continue
            if channel is None or sock != dialled:
                if channel is not None:
                    channel.close()
                channel, dialled = grpc.insecure_channel(f"unix://{sock}"), sock
            stub = pb_grpc.DevicePluginStub(channel)
            size = rng.randint(1, 4)
            available = rng.sample(ids, max(size, len(ids) // 2))
            try:
                pref = stub.GetPreferredAllocation(
                    pb.PreferredAllocationRequest(
                        container_requests=[
                            pb.ContainerPreferredAllocationRequest(
                                available_deviceIDs=available, allocation_size=size
                            )
                        ]
                    ),
                    timeout=5,
                )
                chosen = list(pref.container_responses[0].deviceIDs)
                stub.Allocate(
                    pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=chosen)]),
                    timeout=5,
                )
                outcome = "OK"
            except grpc.RpcError as exc:
                outcome = exc.code().name
                time.sleep(0.02)
            with self.lock:
                self.outcomes[outcome] += 1
        if channel is not None:
            channel.close()

    def write_fault(self, line: str) -> None:
        with self.faults.open("a") as f:
            f.write(line + "\n")

    def fault_toggler(self) -> None:
        rng = random.Random(7)
        hostile_done = False
        while not self.stop.is_set():
            gpu = rng.randrange(8)
            self.write_fault(json.dumps({"gpu": gpu, "xid": 79, "detail": "soak"}))
            self.last_fault[gpu] = False
            if self.stop.wait(0.5):
                break
            if not hostile_done:
                self.write_fault("[" * 100_000)
                self.write_fault('{"gpu": 1, "xid": ' + "9" * 5000 + "}")
                hostile_done = True
            self.write_fault(json.dumps({"gpu": gpu, "healthy": True}))
            self.last_fault[gpu] = True
            self.stop.wait(0.5)

    def restarter(self) -> None:
        while not self.stop.wait(self.restart_every):
            self.kubelet.restart()
            self.restarts += 1

    def registrations(self) -> int:
        return len([c for c in self.kubelet.calls_named("Register") if c.resource == RESOURCE])

    def health_matches(self) -> bool:
        """Whether the kubelet double sees exactly the GPUs the fault file left unhealthy."""
        ep = self.kubelet.endpoints.get(RESOURCE)
        if ep is None:
            return False
        down = {g for g, ok in self.last_fault.items() if not ok}
        # Replica IDs are UUID::i; a GPU is down when its replicas are.
        unhealthy = {d.ID.split("::")[0] for d in ep.devices.values() if d.health != "Healthy"}
        return len(unhealthy) == len(down)

    def run(self) -> int:
        self.faults.write_text("")
        (self.work / "config.yaml").write_text(CONFIG)
        self.kubelet.start()
        log = (self.work / "agent.log").open("wb")
        agent = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kubegpu",
                "agent",
                "--node-spec",
                "builtin:seed-8gpu",
                "--device-plugin-dir",
                str(self.plugins),
                "--fault-file",
                str(self.faults),
                "--config",
                str(self.work / "config.yaml"),
                "--log-level",
                "warning",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            if not self.kubelet.wait_for(lambda: len(self.device_ids()) == 32, timeout=30):
                print("the agent did not register 32 devices within 30 s", file=sys.stderr)
                return 1
            time.sleep(1.0)
            rss0, threads0 = proc_status(agent.pid)
            workers = [threading.Thread(target=self.caller, args=(i,)) for i in range(self.callers)]
            workers += [threading.Thread(target=self.fault_toggler), threading.Thread(target=self.restarter)]
            t0 = time.monotonic()
            for w in workers:
                w.start()
            peak_rss, peak_threads = rss0, threads0
            while time.monotonic() - t0 < self.seconds:
                time.sleep(1.0)
                if agent.poll() is not None:
                    print(f"the agent exited with {agent.returncode} during the soak", file=sys.stderr)
                    break
                rss, threads = proc_status(agent.pid)
                peak_rss, peak_threads = max(peak_rss, rss), max(peak_threads, threads)
            self.stop.set()
            for w in workers:
                w.join(30)
            alive = agent.poll() is None
            settled = self.kubelet.wait_for(self.health_matches, timeout=15) if alive else False
            rss1, threads1 = proc_status(agent.pid) if alive else (float("nan"), -1)
        finally:
            if agent.poll() is None:
                agent.send_signal(signal.SIGTERM)
                agent.wait(10)
            log.close()
            self.kubelet.stop()
        calls = sum(self.outcomes.values())
        # UNAVAILABLE / CANCELLED: the kubelet restart deleted the agent's socket, and the agent re-creates
        # its server (calls in flight on the old one end; a restarted kubelet has none of those).
        # FAILED_PRECONDITION: a device went unhealthy between GetPreferredAllocation and Allocate.
        expected = ("OK", "UNAVAILABLE", "CANCELLED", "FAILED_PRECONDITION")
        unexpected = sum(n for k, n in self.outcomes.items() if k not in expected)
        rows = [
            ("duration s", f"{self.seconds:.0f}"),
            ("callers", str(self.callers)),
            ("calls (Preferred+Allocate pairs)", str(calls)),
            *((f"  {code}", str(n)) for code, n in sorted(self.outcomes.items())),
            ("unexpected errors", str(unexpected)),
            ("kubelet restarts", str(self.restarts)),
            ("registrations of nvidia.com/gpu", str(self.registrations())),
            ("agent alive at the end", "yes" if alive else "NO"),
            ("final health = last fault written", "yes" if settled else "NO"),
            ("RSS MB before / peak / after", f"{rss0:.1f} / {peak_rss:.1f} / {rss1:.1f}"),
            ("threads before / peak / after", f"{threads0} / {peak_threads} / {threads1}"),
            (f"RSS after <= {RSS_TARGET_MB:.0f} MB", "yes" if rss1 <= RSS_TARGET_MB else "NO"),
        ]
        width = max(len(k) for k, _ in rows)
        print(f"{'agent soak':{width}}  value")
        for key, value in rows:
            print(f"{key:{width}}  {value}")
        ok = alive and settled and unexpected == 0 and rss1 <= RSS_TARGET_MB
        return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=benchcli.positive, default=60.0)
    parser.add_argument("--callers", type=benchcli.count, default=64)
    parser.add_argument("--restart-every", type=benchcli.positive, default=10.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kgs-", dir="/tmp"))
    try:
        return Soak(work, args.seconds, args.callers, args.restart_every).run()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    benchcli.run_main(main)
