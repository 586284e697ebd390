"""`kubegpu sim`: replay a GPU cluster trace under placement policies and compare them.

Thin layer over ``kubegpu.sim``: parse flags, load the trace, run the replays (with a progress bar
on a terminal), render a table or ``--json``, and write ``--plot`` / ``--out`` files. ``kubegpu sim
variant`` writes a resampled pod list with a different mix of pod kinds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from kubegpu.errors import InputError

MAX_INFLATE = 10.0  # arrivals of 10x the GPU capacity: every curve is flat long before
ALL_POLICIES = ("random", "dotprod", "clustering", "packing", "bestfit", "fgd", "kubegpu")


def _policies(names: list[str] | None) -> tuple[Any, ...]:
    from kubegpu.sim.scoring import Policy

    if not names:
        return tuple(Policy(n) for n in ALL_POLICIES)
    out = []
    for name in names:
        for raw in name.split(","):
            part = raw.strip().lower()
            try:
                policy = Policy(part)
            except ValueError:
                raise InputError(
                    f"--policy {part!r}: unknown policy; choose from {', '.join(ALL_POLICIES)}"
                ) from None
            if policy not in out:
                out.append(policy)
    return tuple(out)


def _render(summaries: list[Any], document: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(
        title=(
            f"GPU allocation, {len(document['seeds'])} seed(s), ties: {document['tie']}, "
            f"order: {document['order']}, "
            f"{document['total_gpus']} GPUs on {document['nodes']} nodes"
        )
    )
    table.caption = (
        "alloc: allocated GPU % at 100/130 % arrived; unalloc: idle GPUs at 130 %; frag/ratio: "
        "fragmentation (% of GPUs / % of idle GPU) at 90 %; link: multi-GPU link cost; split: share "
        "of multi-GPU pods across NVLink groups"
    )
    for col in (
        "policy",
        "alloc@100",
        "alloc@130",
        "unalloc",
        "frag",
        "ratio",
        "link mean/p95",
        "split",
        "s",
        "pods/s",
    ):
        table.add_column(col, justify="left" if col == "policy" else "right")
    bound = document.get("bound")
    if bound is not None:
        table.add_column("of bound", justify="right")
        table.caption += f"; of bound: alloc@130 as % of the upper bound ({bound['bound_pct_mean']:.2f} %)"
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
        table.add_row(
            s.policy.value,
            "-" if a100 is None else f"{a100:.2f}",
            "-" if a130 is None else f"{a130:.2f} ± {sd130:.2f}",
            "-" if s.unallocated_gpus(130) is None else f"{s.unallocated_gpus(130):.0f}",
            f"{frag90:.2f}",
            f"{ratio90:.1f}",
            comm,
            split,
            f"{s.seconds:.1f}",
            f"{s.pods_per_second:,.0f}",
            *extra,
        )
    console.print(table)
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


def register(app: typer.Typer) -> None:
    """Add ``kubegpu sim`` (and ``kubegpu sim variant``) to the app."""
    sim_app = typer.Typer(
        help="Replay a GPU cluster trace (FGD / Alibaba openb schema) and compare placement policies.",
        no_args_is_help=False,
        invoke_without_command=True,
    )

    @sim_app.callback(
        invoke_without_command=True,
        epilog="Examples: kubegpu sim --nodes nodes.csv --pods pods.csv · "
        "kubegpu sim --nodes nodes.csv --pods pods.csv --policy fgd --policy kubegpu --seeds 42 --json · "
        "kubegpu sim variant --pods pods.csv --nodes nodes.csv --shared 0.4 -o variant.csv",
    )
    def sim(  # noqa: PLR0917 - typer maps each parameter to a flag
        ctx: typer.Context,
        nodes: Annotated[
            Path | None,
            typer.Option("--nodes", help="Node list CSV (sn, cpu_milli, memory_mib, gpu, model)."),
        ] = None,
        pods: Annotated[
            Path | None,
            typer.Option(
                "--pods",
                help="Pod list CSV (name, cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec, ...]).",
            ),
        ] = None,
        policy: Annotated[
            list[str] | None,
            typer.Option(
                "--policy", help=f"Policy to replay (repeatable): {', '.join(ALL_POLICIES)}. Default: all."
            ),
        ] = None,
        seeds: Annotated[str, typer.Option("--seeds", help="Seeds: 42, 42-51 or 42,44.")] = "42-51",
        inflate: Annotated[
            float,
            typer.Option(
                "--inflate", help="Inflate arrivals to this multiple of GPU capacity (0: replay as is)."
            ),
        ] = 1.3,
        tie: Annotated[
            str,
            typer.Option(
                "--tie",
                help="Ties between equal scores: node-order (the artifact's) or random (kube-scheduler's).",
            ),
        ] = "node-order",
        order: Annotated[
            str,
            typer.Option(
                "--order",
                help="Fixed node order before the tie rule: auto (each policy's default: crc for kubegpu, "
                "none for the others), none, or crc (highest CRC-32 of the node name first).",
            ),
        ] = "auto",
        workers: Annotated[int, typer.Option("--workers", help="Worker processes.")] = 1,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print one JSON object instead of tables.")
        ] = False,
        plot: Annotated[
            Path | None, typer.Option("--plot", help="Write the curves to this PNG file.")
        ] = None,
        out: Annotated[
            Path | None,
            typer.Option("--out", help="Write summary.json, curves.csv and failed_pods.csv here."),
        ] = None,
        with_bound: Annotated[
            bool,
            typer.Option(
                "--bound",
                help="Also compute the upper bound (kubegpu sim bound) per seed, about 4 s each, "
                "and show each policy as a share of it.",
            ),
        ] = False,
    ) -> None:
        """Replay a trace under placement policies: allocation and fragmentation curves, failed pods."""
        if ctx.invoked_subcommand is not None:
            return
        if nodes is None or pods is None:
            raise InputError("kubegpu sim needs --nodes NODES.csv and --pods PODS.csv")
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
        if not 0 <= inflate <= MAX_INFLATE:
            raise InputError(
                f"--inflate must be 0 (no inflation) or a multiple of capacity up to {MAX_INFLATE:g},"
                f" got {inflate}"
            )
        workload = prepare(load_trace(nodes, pods))
        runs = _run_with_progress(workload, request, quiet=as_json)
        summaries = summarise_all(runs, workload, inflate)
        document = report_json(summaries, request=request, workload=workload)
        bound_pct: float | None = None
        if with_bound:
            from kubegpu.sim.bound import bound_json, with_bound_share

            results = _bounds(workload, request.seeds, inflate, quiet=as_json)
            bound_doc = bound_json(results, seeds=request.seeds, inflate=inflate, workload=workload)
            document = with_bound_share(document, bound_doc)
            bound_pct = float(document["bound"]["bound_pct_mean"])
        if plot is not None:
            from kubegpu.sim.plot import plot_curves

            plot_curves(
                summaries,
                plot,
                title=f"{Path(pods).name} on {Path(nodes).name}, ties: {tie_mode.value}",
                bound_pct=bound_pct,
            )
        if out is not None:
            _write_out(out, summaries, document)
        if as_json:
            typer.echo(json.dumps(document))
        else:
            _render(summaries, document)
            if with_bound:
                _render_bound(document)

    @sim_app.command(
        "variant",
        epilog="Examples: kubegpu sim variant --pods pods.csv --nodes nodes.csv --shared 0.4 -o shared.csv · "
        "kubegpu sim variant --pods pods.csv --nodes nodes.csv --cpu-only 0.2 --count 5000 --seed 1 -o v.csv",
    )
    def variant(  # noqa: PLR0917 - typer maps each parameter to a flag
        pods: Annotated[Path, typer.Option("--pods", help="Pod list to draw from.")],
        nodes: Annotated[Path, typer.Option("--nodes", help="Node list (for GPU models and sizes).")],
        output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the variant pod list.")],
        cpu_only: Annotated[
            float | None, typer.Option("--cpu-only", help="Fraction of pods without GPUs.")
        ] = None,
        shared: Annotated[
            float | None, typer.Option("--shared", help="Fraction of GPU pods sharing one GPU.")
        ] = None,
        multi_gpu: Annotated[
            float | None, typer.Option("--multi-gpu", help="Fraction of GPU pods with 2+ GPUs.")
        ] = None,
        gpu_spec: Annotated[
            float | None, typer.Option("--gpu-spec", help="Fraction of GPU pods pinned to one GPU model.")
        ] = None,
        count: Annotated[
            int | None, typer.Option("--count", help="Number of pods (default: as many as the input).")
        ] = None,
        seed: Annotated[int, typer.Option("--seed", help="Random seed.")] = 0,
        preset: Annotated[
            str | None,
            typer.Option(
                "--preset",
                help="The FGD artifact's GPU-sharing pod lists: gpushare20, 40, 60, 80 or 100 "
                "(sharing pods' share of GPU demand); not with the mix knobs.",
            ),
        ] = None,
    ) -> None:
        """Write a variant of a pod list with more CPU-only, shared, multi-GPU or model-pinned pods."""
        from kubegpu.sim.trace import load_nodes, load_pods, write_pods
        from kubegpu.sim.variants import VariantKnobs, gpushare_variant, make_variant, pod_mix

        if preset is not None:
            if any(v is not None for v in (cpu_only, shared, multi_gpu, gpu_spec, count)):
                raise InputError(
                    f"--preset {preset} sets the whole mix; "
                    "drop --cpu-only/--shared/--multi-gpu/--gpu-spec/--count"
                )
            digits = preset.strip().lower().removeprefix("gpushare")
            if not digits.isdigit():
                raise InputError(
                    f"--preset {preset!r}: unknown preset; choose from "
                    "gpushare20, gpushare40, gpushare60, gpushare80, gpushare100"
                )
            load_nodes(nodes)  # checked like the knobs' case, though the preset needs no node data
            made = gpushare_variant(load_pods(pods), int(digits), seed=seed)
        else:
            knobs = VariantKnobs(
                cpu_only=cpu_only,
                shared=shared,
                multi_gpu=multi_gpu,
                gpu_spec=gpu_spec,
                count=count,
                seed=seed,
            )
            made = make_variant(load_pods(pods), load_nodes(nodes), knobs)
        try:
            write_pods(output, made)
        except OSError as exc:
            raise InputError(f"--output {output}: cannot write: {exc.strerror or exc}") from exc
        mix = pod_mix(made)
        typer.echo(
            f"wrote {len(made)} pods to {output}: cpu-only {mix['cpu_only']:.1%}, shared {mix['shared']:.1%} "
            f"and multi-GPU {mix['multi_gpu']:.1%} of GPU pods, model-pinned {mix['gpu_spec']:.1%}"
        )

    @sim_app.command(
        "bound",
        epilog="Examples: kubegpu sim bound --nodes nodes.csv --pods pods.csv · "
        "kubegpu sim bound --nodes nodes.csv --pods pods.csv --seeds 42-51 --json",
    )
    def bound(
        nodes: Annotated[
            Path, typer.Option("--nodes", help="Node list CSV (sn, cpu_milli, memory_mib, gpu, model).")
        ],
        pods: Annotated[
            Path,
            typer.Option(
                "--pods",
                help="Pod list CSV (name, cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec, ...]).",
            ),
        ],
        seeds: Annotated[str, typer.Option("--seeds", help="Seeds: 42, 42-51 or 42,44.")] = "42-51",
        inflate: Annotated[
            float,
            typer.Option(
                "--inflate", help="Inflate arrivals to this multiple of GPU capacity (0: the trace as is)."
            ),
        ] = 1.3,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print one JSON object instead of a table.")
        ] = False,
    ) -> None:
        """An upper bound on the GPU % any policy can allocate for each seed's arrivals (an LP relaxation)."""
        from kubegpu.sim.run import parse_seeds
        from kubegpu.sim.trace import load_trace
        from kubegpu.sim.workload import prepare

        seed_list = parse_seeds(seeds)
        _check_inflate(inflate)
        workload = prepare(load_trace(nodes, pods))
        results = _bounds(workload, seed_list, inflate, quiet=as_json)
        from kubegpu.sim.bound import bound_json

        document = bound_json(results, seeds=seed_list, inflate=inflate, workload=workload)
        if as_json:
            typer.echo(json.dumps(document))
        else:
            _render_bound(document)

    app.add_typer(sim_app, name="sim")


