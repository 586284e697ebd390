"""Time `kubegpu doctor node` on fixture host roots (and optionally on this host) and print a table.

The issue's target: the whole node report in under 5 s on a healthy host. Fixture roots run the same
code as a real node; their commands are tiny shell scripts, so the numbers measure the doctor's own
cost (file reads, parsing, one nvidia-smi call), not a real driver's. Usage:

    python bench/doctor_bench.py [--runs N] [--gpus 2,8] [--live]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchcli
from tests.unit.doctor.fakehost import FakeHost

from kubegpu.doctor import node_report


def build(root: Path, gpus: int, *, broken: bool) -> FakeHost:
    host = FakeHost.healthy(root)
    buses = [f"0000:{0x10 + i:02x}:00.0" for i in range(gpus)]
    for bus in buses:
        host.pci(bus)
    for old in ("0000:3b:00.0", "0000:86:00.0"):
        for name in ("vendor", "class", "device"):
            (root / f"sys/bus/pci/devices/{old}/{name}").unlink()
    host.nvidia_smi([(str(i), bus, "Enabled") for i, bus in enumerate(buses)])
    for i in range(gpus):
        host.write(f"dev/nvidia{i}")
    host.cdi_spec([str(i) for i in range(gpus)])
    # a realistic kernel log: 50k lines, no XID
    host.kern_log(
        *(f"Nov 30 06:00:{i % 60:02d} gpu-node-1 kernel: [{i}.0] eth0: link up" for i in range(50_000))
    )
    if broken:
        host.modules("ext4")
    return host


def measure(root: Path, runs: int) -> tuple[list[float], int, int]:
    times, fails, checks = [], 0, 0
    for _ in range(runs):
        start = time.perf_counter()
        report = node_report(root)
        times.append(time.perf_counter() - start)
        fails = sum(1 for f in report.findings if f.status.value == "fail")
        checks = len(report.findings)
    return times, checks, fails


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=benchcli.count, default=10)
    parser.add_argument("--gpus", type=benchcli.counts, default="2,8", help="GPU counts, comma-separated")
    parser.add_argument("--live", action="store_true", help="also time the real host root /")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="doctor-bench-") as tmp:
        for gpus in args.gpus:
            for broken in (False, True):
                root = Path(tmp) / f"{gpus}-{broken}"
                build(root, gpus, broken=broken)
                name = f"fixture, {gpus} GPUs, " + ("driver not loaded" if broken else "healthy")
                rows.append((name, *measure(root, args.runs)))
    if args.live:
        rows.append(("this host (/)", *measure(Path("/"), args.runs)))
    print(f"{'scenario':<40} {'runs':>4} {'checks':>6} {'fail':>4} {'median ms':>10} {'max ms':>8}")
    for name, times, checks, fails in rows:
        print(
            f"{name:<40} {len(times):>4} {checks:>6} {fails:>4} "
            f"{statistics.median(times) * 1000:>10.1f} {max(times) * 1000:>8.1f}"
        )
    print("target: < 5000 ms for the whole node report on a healthy host")


if __name__ == "__main__":
    benchcli.run_main(main)
