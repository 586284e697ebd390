"""How far FGD and kubegpu are from the best possible: the upper bound beside both, per workload.

For the default trace and the FGD artifact's GPU-sharing variants (``gpushare40/60/80/100``, generated
from the default pod list with ``kubegpu.sim.variants.gpushare_variant`` into a temporary folder) it
computes, for each seed, the upper bound on allocated GPU % (``kubegpu.sim.bound``) and the
allocation at 130 % arrived of ``fgd`` and ``kubegpu`` (the library's replay, the artifact's
node-order ties), and prints a markdown table of the means over the seeds:

    variant | bound | FGD | kubegpu | FGD gap | kubegpu gap | share of FGD's gap closed

with the gap = bound - allocation and the share = (kubegpu - FGD) / (bound - FGD). A second table
puts the online bound beside them (``kubegpu.sim.online_bound``: no policy that places every pod
that fits on arrival, as issue 16's rules require, allocates more): whether issue 16's target,
FGD + 40 % of its gap to the bound, is below it (reachable online at all), the share of FGD's gap
to the online bound that kubegpu closes, and whether both policies stay under it on every seed.
Without the trace it prints why and exits 0.

A third table adds ``kubegpu-plan`` (``kubegpu.sim.plan``) beside them: its allocation and the
share of FGD's gap it closes, to the bound and to the online bound, and the allocation that closes
75 % of FGD's gap to the online bound (issue 30's goal), met or not.

    python bench/sim_gap.py [--data DIR] [--seeds 42-51 | --tune | --held-out] [--workers 2]
        [--variants default,gpushare40,...] [--bound-cache FILE | --no-bound-cache]
        [--second-pivot | --pivots 1..5] [--whole-pivots] [--tightest] [--plot FILE]

Seed sets: 42-51 (the paper's, default), ``--tune`` 0-9, ``--held-out`` 100-109. ``--second-pivot``
(``--pivots 2``) tightens the online bound with a second pivot (``online_bound(..., pivots=2)``,
about a minute per seed instead of seconds), ``--pivots 3`` with a third as well (two to three
minutes per seed), ``--pivots 4`` and ``5`` with the three and four candidates whose pairs came lowest;
``--whole-pivots`` adds the common 1-GPU whole-GPU shapes to the candidates (``online_bound(...,
whole_pivots=True)``); each is cached under its own key.

The bounds take seconds per seed and depend only on the two CSV files, the seed and the bounds'
code, so each pair is kept in a JSON file (default ``~/.cache/kubegpu/sim_gap_bounds.json``) under
a key made of their SHA-256 digests and the seed; a later run, e.g. after a policy change, reuses it.
``--tightest`` takes, per seed, the lowest online bound the cache holds for the same files and code
under any pivot setting (every one is a valid bound, so the lowest is too), and solves the setting
asked for only for seeds with none cached: after ``--pivots 5 --whole-pivots --variants
gpushare60,gpushare80`` has run, ``--pivots 2 --tightest`` prints every variant against the
tightest bound measured, and says on stderr which settings the bounds came from.

``--plot FILE`` draws the last table's shares per seed (``kubegpu.sim.plot.plot_gap_closed``): per
variant, a bar each for ``kubegpu`` and ``kubegpu-plan`` at the share of the means, a dot per seed
(each seed's own share at 130 % arrived), the 75 % goal as a line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import benchcli
from openb import NODES, PODS, default_data_dir, trace_missing

import kubegpu.sim.bound as bound_module
import kubegpu.sim.online_bound as online_module
from kubegpu.errors import InputError
from kubegpu.sim.curves import alloc_at
from kubegpu.sim.online_bound import OnlineBound, online_bound
from kubegpu.sim.plot import GapClosed, check_plot_path, plot_gap_closed
from kubegpu.sim.replay import SeedRun
from kubegpu.sim.run import SimRequest, parse_seeds, run_all, summarise_all
from kubegpu.sim.scoring import Policy
from kubegpu.sim.trace import load_pods, load_trace, write_pods
from kubegpu.sim.variants import gpushare_variant
from kubegpu.sim.workload import Workload, prepare

VARIANTS = ("default", "gpushare40", "gpushare60", "gpushare80", "gpushare100")
VARIANT_SEED = 0  # the variant pod lists themselves: one fixed draw each
GOAL = 0.75  # the share of FGD's gap to the online bound the default policy is to close (issue 30)
# bound cache keys per --pivots (and "/whole" after them with --whole-pivots)
_KEY_SUFFIX = {1: "", 2: "/second-pivot", 3: "/three-pivots", 4: "/four-pivots", 5: "/five-pivots"}

_WORKLOAD: Workload | None = None
_PIVOTS = 1
_WHOLE = False


def _bound(seed: int) -> OnlineBound:
    assert _WORKLOAD is not None
    return online_bound(_WORKLOAD, seed, pivots=_PIVOTS, whole_pivots=_WHOLE)


def bounds(
    workload: Workload, seeds: tuple[int, ...], workers: int, *, pivots: int = 1, whole: bool = False
) -> list[OnlineBound]:
    global _WORKLOAD, _PIVOTS, _WHOLE  # inherited by the forked workers
    _WORKLOAD, _PIVOTS, _WHOLE = workload, pivots, whole
    done: dict[int, OnlineBound] = {}

    def report(seed: int, result: OnlineBound) -> None:
        done[seed] = result
        print(
            f"sim_gap: bound {len(done)}/{len(seeds)}: seed {seed} online {result.bound_pct:.3f} % "
            f"({result.seconds:.0f} s)",
            file=sys.stderr,
            flush=True,
        )

    if workers <= 1:
        for seed in seeds:
            report(seed, _bound(seed))
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(_bound, seed): seed for seed in seeds}
            for future in as_completed(futures):
                report(futures[future], future.result())
    return [done[seed] for seed in seeds]


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for path in (*paths, Path(bound_module.__file__), Path(online_module.__file__)):
        h.update(path.read_bytes())
    return h.hexdigest()[:32]


# every bound cache key suffix: one per pivot setting
_SETTINGS = tuple(f"{suffix}{whole}" for suffix in _KEY_SUFFIX.values() for whole in ("", "/whole"))


def tightest(stored: dict[str, list[float]], prefix: str, seed: int) -> tuple[float, float, str] | None:
    """(bound %, online bound %, key suffix) of the pivot setting whose online bound is the lowest
    ``stored`` holds for ``prefix`` (variant and digests) and ``seed``; None if it holds none."""
    found = [
        (values[1], values[0], suffix)
        for suffix in _SETTINGS
        if len(values := stored.get(f"{prefix}{suffix}/{seed}", [])) == 2
    ]
    if not found:
        return None
    online, offline, suffix = min(found)
    return offline, online, suffix


def read_cache(cache: Path) -> dict[str, list[float]]:
    """The bounds ``cache`` holds (none while it does not exist); ``InputError`` if it cannot be read
    or is not a bound cache: a file of something else is never overwritten."""
    if not cache.exists():
        return {}
    try:
        loaded = json.loads(cache.read_text(encoding="utf-8"))
        if isinstance(loaded, dict):
            return {k: [float(x) for x in v] for k, v in loaded.items()}
    except OSError as exc:
        raise InputError(f"--bound-cache {cache}: cannot read: {exc.strerror or exc}") from exc
    except (ValueError, TypeError):  # not UTF-8, not JSON, not lists of numbers
        pass
    raise InputError(
        f"--bound-cache {cache}: not a bound cache (sim_gap's JSON of bounds per seed); name another "
        "file, or pass --no-bound-cache"
    )


def cached_bounds(
    workload: Workload,
    seeds: tuple[int, ...],
    workers: int,
    *,
    key: str,
    cache: Path | None,
    pivots: int = 1,
    whole: bool = False,
    lowest_of: str | None = None,
) -> list[tuple[float, float]]:
    """(bound %, online bound %) per seed, from ``cache`` where it holds them for ``key``; the rest
    solved and stored. With ``lowest_of`` (the key without its pivot setting) each online bound is
    the lowest the cache holds for that prefix and the seed (``--tightest``)."""
    stored = read_cache(cache) if cache is not None else {}
    missing = tuple(
        s
        for s in seeds
        if f"{key}/{s}" not in stored and (lowest_of is None or tightest(stored, lowest_of, s) is None)
    )
    solved = bounds(workload, missing, workers, pivots=pivots, whole=whole)
    for seed, result in zip(missing, solved, strict=True):
        stored[f"{key}/{seed}"] = [result.offline_pct, result.bound_pct]
    if cache is not None and missing:
        tmp = cache.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(stored, indent=0, sort_keys=True))
            os.replace(tmp, cache)
        except OSError as exc:
            raise InputError(f"--bound-cache {cache}: cannot write: {exc.strerror or exc}") from exc
    if lowest_of is None:
        return [(stored[f"{key}/{s}"][0], stored[f"{key}/{s}"][1]) for s in seeds]
    picked: list[tuple[float, float]] = []
    settings: list[str] = []
    for seed in seeds:
        low = tightest(stored, lowest_of, seed)
        assert low is not None  # solved above where none was cached
        picked.append((low[0], low[1]))
        settings.append(low[2].strip("/") or "one pivot")
    counts = ", ".join(f"{setting} {settings.count(setting)}" for setting in dict.fromkeys(settings))
    print(f"sim_gap: the tightest cached online bounds come from: {counts}", file=sys.stderr, flush=True)
    return picked


def _final_pct(workload: Workload, runs: list[SeedRun]) -> list[float]:
    return [100.0 * int(r.allocated_milli[-1]) / workload.total_gpu_milli for r in runs]


def _share(allocated: float, fgd: float, bound: float) -> float:
    """The share (%) of FGD's gap to ``bound`` that ``allocated`` closes (NaN without a gap)."""
    return (allocated - fgd) / (bound - fgd) * 100 if bound > fgd else float("nan")


