"""What `kubegpu sim` does once its flags are parsed, and a parser for its common form that needs no typer.

Start-up is a large part of one replay's wall time (about a second in all), and typer with what it
imports (click, pydantic for its value coercion) is most of the start-up. ``fast_main`` parses the
plain form ``kubegpu sim --nodes N --pods P [--policy ...] [--seeds ...] [--json] ...`` itself and
runs ``run_sim``; anything else (``--help``, a subcommand, an unknown flag, a value it would have to
guess about) returns ``False`` and goes through typer (``kubegpu.cli.sim``), which calls the same
``run_sim``. Both paths give the same output and the same errors.
"""

from __future__ import annotations

import json
import math
import sys
from functools import partial
from pathlib import Path
from typing import Any

from kubegpu.atomicfile import writable_folder_error
from kubegpu.errors import InputError

MAX_NODE_LEVEL_CORES = 1024  # `sim bound --node-level`: 4,096 grid steps of 0.25 core, a few 100 MB
# What `kubegpu sim` replays by default: the artifact's six and kubegpu's default placement, the
# plan-guided `kubegpu-plan`; `kubegpu` (its score without the plan) stays reachable by name.
DEFAULT_POLICIES = ("random", "dotprod", "clustering", "packing", "bestfit", "fgd", "kubegpu-plan")
ALL_POLICIES = (*DEFAULT_POLICIES, "kubegpu")


def run_sim(
    *,
    nodes: Path | None,
    pods: Path | None,
    policy: list[str] | None,
    seeds: str,
    inflate: float,
    tie: str,
    order: str,
    workers: int,
    as_json: bool,
    plot: Path | None,
    out: Path | str | None,
    with_bound: bool,
) -> None:
    """Replay a trace under placement policies and print (or write) the results."""
    from kubegpu.sim.openb import resolve
    from kubegpu.sim.replay import Order, TieMode
    from kubegpu.sim.run import SimRequest, parse_seeds, report_json, summarise_all
    from kubegpu.sim.trace import load_trace
    from kubegpu.sim.workload import prepare

    try:
        tie_mode = TieMode(tie)
    except ValueError:
        raise InputError(f"--tie {tie!r}: choose node-order or random") from None
    try:
        order_mode = None if order == "auto" else Order(order)
    except ValueError:
        raise InputError(f"--order {order!r}: choose auto, none or crc") from None
    request = SimRequest(
        policies=_policies(policy),
        seeds=parse_seeds(seeds),
        inflate=inflate,
        tie=tie_mode,
        order=order_mode,
        workers=workers,
    )
    if workers < 1:
        raise InputError(f"--workers must be at least 1, got {workers}")
    check_inflate(inflate)
    if out is not None:
        check_out_dir(out)
    if plot is not None:
        from kubegpu.sim.plot import check_plot_path

        check_plot_path(plot)  # now, not after minutes of replays
    trace = resolve(nodes, pods)
    workload = prepare(load_trace(trace.nodes, trace.pods))
    runs = _run_with_progress(workload, request, quiet=as_json)
    summaries = summarise_all(runs, workload, inflate)
    document = report_json(summaries, request=request, workload=workload)
    bound_pct: float | None = None
    if with_bound:
        from kubegpu.sim.bound import bound_json, with_bound_share

        results = bounds(workload, request.seeds, inflate, quiet=as_json)
        bound_doc = bound_json(results, seeds=request.seeds, inflate=inflate, workload=workload)
        document = with_bound_share(document, bound_doc)
        bound_pct = float(document["bound"]["bound_pct_mean"])
    if plot is not None:
        from kubegpu.sim.plot import plot_curves

        plot_curves(
            summaries,
            plot,
            title=f"{trace.pods.name} on {trace.nodes.name}, ties: {tie_mode.value}",
            bound_pct=bound_pct,
        )
        print(f"kubegpu: wrote {plot}", file=sys.stderr)
    if out is not None:
        _write_out(Path(out), summaries, document)
        names = ", ".join(str(Path(out) / n) for n in ("summary.json", "curves.csv", "failed_pods.csv"))
        print(f"kubegpu: wrote {names}", file=sys.stderr)
    if as_json:
        print(json.dumps(document))
    else:
        _render(summaries, document)
        if with_bound:
            render_bound(document)


