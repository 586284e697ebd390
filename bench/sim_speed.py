"""Speed of `kubegpu sim` on the default openb trace: wall time as a user sees it, and pods/s.

Two measurements, both through the real command line (interpreter start-up included):

1. one seed of the default policy, ``kubegpu-plan`` (``kubegpu sim --policy kubegpu-plan --seeds 42``,
   its plan's LP included; target: 1.2 s wall; best of ``--repeat`` runs, since other jobs share the
   machine), and of ``fgd`` beside it;
2. every policy x 10 seeds with ``--workers 2`` (target: 20 s wall);

then pods/s per policy from the second run's per-policy replay seconds. Each run's CPU time (user +
system of the process and its workers) is shown next to its wall time: on a shared machine it is
less sensitive to other jobs. ``--baseline SRC`` also measures another checkout's ``src`` folder
(e.g. main's, from ``git archive``) the same way, interleaved run by run with this one, so both see
the same load. ``--profile`` also prints where run 1's time goes: the slowest imports (``python -X
importtime``) and the top functions of a cProfile of the whole command. Prints Markdown tables.
Without the trace (KUBEGPU_OPENB_DIR pointing elsewhere) it prints why and exits 0; it never fails
on time (speed is reported, not asserted).

    python bench/sim_speed.py [--data DIR] [--seeds 42-51] [--workers 2] [--repeat 3] [--repeat-all 1]
        [--profile] [--baseline OTHER/src] [--skip-all]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import resource
import subprocess
import sys
import time
from pathlib import Path

import benchcli
from openb import NODES, PODS, default_data_dir, trace_missing


def kubegpu(*args: str, src: Path | None = None) -> tuple[float, float, dict[str, object]]:
    """Wall and CPU seconds of one ``kubegpu sim ... --json`` process (and its workers), and its document.

    ``src``: run the kubegpu package found there instead of the installed one.
    """
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), env.get("PYTHONPATH", "")) if p)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "kubegpu", "sim", *args, "--json"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if res.returncode != 0:
        print(f"sim_speed.py: kubegpu sim failed: {res.stderr.strip()}", file=sys.stderr)
        sys.exit(res.returncode)  # 2 for a bad trace, as kubegpu sim
    doc: dict[str, object] = json.loads(res.stdout)
    return wall, cpu, doc


def profile(base: list[str]) -> None:
    """Where one seed of fgd spends its time: imports, then functions (cumulative)."""
    res = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "kubegpu",
            "sim",
            *base,
            "--policy",
            "fgd",
            "--seeds",
            "42",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    rows = []
    for line in res.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line.split("|")
            if cumulative.strip().isdigit():
                rows.append((int(cumulative), name.rstrip()))
    top = [r for r in rows if not r[1].startswith("  ")]
    print("top-level imports (cumulative ms):")
    for us, name in sorted(top, reverse=True)[:8]:
        print(f"  {us / 1000:7.1f}  {name.strip()}")
    from kubegpu.cli.app import main as cli

    prof = cProfile.Profile()
    prof.enable()
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the command's JSON is not the report
            cli(["sim", *base, "--policy", "fgd", "--seeds", "42", "--json"])
    except SystemExit:
        pass
    finally:
        prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(12)
    print("cProfile of the command in this process (imports already done), top 12 by own time:")
    for line in out.getvalue().splitlines():
        if line.strip() and ("ncalls" in line or line.lstrip()[:1].isdigit()):
            print("  " + line.replace(str(Path.cwd()) + "/", ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--seeds", type=benchcli.seeds, default="42-51")
    ap.add_argument("--workers", type=benchcli.count, default=2)
    ap.add_argument(
        "--repeat", type=benchcli.count, default=3, help="runs of the one-seed measurement (best is shown)"
    )
    ap.add_argument(
        "--repeat-all", type=benchcli.count, default=1, help="runs of the all-policies measurement"
    )
    ap.add_argument("--profile", action="store_true", help="also print the import and function profile")
    ap.add_argument("--baseline", type=Path, help="also measure the kubegpu package in this src folder")
    ap.add_argument("--skip-all", action="store_true", help="only the one-seed measurement")
    args = ap.parse_args()
    if args.baseline is not None and not (args.baseline / "kubegpu").is_dir():
        ap.error(f"--baseline {args.baseline}: no kubegpu package in it; name a checkout's src folder")
    if trace_missing(args.data, "sim_speed"):
        return 0
    nodes, pods = args.data / NODES, args.data / PODS
    base = ["--nodes", str(nodes), "--pods", str(pods)]
    ones_args = {
        "kubegpu-plan": [*base, "--policy", "kubegpu-plan", "--seeds", "42"],
        "fgd": [*base, "--policy", "fgd", "--seeds", "42"],
    }
    seeds = ",".join(map(str, args.seeds))
    every_args = [*base, "--seeds", seeds, "--workers", str(args.workers)]
    variants: list[tuple[str, Path | None]] = [("this checkout", None)]
    if args.baseline is not None:
        variants.insert(0, (f"baseline {args.baseline}", args.baseline))
    load_before = os.getloadavg()[0]
    ones: dict[tuple[str, str], list[tuple[float, float, dict[str, object]]]] = {
        (name, p): [] for name, _ in variants for p in ones_args
    }
    for _ in range(args.repeat):
        for name, src in variants:  # interleaved: each variant sees the same minutes
            for policy, one in ones_args.items():
                ones[(name, policy)].append(kubegpu(*one, src=src))
    runs_all: dict[str, list[tuple[float, float, dict[str, object]]]] = {name: [] for name, _ in variants}
    if not args.skip_all:
        for _ in range(args.repeat_all):
            for name, src in variants:
                runs_all[name].append(kubegpu(*every_args, src=src))
    alls = {name: min(runs, key=lambda r: r[0]) for name, runs in runs_all.items() if runs}
    load_after = os.getloadavg()[0]
    print(
        f"cpus: {os.cpu_count()}, python {sys.version.split()[0]}, "
        f"load average {load_before:.1f} before, {load_after:.1f} after"
    )
    print()
    print("| code | measurement | wall s | cpu s | target wall s |")
    print("|---|---|---|---|---|")
    for name, _ in variants:
        for policy in ones_args:
            runs = ones[(name, policy)]
            wall, cpu, _ = min(runs, key=lambda r: r[0])
            print(
                f"| {name} | `kubegpu sim --policy {policy} --seeds 42` (best of {len(runs)}) "
                f"| {wall:.2f} | {cpu:.2f} | 1.2 |"
            )
        if name in alls:
            wall, cpu, _ = alls[name]
            runs = runs_all[name]
            walls = ", ".join(f"{r[0]:.1f}" for r in runs)
            label = f"best of {len(runs)}, all: {walls}" if len(runs) > 1 else ""
            print(
                f"| {name} | `kubegpu sim --seeds {seeds} --workers {args.workers}` (7 policies"
                f"{'; ' + label if label else ''}) | {wall:.1f} | {cpu:.1f} | 20 |"
            )
    if alls:
        every = alls["this checkout"][2]
        print()
        print("| policy | replay s (all seeds) | pods/s |")
        print("|---|---|---|")
        policies = every["policies"]
        assert isinstance(policies, dict)
        for name, entry in policies.items():
            print(f"| {name} | {entry['seconds']:.1f} | {entry['pods_per_second']:,.0f} |")
    if args.profile:
        print()
        profile(base)
    return 0


if __name__ == "__main__":
    benchcli.run_main(main)