def _seed_shares(runs: list[SeedRun], fgd: list[SeedRun], online: list[float]) -> tuple[float, ...]:
    """Each seed's share (%) of FGD's gap to its online bound closed, at 130 % arrived."""
    out = []
    for run, base, bound in zip(runs, fgd, online, strict=True):
        ours, theirs = alloc_at(run, 130), alloc_at(base, 130)
        if ours is not None and theirs is not None and bound > theirs:
            out.append(_share(ours, theirs, bound))
    return tuple(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=default_data_dir())
    ap.add_argument("--seeds", type=benchcli.seeds, default="42-51")
    ap.add_argument("--tune", action="store_true", help="seeds 0-9 (the tuning set)")
    ap.add_argument("--held-out", action="store_true", help="seeds 100-109 (held out)")
    ap.add_argument("--workers", type=benchcli.count, default=2)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument(
        "--bound-cache", type=Path, default=Path.home() / ".cache" / "kubegpu" / "sim_gap_bounds.json"
    )
    ap.add_argument("--no-bound-cache", action="store_true", help="solve every bound, store none")
    ap.add_argument(
        "--second-pivot",
        action="store_true",
        help="tighten the online bound with a second pivot (kubegpu sim bound --second-pivot; slower)",
    )
    ap.add_argument(
        "--pivots",
        type=int,
        choices=(1, 2, 3, 4, 5),
        default=1,
        help="shapes the online bound forces in jointly (kubegpu sim bound --pivots; 2 is --second-pivot)",
    )
    ap.add_argument(
        "--whole-pivots",
        action="store_true",
        help="1-GPU whole-GPU shapes among the extra pivots too (implies --pivots 2 at least, as"
        " kubegpu sim bound --whole-pivots)",
    )
    ap.add_argument(
        "--tightest",
        action="store_true",
        help="per seed, the lowest online bound cached under any pivot setting (the one asked for solved"
        " only where none is)",
    )
    ap.add_argument(
        "--plot", type=Path, help="draw the shares of FGD's gap closed per seed to this image file"
    )
    args = ap.parse_args()
    if args.plot is not None:
        check_plot_path(args.plot)
    if args.tightest and args.no_bound_cache:
        print("sim_gap: --tightest reads the bound cache; drop --no-bound-cache", file=sys.stderr)
        return 2
    pivots = max(args.pivots, 2 if args.second_pivot or args.whole_pivots else 1)  # as kubegpu sim bound
    cache = None if args.no_bound_cache else args.bound_cache
    if trace_missing(args.data, "sim_gap"):
        return 0
    if cache is not None:  # now, not after the first variant's minutes of solving
        benchcli.check_out_file("--bound-cache", cache)
        read_cache(cache)
    nodes_path, pods_path = args.data / NODES, args.data / PODS
    seeds = parse_seeds("0-9") if args.tune else parse_seeds("100-109") if args.held_out else args.seeds
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        print(f"sim_gap: unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
        return 2
    pods = load_pods(pods_path)
    how = {
        1: "",
        2: ", online bound with a second pivot",
        3: ", online bound with a second and third pivot",
        4: ", online bound with up to four pivots",
        5: ", online bound with up to five pivots",
    }[pivots] + (" (whole-GPU shapes among them)" if args.whole_pivots else "")
    if args.tightest:
        how += "; per seed the tightest online bound cached (--tightest)"
    suffix = _KEY_SUFFIX[pivots] + ("/whole" if args.whole_pivots else "")  # the bound cache's key
    print(f"seeds {seeds[0]}-{seeds[-1]} ({len(seeds)}), inflate 1.3, ties node-order{how}\n")
    print("| variant | bound | FGD | kubegpu | FGD gap | kubegpu gap | share of FGD's gap closed |")
    print("|---|---|---|---|---|---|---|")
    online_rows: list[str] = []
    plan_rows: list[str] = []
    shares: list[GapClosed] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            started = time.perf_counter()
            path = pods_path
            if name != "default":
                path = Path(tmp) / f"{name}.csv"
                write_pods(
                    path, gpushare_variant(pods, int(name.removeprefix("gpushare")), seed=VARIANT_SEED)
                )
            workload = prepare(load_trace(nodes_path, path))
            prefix = f"{name}/{_digest(nodes_path, path)}"
            pairs = cached_bounds(
                workload,
                seeds,
                args.workers,
                key=f"{prefix}{suffix}",
                cache=cache,
                pivots=pivots,
                whole=args.whole_pivots,
                lowest_of=prefix if args.tightest else None,
            )
            request = SimRequest(
                policies=(Policy.FGD, Policy.KUBEGPU, Policy.KUBEGPU_PLAN), seeds=seeds, workers=args.workers
            )
            runs = run_all(workload, request)
            summaries = {s.policy: s for s in summarise_all(runs, workload, 1.3)}
            fgd = summaries[Policy.FGD].at(130)[0] or 0.0
            ours = summaries[Policy.KUBEGPU].at(130)[0] or 0.0
            planned = summaries[Policy.KUBEGPU_PLAN].at(130)[0] or 0.0
            bound_pcts = [b for b, _ in pairs]
            online_pcts = [o for _, o in pairs]
            bound = statistics.fmean(bound_pcts)
            sd = statistics.pstdev(bound_pcts)
            closed = _share(ours, fgd, bound)
            print(
                f"| {name} | {bound:.2f} ± {sd:.2f} | {fgd:.2f} | {ours:.2f} | {bound - fgd:.2f} | "
                f"{bound - ours:.2f} | {closed:.1f} % |",
                flush=True,
            )
            online = statistics.fmean(online_pcts)
            target = fgd + 0.4 * (bound - fgd)
            # the online bound holds for both policies (each places every pod that fits): per seed
            under = all(
                a <= o + 1e-6
                for policy in (Policy.FGD, Policy.KUBEGPU)
                for a, o in zip(_final_pct(workload, runs[policy]), online_pcts, strict=True)
            )
            plan_under = all(
                a <= o + 1e-6
                for a, o in zip(_final_pct(workload, runs[Policy.KUBEGPU_PLAN]), online_pcts, strict=True)
            )
            goal = fgd + GOAL * (online - fgd)
            for policy, mean in ((Policy.KUBEGPU, ours), (Policy.KUBEGPU_PLAN, planned)):
                shares.append(
                    GapClosed(
                        workload=name,
                        policy=policy.value,
                        overall=_share(mean, fgd, online),
                        per_seed=_seed_shares(runs[policy], runs[Policy.FGD], online_pcts),
                    )
                )
            plan_rows.append(
                f"| {name} | {online:.2f} | {fgd:.2f} | {ours:.2f} | {planned:.2f} | {planned - ours:+.2f} | "
                f"{_share(planned, fgd, bound):.1f} % | "
                f"{_share(planned, fgd, online):.1f} % | "
                f"{goal:.2f} ({'met' if planned >= goal else 'not met'}) | "
                f"{'yes' if plan_under else 'NO'} |"
            )
            online_closed = _share(ours, fgd, online)
            online_rows.append(
                f"| {name} | {bound:.2f} | {online:.2f} ± {statistics.pstdev(online_pcts):.2f} | {fgd:.2f} | "
                f"{ours:.2f} | {target:.2f} | {'no' if target > online else 'yes'} | "
                f"{online - fgd:.2f} | {online_closed:.1f} % | {'yes' if under else 'NO'} |"
            )
            print(f"sim_gap: {name} took {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    print(
        "\nThe online bound (docs/sim.md): no policy that places every pod that fits on arrival"
        " allocates more.\n"
    )
    print(
        "| variant | bound | online bound | FGD | kubegpu | 40 % of FGD's gap to the bound | "
        "reachable online | FGD's gap to the online bound | share of it closed | "
        "both under it on every seed |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in online_rows:
        print(row)
    print("\nkubegpu-plan (docs/sim.md): kubegpu with each share placed by the plan's value-to-go.\n")
    print(
        "| variant | online bound | FGD | kubegpu | kubegpu-plan | plan - kubegpu | "
        "share of FGD's gap to the bound closed | share of FGD's gap to the online bound closed | "
        f"{GOAL:.0%} of FGD's gap to the online bound (issue 30's goal) | "
        "under the online bound on every seed |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in plan_rows:
        print(row)
    if args.plot is not None:
        label = {1: "one pivot", 2: "two pivots", 3: "three pivots", 4: "up to four", 5: "up to five"}[pivots]
        label += " with whole-GPU ones" if args.whole_pivots else ""
        label = "the tightest cached per seed" if args.tightest else label
        title = f"Seeds {seeds[0]}-{seeds[-1]}; online bound: {label}"
        plot_gap_closed(shares, args.plot, goal_pct=GOAL * 100, title=title)
        print(f"sim_gap: wrote {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    benchcli.run_main(main)