def _check_inflate(inflate: float) -> None:
    if not 0 <= inflate <= MAX_INFLATE:
        raise InputError(
            f"--inflate must be 0 (no inflation) or a multiple of capacity up to {MAX_INFLATE:g},"
            f" got {inflate}"
        )


def _bounds(workload: Any, seeds: tuple[int, ...], inflate: float, *, quiet: bool) -> list[Any]:
    """One bound per seed, with a line per seed on stderr (a solve takes seconds)."""
    from kubegpu.sim.bound import seed_bound

    out = []
    for i, seed in enumerate(seeds, 1):
        result = seed_bound(workload, seed, inflate=inflate)
        if not quiet:
            typer.echo(
                f"bound seed {seed} ({i}/{len(seeds)}): {result.bound_pct:.2f} % "
                f"({result.columns} columns, {result.seconds:.1f} s)",
                err=True,
            )
        out.append(result)
    return out


def _render_bound(document: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    b = document["bound"]
    table = Table(
        title=(
            f"Upper bound on allocated GPU %, {len(document['seeds'])} seed(s), "
            f"{document['total_gpus']} GPUs on {document['nodes']} nodes"
        )
    )
    table.caption = "no policy, online or offline, allocates more of the GPUs for the seed's arrivals"
    for col in ("seed", "arrived %", "bound %", "columns", "s"):
        table.add_column(col, justify="right")
    for row in b["per_seed"]:
        table.add_row(
            str(row["seed"]),
            f"{row['arrived_pct']:.2f}",
            f"{row['bound_pct']:.2f}",
            str(row["columns"]),
            f"{row['seconds']:.1f}",
        )
    table.add_row(
        "mean", "", f"{b['bound_pct_mean']:.2f} ± {b['bound_pct_std']:.2f}", "", "", end_section=True
    )
    Console().print(table)


def _run_with_progress(workload: Any, request: Any, *, quiet: bool) -> Any:
    import sys

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