def _policies(names: list[str] | None) -> tuple[Any, ...]:
    from kubegpu.sim.scoring import Policy

    if not names:
        return tuple(Policy(n) for n in DEFAULT_POLICIES)
    out = []
    for name in names:
        for raw in name.split(","):
            part = raw.strip().lower()
            try:
                policy = Policy(part)
            except ValueError:
                raise InputError(
                    f"--policy {part!r}: unknown policy; choose from {', '.join(p.value for p in Policy)}"
                ) from None
            if policy not in out:
                out.append(policy)
    return tuple(out)


# columns left out, in this order, when the table would be wider than the terminal (their values
# then follow the table as one line per policy)
_OPTIONAL_COLUMNS = ("pods/s", "s")


def _fit_columns(header: list[str], rows: list[list[str]], width: int) -> list[int]:
    """The indices of the columns to show so that the table fits ``width`` terminal cells (a
    borderless table: one cell of padding each side of a gap); optional columns go first."""
    from rich.cells import cell_len

    widths = [max(cell_len(c) for c in [h, *(r[i] for r in rows)]) for i, h in enumerate(header)]
    keep = list(range(len(header)))
    for name in _OPTIONAL_COLUMNS:
        if sum(widths[i] for i in keep) + 2 * (len(keep) - 1) <= width:
            break
        keep.remove(header.index(name))
    return keep


