"""Speed of `kubegpu sim` on the default openb trace: wall time as a user sees it, and pods/s.

Two measurements, both through the real command line (interpreter start-up included):

1. one seed of ``fgd`` (target: under 2 s wall);
2. every policy x 10 seeds with ``--workers 2`` (target: under 2 minutes);

then pods/s per policy from the second run's per-policy replay seconds. Prints a Markdown table.
Without the trace (shared data folder) it prints why and exits 0.

    python bench/sim_speed.py [--data DIR] [--seeds 42-51] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from openb import NODES, PODS, default_data_dir


def kubegpu(*args: str) -> tuple[float, dict[str, object]]:
    started = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "kubegpu", "sim", *args, "--json"], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - started
    if res.returncode != 0:
        raise SystemExit(f"kubegpu sim failed ({res.returncode}): {res.stderr.strip()}")
    doc: dict[str, object] = json.loads(res.stdout)
    return wall, doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    nodes, pods = args.data / NODES, args.data / PODS
    if not nodes.is_file() or not pods.is_file():
        print(
            f"sim_speed: skipped: the default trace is not in {args.data} (set KUBEGPU_OPENB_DIR or --data)"
        )
        return 0
    base = ["--nodes", str(nodes), "--pods", str(pods)]
    one_wall, one = kubegpu(*base, "--policy", "fgd", "--seeds", "42")
    all_wall, every = kubegpu(*base, "--seeds", args.seeds, "--workers", str(args.workers))
    print(f"cpus: {os.cpu_count()}, python {sys.version.split()[0]}")
    print()
    print("| measurement | wall s | target |")
    print("|---|---|---|")
    print(f"| `kubegpu sim --policy fgd --seeds 42` | {one_wall:.2f} | < 2 |")
    print(
        f"| `kubegpu sim --seeds {args.seeds} --workers {args.workers}` (7 policies) "
        f"| {all_wall:.1f} | < 120 |"
    )
    print()
    print("| policy | replay s (all seeds) | pods/s |")
    print("|---|---|---|")
    policies = every["policies"]
    assert isinstance(policies, dict)
    for name, entry in policies.items():
        print(f"| {name} | {entry['seconds']:.1f} | {entry['pods_per_second']:,.0f} |")
    fgd = one["policies"]
    assert isinstance(fgd, dict)
    return 0 if one_wall < 2 and all_wall < 120 else 1


if __name__ == "__main__":
    sys.exit(main())