def _render(summaries: list[Any], document: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    header = ["policy", "alloc@100", "alloc@130", "unalloc", "frag", "ratio", "link", "split", "s", "pods/s"]
    caption = (
        "alloc: allocated GPU % at 100/130 % arrived; unalloc: idle GPUs at 130 %; frag/ratio: "
        "fragmentation (% of GPUs / % of idle GPU) at 90 %; link: multi-GPU link cost, mean/p95; "
        "split: share of multi-GPU pods across NVLink groups"
    )
    bound = document.get("bound")
    if bound is not None:
        header.append("of bound")
        caption += f"; of bound: alloc@130 as % of the upper bound ({bound['bound_pct_mean']:.2f} %)"
    rows: list[list[str]] = []
    for s in summaries:
        a100, _ = s.at(100)
        a130, sd130 = s.at(130)
        frag90 = s.frag_mean[90] if len(s.frag_mean) > 90 else float("nan")
        ratio90 = s.frag_ratio_mean[90] if len(s.frag_ratio_mean) > 90 else float("nan")
        comm = f"{s.comm_mean:.2f}/{s.comm_p95:.2f}" if s.comm_mean is not None else "-"
        split = f"{s.comm_split_share * 100:.1f}%" if s.comm_split_share is not None else "-"
        extra = []
        if bound is not None:
            share = document["policies"][s.policy.value].get("share_of_bound_pct_at_130")
            extra.append("-" if share is None else f"{share:.2f}%")
        rows.append(
            [
                s.policy.value,
                "-" if a100 is None else f"{a100:.2f}",
                "-" if a130 is None else f"{a130:.2f}±{sd130:.2f}",
                "-" if s.unallocated_gpus(130) is None else f"{s.unallocated_gpus(130):.0f}",
                "-" if math.isnan(frag90) else f"{frag90:.2f}",  # no replay reached 90 % arrived
                "-" if math.isnan(ratio90) else f"{ratio90:.1f}",
                comm,
                split,
                f"{s.seconds:.1f}",
                f"{s.pods_per_second:,.0f}",
                *extra,
            ]
        )
    keep = _fit_columns(header, rows, console.width)
    table = Table(
        title=(
            f"GPU allocation, {len(document['seeds'])} seed(s), ties: {document['tie']}, "
            f"order: {document['order']}, "
            f"{document['total_gpus']} GPUs on {document['nodes']} nodes"
        ),
        caption=caption,
        box=None,  # no rules: a gap is the two cells of padding _fit_columns counts
        pad_edge=False,
        header_style="bold underline",
    )
    for i in keep:
        table.add_column(header[i], justify="left" if i == 0 else "right", no_wrap=True)
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    console.print(table)
    if len(keep) < len(header):
        at = {name: header.index(name) for name in ("s", "pods/s")}
        for row in rows:
            console.print(f"{row[0]}: {row[at['s']]} s, {row[at['pods/s']]} pods/s")
    console.print(
        f"empty-cluster fragmentation: {document['empty_cluster_frag_pct']:.2f} % "
        f"({document['typical_shapes']} typical pod shapes)"
    )
    failed = Table(title="failed pods per seed, most frequent shapes")
    failed.add_column("policy")
    failed.add_column("failed/seed", justify="right")
    failed.add_column("top shapes (cores/GPUs x milli)")
    for s in summaries:
        total = sum(n for _, n in s.failed_by_shape)
        top = ", ".join(f"{label} {n:.0f}" for label, n in s.failed_by_shape[:4])
        failed.add_row(s.policy.value, f"{total:.0f}", top or "-")
    console.print(failed)


def _write_out(out: Path, summaries: list[Any], document: dict[str, Any]) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        lines = ["policy,arrived_pct,allocated_pct,allocated_pct_std,frag_pct,frag_ratio_pct"]
        for s in summaries:
            for x in range(len(s.alloc_mean)):
                lines.append(
                    f"{s.policy.value},{x},{s.alloc_mean[x]:.2f},{s.alloc_std[x]:.2f},"
                    f"{s.frag_mean[x]:.2f},{s.frag_ratio_mean[x]:.2f}"
                )
        (out / "curves.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        rows = ["policy,shape,failed_per_seed"]
        for s in summaries:
            rows.extend(f"{s.policy.value},{label},{n:.2f}" for label, n in s.failed_by_shape)
        (out / "failed_pods.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"--out {out}: cannot write: {exc.strerror or exc}") from exc


_FILE_SUFFIXES = frozenset({".json", ".csv", ".png", ".svg", ".pdf", ".txt", ".yaml", ".yml"})


def check_out_dir(out: Path | str) -> None:
    """Refuse an ``--out`` that cannot be a folder of results (checked before any replay runs)."""
    if not str(out):  # typer passes the text: Path("") would be "." (the current folder)
        raise InputError("--out: empty path; name the folder for summary.json, curves.csv, failed_pods.csv")
    if Path(out).exists() and not Path(out).is_dir():
        raise InputError(f"--out {out}: is a file; name a folder for the results")
    if not Path(out).exists() and Path(out).suffix.lower() in _FILE_SUFFIXES:
        raise InputError(
            f"--out {out}: names a folder (it gets summary.json, curves.csv, failed_pods.csv), and "
            f"this looks like a file name; for one JSON document use --json > {out}"
        )
    problem = writable_folder_error(Path(out))
    if problem:
        raise InputError(f"--out {out}: {problem}")


def check_node_level(workload: Any, cpu_step: float) -> None:
    """Refuse ``--node-level`` on a node too large for its core grid (memory grows with its square)."""
    gpu_rows = [i for i, gpus in enumerate(workload.node_gpus) if gpus > 0]
    row = max(gpu_rows, key=lambda i: int(workload.node_cpu_milli[i]))
    cores = int(workload.node_cpu_milli[row]) / 1000
    if cores > MAX_NODE_LEVEL_CORES:
        raise InputError(
            f"--node-level: node {workload.node_names[row]} has {cores:,g} cores; the node-level bound "
            f"takes GPU nodes of up to {MAX_NODE_LEVEL_CORES:,} cores on its {cpu_step:g}-core grid "
            "(leave out --node-level)"
        )


def check_inflate(inflate: float) -> None:
    """``kubegpu.sim.workload.check_inflate``, imported only when a command checks its flag."""
    from kubegpu.sim.workload import check_inflate as check

    check(inflate)


HEARTBEAT_S = 10.0  # how often a bound still solving says so


def _say(text: str) -> None:
    print(text, file=sys.stderr)


def _per_seed(
    solve: Any,
    line: Any,
    workload: Any,
    seeds: tuple[int, ...],
    inflate: float,
    *,
    quiet: bool,
    say: Any = _say,
) -> list[Any]:
    """``solve(workload, seed, inflate=...)`` per seed, with ``line(result)`` on stderr after each and,
    while one runs, a line every ``HEARTBEAT_S`` seconds (a node-level or second-pivot solve takes
    minutes, and silence looks like a hang)."""
    import threading
    import time

    def beat(seed: int, i: int, done: threading.Event) -> None:
        started = time.monotonic()
        while not done.wait(HEARTBEAT_S):
            say(f"bound seed {seed} ({i}/{len(seeds)}): solving, {time.monotonic() - started:.0f} s so far")

    out = []
    for i, seed in enumerate(seeds, 1):
        done = threading.Event()
        if not quiet:
            threading.Thread(target=beat, args=(seed, i, done), name="bound-heartbeat", daemon=True).start()
        try:
            result = solve(workload, seed, inflate=inflate)
        finally:
            done.set()
        if not quiet:
            say(f"bound seed {seed} ({i}/{len(seeds)}): {line(result)}")
        out.append(result)
    return out


def bounds(
    workload: Any, seeds: tuple[int, ...], inflate: float, *, quiet: bool, cpu_step: float | None = None
) -> list[Any]:
    """One bound per seed, with a line per seed on stderr (a solve takes seconds)."""
    from kubegpu.sim.bound import seed_bound

    def line(r: Any) -> str:
        return f"{r.bound_pct:.2f} % ({r.columns} columns, {r.seconds:.1f} s)"

    return _per_seed(partial(seed_bound, cpu_step=cpu_step), line, workload, seeds, inflate, quiet=quiet)


def online_bounds(
    workload: Any,
    seeds: tuple[int, ...],
    inflate: float,
    *,
    quiet: bool,
    cpu_step: float | None = None,
    pivots: int = 1,
    whole_pivots: bool = False,
) -> list[Any]:
    """The online bound (with the offline one) per seed, a line per seed on stderr."""
    from kubegpu.sim.online_bound import online_bound

    def line(r: Any) -> str:
        second = "".join(f" and {p}" for p in (r.second_pivot, r.third_pivot, *r.more_pivots) if p)
        return (
            f"{r.offline_pct:.2f} %, online {r.bound_pct:.2f} % (pivot {r.pivot or 'none'}{second}, "
            f"{r.solves} LPs, {r.seconds:.1f} s)"
        )

    solve = partial(online_bound, cpu_step=cpu_step, pivots=pivots, whole_pivots=whole_pivots)
    return _per_seed(solve, line, workload, seeds, inflate, quiet=quiet)


def render_bound(document: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    b = document["bound"]
    online = "online_bound_pct_mean" in b
    table = Table(
        title=(
            f"Upper bound on allocated GPU %, {len(document['seeds'])} seed(s), "
            f"{document['total_gpus']} GPUs on {document['nodes']} nodes"
        )
    )
    table.caption = "bound: no policy, online or offline, allocates more of the GPUs for the seed's arrivals"
    if b.get("node_level_cpu_step") is not None:
        table.caption += (
            f" (node-level: each node within its own cores, on a {b['node_level_cpu_step']:g}-core grid)"
        )
    columns = ["seed", "arrived %", "bound %"]
    if online:
        table.caption += (
            "; online: no policy that places every pod that fits on arrival does"
            " (pivot: the share forced in, placed: how many of it the maximum places)"
        )
        if any(row.get("second_pivot") for row in b["per_seed"]):
            table.caption += "; pivot + more pivots: placed jointly (placed: the first)"
        columns += ["online %", "pivot", "placed"]
    for col in (*columns, "columns", "s"):
        table.add_column(col, justify="right")
    for row in b["per_seed"]:
        cells = [str(row["seed"]), f"{row['arrived_pct']:.2f}", f"{row['bound_pct']:.2f}"]
        seconds = row["seconds"]
        if online:
            low, high = row["pivot_placed"]
            placed = f"{low}" if low == high else f"{low}-{high}"
            pivot = row["pivot"] or "-"
            if row.get("second_pivot"):
                pivot += f" + {row['second_pivot']}"
                for more in (row.get("third_pivot"), *row.get("more_pivots", ())):
                    if more:
                        pivot += f" + {more}"
                low, high = row["joint_placed"][0]
                placed = f"{low}" if low == high else f"{low}-{high}"
            cells += [
                f"{row['online_bound_pct']:.2f}",
                pivot,
                f"{placed} of {row['pivot_arrived']}" if row["pivot"] else "-",
            ]
            seconds = row["online_seconds"]
        table.add_row(*cells, str(row["columns"]), f"{seconds:.1f}")
    mean = ["mean", "", f"{b['bound_pct_mean']:.2f} ± {b['bound_pct_std']:.2f}"]
    if online:
        mean += [f"{b['online_bound_pct_mean']:.2f} ± {b['online_bound_pct_std']:.2f}", "", ""]
    table.add_row(*mean, "", "", end_section=True)
    Console().print(table)


def _run_with_progress(workload: Any, request: Any, *, quiet: bool) -> Any:
    from kubegpu.sim.run import run_all

    if quiet or not sys.stderr.isatty():  # no bar to draw: do not pay for importing rich
        return run_all(workload, request)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    show = console.is_terminal
    total = len(request.policies) * len(request.seeds)
    with Progress(
        TextColumn("[bold]sim[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not show,
        transient=True,
    ) as progress:
        task = progress.add_task("replays", total=total)
        done = [0]

        def on_done(run: Any) -> None:
            done[0] += 1
            progress.update(task, completed=done[0], description=f"{run.policy.value} seed {run.seed}")

        def on_progress(step: int, count: int) -> None:
            progress.update(task, completed=done[0] + step / count)

        return run_all(workload, request, on_done=on_done, on_progress=on_progress if show else None)


# the flags of the plain command: name -> how its value is read (None: a flag without a value)
_VALUE_FLAGS: dict[str, Any] = {
    "--nodes": Path,
    "--pods": Path,
    "--policy": str,
    "--seeds": str,
    "--inflate": float,
    "--tie": str,
    "--order": str,
    "--workers": int,
    "--plot": Path,
    "--out": Path,
}
_BOOL_FLAGS = {"--json": "as_json", "--bound": "with_bound"}


def _number(text: str, kind: Any) -> Any:
    """``text`` as an int or float where it is unmistakably one, else ``None`` (typer then decides)."""
    plain = text.strip()
    if kind is int:
        return int(plain) if plain.lstrip("+-").isdigit() and plain == text else None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if plain == text and plain[-1:].isdigit() else None


def parse_fast(argv: list[str]) -> dict[str, Any] | None:
    """The keyword arguments of ``run_sim`` for ``kubegpu sim ARGV``, or ``None`` if typer must parse it."""
    got: dict[str, Any] = {
        "nodes": None,
        "pods": None,
        "policy": None,
        "seeds": "42-51",
        "inflate": 1.3,
        "tie": "node-order",
        "order": "auto",
        "workers": 1,
        "as_json": False,
        "plot": None,
        "out": None,
        "with_bound": False,
    }
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in _BOOL_FLAGS:
            got[_BOOL_FLAGS[arg]] = True
            i += 1
            continue
        name, eq, value = arg.partition("=")
        kind = _VALUE_FLAGS.get(name)
        if kind is None:
            return None  # --help, a subcommand, an unknown flag or argument: typer's to answer
        if not eq:
            if i + 1 >= len(argv):
                return None
            value = argv[i + 1]
            i += 1
        i += 1
        if not value or (value.startswith("-") and kind not in {int, float}):
            return None
        if kind is int or kind is float:
            parsed = _number(value, kind)
            if parsed is None:
                return None
        else:
            parsed = kind(value)
        key = name[2:]
        if key == "policy":
            got["policy"] = [*(got["policy"] or []), parsed]
        else:
            got[key] = parsed
    return got


def fast_main(argv: list[str]) -> bool:
    """Run ``kubegpu sim ARGV`` without typer if its form is the plain one; ``False`` if not run."""
    parsed = parse_fast(argv)
    if parsed is None:
        return False
    run_sim(**parsed)
    return True
